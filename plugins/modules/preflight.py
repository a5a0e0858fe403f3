#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Gather a GPU host's facts in one remote call and judge its plan on the controller
version_added: 0.2.0
description:
  - An action plugin. It runs M(gpuops.cluster.gpu_facts) on the host B(once), asking in the same call for
    the OS facts (so no C(setup) runs), the free space under O(free_space) paths and one bounded TCP probe per
    NFS server of O(nfs_datasets); then it judges the plan in-process on the controller (no module runs there).
  - The rules (OS, driver and CUDA, Fabric Manager, topology, MIG, GPU assignment, free space, NFS) are listed, with
    what each refuses, in docs/preflight.md ("Rules"); the OS is judged here against the host layer's roles, and
    M(gpuops.cluster.preflight_fleet) adds the decided platform's.
  - The platform is decided for the whole fleet by M(gpuops.cluster.preflight_fleet), run once after this
    task; it reads this task's registered result from every host.
  - A failed check is an answer, not a task failure; M(gpuops.cluster.preflight_fleet) refuses the play.
  - Sets C(ansible_facts.gpu) and C(ansible_facts.gpu_host) as M(gpuops.cluster.gpu_facts) returns them, and the OS
    facts of C(gpu_host.os) that C(setup) gives under the same names (RV(ansible_facts)), so that the inputs pass
    after it (C(playbooks/tasks/inputs.yml)) runs no C(setup) on this host. The facts are not marked gathered, so a
    later play's C(gather_facts) still gathers them all.
options:
  driver_version:
    description:
      - The driver pin, full dotted version. Not given, the host's C(nvidia_driver_version); unset there too, CUDA is
        judged against the driver running on the host, if any (the plan's C(hosts.<host>.driver_judged)).
    type: str
    default: ""
  cuda_version:
    description: The CUDA toolkit the team builds with. Not given, the host's C(gpuops_cuda_version).
    type: str
    default: ""
  multi_node_training:
    description:
      - Whether the team often trains across nodes.
      - Not given, the host's C(gpuops_multi_node_training), else false.
    type: bool
    default: false
  gpu_assignments:
    description:
      - The members' GPUs (C(gpus), C(shared_gpus)), each checked to be one of this host's GPUs; the rest of the team
        rule (a GPU given twice, the MPS caps) is the gpuops_* check's, run before preflight.
      - Not given, the host's C(gpuops_members).
    type: list
    elements: dict
    default: []
  platform:
    description:
      - C(auto) to let the fleet decision choose from team size and GPUs, or an override.
      - Not given, the host's C(gpuops_platform), else C(auto).
    type: str
    choices: [auto, compose, kubernetes]
    default: auto
  team_size:
    description:
      - People on the team; required when O(platform=auto).
      - Not given, the host's C(gpuops_team_size), else the length of its C(gpuops_members).
    type: int
  gpu_count:
    description:
      - GPUs the platform will serve in all.
      - Not given, the host's C(gpuops_gpu_count); unset there too, the sum of the GPUs detected across C(gpu_nodes).
    type: int
  topology:
    description: >-
      Also read C(nvidia-smi topo -m) in the same remote call (hosts with a GPU and a driver; one GPU gives its CPU
      and NUMA affinity).
    type: bool
    default: true
  topology_required:
    description:
      - Refuse a host whose GPUs are seen but whose topology could not be read (C(ansible_facts.gpu.topology_error)),
        naming the host, the command, the parse error and the fix. A topology the host's inventory declares
        (C(gpuops_gpu_topology)) satisfies the rule.
      - C(false) makes it a warning (check status C(warn)) on the summary line instead.
    type: bool
    default: true
  free_space:
    description:
      - Data paths that need free space, each C({path, min_free, why}); C(min_free) is bytes or a size such as
        C(10G) or C(500MiB). A path not there yet is measured where it will be created.
    type: list
    elements: dict
    default: []
  nfs_datasets:
    description:
      - Datasets as C(compose_stack_datasets) lists them (C({name, src, fstype, opts})). Each NFS server
        (C(fstype) nfs or nfs4, C(src) C(server:/export)) gets one TCP connect to port 2049 (or C(port=) from
        C(opts)), bounded by O(probe_timeout), before anything is mounted.
      - Not given, the host's C(compose_stack_datasets).
    type: list
    elements: dict
    default: []
  probe_timeout:
    description: Seconds each NFS probe may wait (at most 30).
    type: float
    default: 3.0
  role_argument_spec:
    description:
      - A role's C(meta/argument_specs.yml). Before anything else, the task's variables named by its C(main) entry
        point are checked against it, with the same validator and message as Ansible's implicit role validation.
      - The preflight role passes its own (C(role_path)), and the preflight play (C(playbooks/preflight.yml)) imports
        the role with C(rolespec_validate=false), so each host costs one task instead of two. Run as a role
        elsewhere, Ansible validates as well; the check is read-only either way.
      - Each option the task does not give is then read from the role's variable C(<role>_<option>) (the role is the
        folder above C(meta/); for the preflight role, O(probe_timeout) is C(preflight_probe_timeout)), as templated and
        checked, so each variable is templated once per host. The preflight role's task passes no other option.
    type: path
