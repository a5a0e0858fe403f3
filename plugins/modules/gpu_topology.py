#!/usr/bin/python
"""Ansible module gpuops.cluster.gpu_topology: thin wrapper over module_utils.topology."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Read GPU NVLink, NUMA and NIC topology from C(nvidia-smi topo -m)
description:
  - Reads the matrix printed by C(nvidia-smi topo -m), either run on the host or given as text, and returns
    per-GPU CPU and NUMA affinity, NVLink peers and nearest NICs, the NVLink domains, the NUMA groups and,
    on request, disjoint NVLinked GPU sets for jobs of a given size.
  - Reads the output as it really comes, tab- or space-separated, with or without NIC rows, legend, NIC
    legend, C(NUMA Affinity) or C(GPU NUMA ID) columns, with CR LF line ends or terminal control sequences (driver
    580 underlines the header even into a pipe; they are removed before reading). Truncated or
    terminal-damaged captures are read as far as they go; what could not be read is explained in
    RV(topology_warnings), which are also shown as Ansible warnings.
  - Connection types are ranked, closest first, C(X) (self), C(NV#) (NVLink), C(PIX), C(PXB), C(PHB),
    C(NODE), C(SYS). The old name C(SOC) ranks with C(SYS).
  - C(nvidia-smi topo -mp) prints the PCIe-only matrix, which shows no NVLink even where there is some. When
    the legend (no C(NV#) line) or a command line above the matrix shows that, a warning says so; a
    multi-GPU matrix without NVLink and without a complete legend gets a weaker warning.
  - When O(matrix) is not given and C(nvidia-smi) is not on the PATH (no NVIDIA driver yet, or not a GPU
    host), the module does not fail; it returns no GPUs and a warning, so that preflight can report the host.
  - When C(nvidia-smi) exits non-zero, or its output (or O(matrix)) holds no matrix at all, the module fails
    and quotes the output.
version_added: 0.1.0
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  matrix:
    description:
      - Text of C(nvidia-smi topo -m) to read instead of running the command on the host, for example a
        capture kept in the inventory or fetched earlier.
      - An empty string returns no GPUs and a warning.
    type: str
  gpus_per_job:
    description:
      - Number of GPUs one job uses. When set, RV(placements) lists disjoint sets of that many GPUs that are
        pairwise NVLinked, chosen inside one NUMA node first.
      - Must be greater than 0.
    type: int
notes:
  - Runs C(nvidia-smi topo -m) with C(LC_ALL=C).
  - JSON object keys are strings, so RV(gpus[].nvlink_peers) maps the peer GPU index as a string to the link
    count.
  - The parser's warnings come back as RV(topology_warnings), not C(warnings), which Ansible reserves.
seealso:
  - name: nvidia-smi documentation
    description: The C(topo) sub-command and its legend.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Read the topology of the host
  gpuops.cluster.gpu_topology:
    gpus_per_job: 4
  register: __topology

- name: Start one job per NVLinked, NUMA-local set of 4 GPUs
  ansible.builtin.debug:
    msg: "CUDA_VISIBLE_DEVICES={{ item | join(',') }}"
  loop: "{{ __topology.placements }}"

- name: Pin each GPU's worker to its CPUs and NUMA node
  ansible.builtin.debug:
    msg: "GPU {{ item.index }}: numactl -C {{ item.cpu_affinity }} -m {{ item.numa_node }}"
  loop: "{{ __topology.gpus }}"
  when: item.cpu_affinity is not none and item.numa_node is not none

- name: Read a capture kept in the inventory (no GPU needed)
  gpuops.cluster.gpu_topology:
    matrix: "{{ lookup('ansible.builtin.file', 'captures/' ~ inventory_hostname ~ '_topo.txt') }}"
  delegate_to: localhost
"""

