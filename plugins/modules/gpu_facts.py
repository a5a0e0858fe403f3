#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""gpu_facts: NVIDIA GPUs, driver, CUDA driver API and Fabric Manager state in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU, driver and Fabric Manager facts in one call
version_added: 0.1.0
description:
  - Gathers the NVIDIA GPUs of a host, the driver and CUDA driver API versions, MIG and persistence
    modes, NUMA node and local CPUs, active NVLink links and whether NVIDIA Fabric Manager is required and running.
  - "Backends are tried in order: NVML through C(pynvml) (package C(nvidia-ml-py)), then one
    C(nvidia-smi -q -x) call (plus one C(nvidia-smi nvlink -s)), then PCI discovery in sysfs
    (vendor C(0x10de)), which works without any driver."
  - A host without an NVIDIA GPU, or with GPUs but no working driver, is a normal answer
    (C(present=false) or C(source=pci)), not a failure. The reasons a backend was skipped are in C(notes).
  - One call gathers everything, whatever the number of GPUs; it never runs a command per GPU.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.host_roots
  - gpuops.cluster.read_only
options:
  backend:
    description:
      - Which backend answers. C(auto) tries C(nvml), then C(nvidia-smi), then C(pci).
      - A named backend that cannot answer fails the task instead of falling back.
    type: str
    choices: [auto, nvml, nvidia-smi, pci]
    default: auto
  topology:
    description:
      - Also read C(nvidia-smi topo -m), once, and return it parsed as RV(ansible_facts.gpu.topology) (when it is
        read, and what a failure gives, is said there and at RV(ansible_facts.gpu.topology_error)). Without a
        driver, each GPU's C(numa_node) and C(cpu_affinity) (from sysfs) stand in.
      - The matrix is read as it really comes, tab- or space-separated, with or without NIC rows, legend, NIC
        legend, C(NUMA Affinity) or C(GPU NUMA ID) columns, with CR LF line ends or terminal control sequences
        (driver 580 underlines the header even into a pipe; they are removed before reading). A truncated or
        terminal-damaged matrix is read as far as it goes; what could not be read is in the topology's C(warnings).
      - Connection types are ranked, closest first, C(X) (self), C(NV#) (NVLink), C(PIX), C(PXB), C(PHB),
        C(NODE), C(SYS). The old name C(SOC) ranks with C(SYS).
      - C(nvidia-smi topo -mp) prints the PCIe-only matrix, which shows no NVLink even where there is some. When
        the legend (no C(NV#) line) or a command line above the matrix shows that, a warning says so; a
        multi-GPU matrix without NVLink and without a complete legend gets a weaker warning.
    type: bool
    default: false
  gpus_per_job:
    description:
      - With O(topology=true), the number of GPUs one job uses. The topology's C(placements) then
        lists disjoint sets of that many pairwise NVLinked GPUs, chosen inside one NUMA node first.
      - Must be greater than 0.
    type: int
  os_facts:
    description:
      - Also return the OS facts preflight needs (RV(ansible_facts.gpu_host.os)) in the same call, named as in
        C(ansible_facts) (distribution, version, kernel, architecture, Secure Boot, memory and CPU count), so that no
        C(setup) runs.
    type: bool
    default: false
  free_space_paths:
    description:
      - Paths whose free space to report in RV(ansible_facts.gpu_host.free_space). A path that does not exist
        yet is measured on the nearest existing parent, where it will be created. Read-only (C(statvfs)).
    type: list
    elements: path
    default: []
  tcp_probes:
    description:
      - Servers to try one TCP connect to, each as C({host, port}) (for example an NFS server on port 2049); the
        answers are in RV(ansible_facts.gpu_host.tcp_probes). Nothing is sent; the connection is closed at once.
    type: list
    elements: dict
    default: []
    suboptions:
      host:
        description: Name or address of the server.
        type: str
        required: true
      port:
        description: TCP port to connect to.
        type: int
        required: true
  probe_timeout:
    description:
      - Seconds each TCP probe may wait for an answer (at most 30), so an unreachable server never hangs the run.
    type: float
    default: 3.0
  _os_root:
    description:
      - Internal, for tests only. Root under which C(etc/os-release) is read.
    type: path
    default: /
attributes:
  facts:
    support: full
    description: Sets C(ansible_facts.gpu).
notes:
  - C(numa_node) always comes from sysfs C(/sys/bus/pci/devices/<bdf>/numa_node) (C(-1) becomes null),
    for every backend. NVML's C(nvmlDeviceGetNumaNodeId) describes GPUs that are NUMA nodes themselves
    (coherent CPU-GPU platforms), not the CPU socket a PCIe GPU is attached to.
requirements:
  - "Optional on the target, for the NVML backend: nvidia-ml-py (C(import pynvml))."
seealso:
  - name: NVIDIA Fabric Manager User Guide
    description: Which systems need Fabric Manager and why its version must match the driver.
    link: https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html
  - name: nvidia-smi documentation
    description: The C(topo) sub-command and its legend.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Gather GPU facts (one call per host)
  gpuops.cluster.gpu_facts:

- name: Refuse a NVSwitch host whose fabric is not up
  ansible.builtin.assert:
    that:
      - not ansible_facts['gpu']['fabric_manager']['required']
        or ansible_facts['gpu']['fabric_manager']['state'] == 'Completed'
    fail_msg: >-
      Fabric state is {{ ansible_facts['gpu']['fabric_manager']['state'] }} on an NVSwitch system,
      expected Completed: start nvidia-fabricmanager at exactly the driver version
      {{ ansible_facts['gpu']['driver_version'] }}.

- name: Gather GPU facts and the NVLink/NUMA topology in the same call
  gpuops.cluster.gpu_facts:
    topology: true
    gpus_per_job: 4

- name: Start one job per NVLinked, NUMA-local set of 4 GPUs
  ansible.builtin.debug:
    msg: "CUDA_VISIBLE_DEVICES={{ item | join(',') }}"
  loop: "{{ ansible_facts['gpu']['topology']['placements'] }}"
  when: ansible_facts['gpu']['topology'] is not none

- name: GPUs, OS facts, free space and an NFS server's reachability, in one remote call
  gpuops.cluster.gpu_facts:
    os_facts: true
    free_space_paths: [/srv/gpuops, /srv/docker]
    tcp_probes:
      - {host: nas.example.com, port: 2049}
    probe_timeout: 3

- name: Ask nvidia-smi only (for example to compare with NVML)
  gpuops.cluster.gpu_facts:
    backend: nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    gpu:
      description: NVIDIA GPU facts of the host.
      returned: always
      type: complex
      contains:
        present:
          description: True when at least one NVIDIA GPU was found.
          type: bool
          sample: true
        count:
          description: Number of GPUs listed in C(gpus).
          type: int
          sample: 8
        source:
          description: Backend that answered, C(nvml), C(nvidia-smi), C(pci), or C(none) when nothing was found.
          type: str
          sample: nvml
        driver_version:
          description: NVIDIA driver version; from C(/proc/driver/nvidia/version) on the C(pci) path, else null.
          type: str
          sample: 565.57.01
        cuda_driver_version:
          description: Highest CUDA version the driver supports, C(major.minor); null on the C(pci) path.
          type: str
          sample: "12.7"
        driver_loaded:
          description: True when NVML or nvidia-smi answered, or C(/proc/driver/nvidia/version) exists.
          type: bool
          sample: true
        gpus:
          description: One entry per GPU, in nvidia-smi index order. Fields a backend cannot tell are null.
          type: list
          elements: dict
          contains:
            index:
              description: nvidia-smi / NVML index (PCI bus order).
              type: int
            name:
              description: Product name; on the C(pci) path only when the driver module is loaded.
              type: str
            uuid:
              description: GPU UUID (C(GPU-...)); on the C(pci) path only when the driver module is loaded.
              type: str
            pci_bus_id:
              description: PCI address as nvidia-smi prints it (8-digit domain, upper case).
              type: str
            memory_total_mib:
              description: Framebuffer memory total in MiB.
              type: int
            mig_mode:
              description: Current MIG mode, C(Enabled), C(Disabled) or C(N/A) (GPU without MIG); null when unknown.
              type: str
            mig_mode_pending:
              description: MIG mode after the next GPU reset, same values as C(mig_mode).
              type: str
            persistence_mode:
              description: Persistence mode; null when unknown.
              type: bool
            numa_node:
              description: NUMA node of the GPU's PCI device from sysfs; null when the platform has none (-1).
              type: int
            cpu_affinity:
              description: >-
                CPUs local to the GPU's PCI device from sysfs (C(local_cpulist)), as a CPU list in the form of the
                topology's C(cpu_affinity) (for example C(0-51,104-155)); null when absent or not a CPU list.
              type: str
            nvlink:
              description: Number of active NVLink links; 0 for a GPU without NVLink; null when not reported.
              type: int
            fabric:
              description: >-
                Per-GPU NVLink fabric. C(state) is C(Completed), C(In Progress), C(Not Started),
                C(Not Supported) or null; C(status), C(clique_id) and C(cluster_uuid) as reported, else null.
              type: dict
        fabric_manager:
          description: Whether NVIDIA Fabric Manager is needed here, and what it reports.
          type: complex
          contains:
            required:
              description: >-
                True when an NVSwitch (vendor C(0x10de), PCI class C(0x0680xx)) is on the PCI bus, or a GPU reports a
                fabric state other than C(Not Supported).
              type: bool
              sample: true
            nvswitch_count:
              description: NVSwitch devices found on the PCI bus.
              type: int
              sample: 4
            state:
              description: >-
                Least advanced fabric state over all GPUs (C(Not Started) < C(In Progress) < C(Completed));
                C(Not Supported) when no GPU has fabric support; null when not reported.
              type: str
              sample: Completed
            service_state:
              description: Output of C(systemctl is-active nvidia-fabricmanager) when required, else null.
              type: str
              sample: active
            version:
              description: Version from C(nv-fabricmanager --version) when required and installed, else null.
              type: str
              sample: 565.57.01
        topology:
          description:
            - The parsed C(nvidia-smi topo -m) matrix; each of its C(warnings) is also an Ansible warning.
            - Null unless O(topology=true) and a driver-backed backend (C(nvml) or C(nvidia-smi)) found one GPU or more
              (one GPU has no links, but its CPU and NUMA affinity make its workspace's cpuset) and the matrix could be
              read; RV(ansible_facts.gpu.notes) says why.
          returned: always
          type: dict
          contains:
            gpus:
              description: One entry per GPU in the matrix header (and any GPU row without a column), by index.
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
                  description: >-
                    NUMA node of the GPU; null when C(NUMA Affinity) is absent, C(N/A) or names several nodes.
                  type: int
                  sample: 0
                numa_affinity:
                  description: C(NUMA Affinity) as printed (for example C(0-3) in some VMs); null when absent.
                  type: str
                  sample: "0"
                gpu_numa_id:
                  description: >-
                    C(GPU NUMA ID) (the GPU memory's own NUMA node, on Grace systems); null when C(N/A) or absent.
                  type: int
                  sample: null
                nvlink_peers:
                  description: Peer GPU index (as a string) to number of bonded NVLinks (C(NV18) is 18).
                  type: dict
                  sample: {"1": 18, "2": 18}
                nearest_nics:
                  description:
                    - NICs with the best-ranked connection to this GPU, in column order. Names come from the NIC
                      Legend, else they are the column names (C(NIC0), or C(mlx5_0) on older drivers).
                    - Empty when there are no NICs or when any link from this GPU to a NIC is unknown (truncated
                      capture).
                  type: list
                  elements: str
                  sample: ["mlx5_0", "mlx5_1"]
                nearest_nic_link:
                  description: >-
                    Connection type to the nearest NICs (C(PIX), C(PXB), C(PHB), C(NODE) or C(SYS)); null when none.
                  type: str
                  sample: PXB
            nics:
              description: NIC names, in column order; NIC Legend names where the legend gives them.
              type: list
              elements: str
              sample: ["mlx5_0", "mlx5_1"]
            nvlink_domains:
              description: >-
                Groups of GPUs connected through NVLink (connected components), each sorted, single GPUs included.
              type: list
              elements: list
              sample: [[0, 1], [2, 3]]
            nvlink_all_to_all:
              description:
                - True when every pair of GPUs is directly NVLinked. True for a single GPU; false when there are no
                  GPUs or when a pair's link is unknown.
              type: bool
              sample: true
            numa_groups:
              description: GPUs per NUMA node, sorted by node. GPUs whose NUMA node is unknown are in no group.
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
            placements:
              description:
                - Disjoint sets of O(gpus_per_job) GPUs whose members are pairwise NVLinked, sorted by lowest index.
                  Chosen greedily, inside one NUMA node first, then across nodes from the GPUs left.
                - Empty when O(gpus_per_job) is not set or when no such set exists.
              type: list
              elements: list
              sample: [[0, 1, 2, 3], [4, 5, 6, 7]]
            warnings:
              description: What could not be read or looks wrong in the matrix, and why.
              type: list
              elements: str
              sample:
                - "NUMA Affinity '0-3' of GPU0, GPU1 spans several NUMA nodes (VM or NPS setting?): numa_node is null"
        topology_error:
          description:
            - Set when C(nvidia-smi topo -m) ran (see RV(ansible_facts.gpu.topology)) but exited non-zero or printed no
              matrix (also a warning with the raw output, not a failure; preflight refuses such a host); else null.
            - C(command) is the command run, C(error) its exit status and output, or the parser's error (which
              quotes the output).
          returned: always
          type: dict
          sample:
            command: nvidia-smi topo -m
            error: "exited 255: Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"
        notes:
          description: Why earlier backends were skipped, and other observations that are not failures.
          type: list
          elements: str
          sample:
            - "nvml: pynvml is not importable (No module named 'pynvml'); install nvidia-ml-py to use NVML"
    gpu_host:
      description: What O(os_facts), O(free_space_paths) and O(tcp_probes) asked for; absent when none was asked.
      returned: when O(os_facts), O(free_space_paths) or O(tcp_probes) is set
      type: complex
      contains:
        os:
          description: >-
            C(distribution), C(distribution_version), C(distribution_major_version), C(distribution_release),
            C(os_family), C(kernel), C(architecture), C(memtotal_mb) (MiB, from C(/proc/meminfo)) and
            C(processor_vcpus) (the CPUs online, from C(/proc/cpuinfo)) as in C(ansible_facts), and C(secure_boot)
            (true, false on a legacy BIOS boot, null when EFI cannot tell); null unless O(os_facts). The plan sizes
            the workspaces' memory and CPU shares from C(memtotal_mb) and C(processor_vcpus).
          type: dict
        free_space:
          description: One entry per path, with C(measured_at) (the existing path measured), C(free_bytes),
            C(total_bytes) and C(error) (null when measured).
          type: list
          elements: dict
          sample: [{path: /srv/gpuops, measured_at: /srv, free_bytes: 52428800000, total_bytes: 107374182400,
                    error: null}]
        tcp_probes:
          description: One entry per probe, with C(reachable), C(error), C(seconds) and the C(timeout) used.
          type: list
          elements: dict
          sample: [{host: nas.example.com, port: 2049, reachable: false, error: "no answer within 3 s",
                    seconds: 3.0, timeout: 3.0}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts import (
    GpuFactsError,
    gather_gpu_facts,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.host_facts import free_space, os_facts, tcp_probe
from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import HOST_ROOTS_ARGS

ARGUMENT_SPEC = {
    "backend": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia-smi", "pci"]},
    "topology": {"type": "bool", "default": False},
    "gpus_per_job": {"type": "int"},
    "os_facts": {"type": "bool", "default": False},
    "free_space_paths": {"type": "list", "elements": "path", "default": []},
    "tcp_probes": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {"host": {"type": "str", "required": True}, "port": {"type": "int", "required": True}},
    },
    "probe_timeout": {"type": "float", "default": 3.0},
    "_os_root": {"type": "path", "default": "/"},
    **HOST_ROOTS_ARGS,
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.run_command_environ_update = {"LC_ALL": "C"}
    try:
        facts, warnings = gather_gpu_facts(
            backend=module.params["backend"],
            run=module.run_command,
            which=module.get_bin_path,
            sysfs_root=module.params["_sysfs_root"],
            proc_root=module.params["_proc_root"],
            topology=module.params["topology"],
            gpus_per_job=module.params["gpus_per_job"],
        )
    except GpuFactsError as err:
        module.fail_json(msg=str(err))
    for warning in warnings:
        module.warn(warning)
    result = {"gpu": facts}
    params = module.params
    if params["os_facts"] or params["free_space_paths"] or params["tcp_probes"]:
        roots = {"root": params["_os_root"], "sysfs_root": params["_sysfs_root"], "proc_root": params["_proc_root"]}
        result["gpu_host"] = {
            "os": os_facts(**roots) if params["os_facts"] else None,
            "free_space": [free_space(path) for path in params["free_space_paths"]],
            "tcp_probes": [tcp_probe(p["host"], p["port"], params["probe_timeout"]) for p in params["tcp_probes"]],
        }
    module.exit_json(changed=False, ansible_facts=result)


if __name__ == "__main__":
    main()