attributes:
  action:
    support: full
    description: The judgement runs in the action plugin, on the controller.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
seealso:
  - module: gpuops.cluster.gpu_facts
  - module: gpuops.cluster.preflight_fleet
"""

EXAMPLES = r"""
- name: Gather (one remote call) and judge this host
  gpuops.cluster.preflight:
    driver_version: 550.90.07
    cuda_version: "12.4"
    team_size: 4
    free_space:
      - {path: /srv/gpuops, min_free: 10G, why: service data}
  register: __preflight_host

- name: Decide the fleet's platform, write the reports and refuse a bad plan
  gpuops.cluster.preflight_fleet:
    report_dir: /var/tmp/preflight
  run_once: true
"""

RETURN = r"""
preflight:
  description: This host's judgement, read by M(gpuops.cluster.preflight_fleet).
  returned: always
  type: complex
  contains:
    checks:
      description: One entry per rule; C(ok) is null when the rule did not apply. The platform check is added by
        M(gpuops.cluster.preflight_fleet).
      type: list
      elements: dict
      sample:
        - name: mig
          ok: false
          status: failed
          msg: "MIG is enabled on GPUs [0, 1], and GPUs [0, 1] report active NVLink links..."
    compat:
      description: The M(gpuops.cluster.cuda_compat) answer, when a driver and CUDA version were given.
      type: dict
      sample: {compatible: true, mode: native, min_driver: "535.54.03", max_cuda: "12.2"}
    driver_pin:
      description: The driver pin checked, or null.
      type: str
      sample: 535.261.03
    driver_judged:
      description: The driver CUDA was judged against, and whence (C(pin), or C(running) when no pin is set); null
        when there is neither.
      type: dict
      sample: {version: 580.159.04, source: running}
    os:
      description: The host's OS as judged (C(distribution), C(version)); judged again with the platform's roles.
      type: dict
      sample: {distribution: Debian, version: "12.7"}
    plan:
      description: The plan judged (this task's arguments after defaults); its platform, team_size, gpu_count and
        multi_node_training are this host's inputs of the fleet's platform decision.
      type: dict
ansible_facts:
  description:
    - C(gpu) and C(gpu_host), as M(gpuops.cluster.gpu_facts) returns them.
    - C(distribution), C(distribution_version), C(distribution_major_version), C(distribution_release), C(os_family),
      C(kernel) and C(architecture), from C(gpu_host.os), where the OS is one that M(gpuops.cluster.gpu_facts) names
      as C(setup) does (its C(os_family) is known); a null there (an EL host's release) is not set.
  returned: always
  type: dict
  sample:
    distribution: Debian
    distribution_version: "12.15"
    distribution_major_version: "12"
    distribution_release: bookworm
    os_family: Debian
    kernel: 6.1.0-41-amd64
    architecture: x86_64
"""