RETURN = r"""
gpus:
  description: One entry per GPU in the matrix header (and any GPU row without a column), by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index as nvidia-smi numbers it (C(GPU3) is 3).
      type: int
      sample: 0
    cpu_affinity:
      description: C(CPU Affinity) as a CPU list; null when absent, C(N/A) or damaged (see warnings).
      type: str
      sample: "0-51,104-155"
    numa_node:
      description: NUMA node of the GPU; null when C(NUMA Affinity) is absent, C(N/A) or names several nodes.
      type: int
      sample: 0
    numa_affinity:
      description: C(NUMA Affinity) as printed (for example C(0-3) in some VMs); null when absent.
      type: str
      sample: "0"
    gpu_numa_id:
      description: C(GPU NUMA ID) (the GPU memory's own NUMA node, on Grace systems); null when C(N/A) or absent.
      type: int
      sample: null
    nvlink_peers:
      description: Peer GPU index (as a string) to number of bonded NVLinks (C(NV18) is 18).
      type: dict
      sample: {"1": 18, "2": 18}
    nearest_nics:
      description:
        - NICs with the best-ranked connection to this GPU, in column order. Names come from the NIC Legend,
          else they are the column names (C(NIC0), or C(mlx5_0) on older drivers).
        - Empty when there are no NICs or when any link from this GPU to a NIC is unknown (truncated capture).
      type: list
      elements: str
      sample: ["mlx5_0", "mlx5_1"]
    nearest_nic_link:
      description: Connection type to the nearest NICs (C(PIX), C(PXB), C(PHB), C(NODE) or C(SYS)); null when none.
      type: str
      sample: PXB
nics:
  description: NIC names, in column order; NIC Legend names where the legend gives them.
  returned: always
  type: list
  elements: str
  sample: ["mlx5_0", "mlx5_1"]
nvlink_domains:
  description: Groups of GPUs connected through NVLink (connected components), each sorted, single GPUs included.
  returned: always
  type: list
  elements: list
  sample: [[0, 1], [2, 3]]
nvlink_all_to_all:
  description:
    - True when every pair of GPUs is directly NVLinked. True for a single GPU; false when there are no GPUs
      or when a pair's link is unknown.
  returned: always
  type: bool
  sample: true
numa_groups:
  description: GPUs per NUMA node, sorted by node. GPUs whose NUMA node is unknown are in no group.
  returned: always
  type: list
  elements: dict
  contains:
    numa_node:
      description: NUMA node.
      type: int
      sample: 0
    gpus:
      description: Indexes of the GPUs on that node, sorted.
      type: list
      elements: int
      sample: [0, 1, 2, 3]
  sample: [{"numa_node": 0, "gpus": [0, 1, 2, 3]}, {"numa_node": 1, "gpus": [4, 5, 6, 7]}]
placements:
  description:
    - Disjoint sets of O(gpus_per_job) GPUs whose members are pairwise NVLinked, sorted by lowest index.
      Chosen greedily, inside one NUMA node first, then across nodes from the GPUs left.
    - Empty when O(gpus_per_job) is not set or when no such set exists.
  returned: always
  type: list
  elements: list
  sample: [[0, 1, 2, 3], [4, 5, 6, 7]]
topology_warnings:
  description: What could not be read or looks wrong in the matrix, and why; each is also shown as a warning.
  returned: always
  type: list
  elements: str
  sample: ["NUMA Affinity '0-3' of GPU0, GPU1 spans several NUMA nodes (VM or NPS setting?): numa_node is null"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.text import cut
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import (
    empty_result,
    gpus_per_job_problem,
    parse_topology,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "matrix": {"type": "str"},
            "gpus_per_job": {"type": "int"},
        },
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LC_ALL": "C"}
    matrix = module.params["matrix"]
    gpus_per_job = module.params["gpus_per_job"]
    problem = gpus_per_job_problem(gpus_per_job)
    if problem:
        module.fail_json(msg=problem)

    if matrix is None:
        nvidia_smi = module.get_bin_path("nvidia-smi")
        if nvidia_smi is None:
            facts = empty_result(
                [
                    "nvidia-smi is not on the PATH (no NVIDIA driver installed yet, or not a GPU host): "
                    "no GPUs reported; install the driver, or pass a capture in `matrix`"
                ]
            )
            _exit(module, facts)
            return
        rc, out, err = module.run_command([nvidia_smi, "topo", "-m"])
        if rc != 0:
            module.fail_json(
                msg=f"`nvidia-smi topo -m` exited with rc={rc}: expected the GPU topology matrix; check that "
                f"the driver is loaded (`nvidia-smi` alone should list the GPUs). Output: {cut(out + err)}",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        matrix = out

    facts = parse_topology(matrix, gpus_per_job)
    if matrix.strip() and not facts["gpus"]:
        module.fail_json(
            msg=f"{facts['warnings'][0]}. Expected the output of `nvidia-smi topo -m`; pass it unchanged. "
            f"Raw text: {cut(matrix)}"
        )
    _exit(module, facts)


def _exit(module: AnsibleModule, facts: dict) -> None:
    warnings = facts.pop("warnings")
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, topology_warnings=warnings, **facts)


if __name__ == "__main__":
    main()
