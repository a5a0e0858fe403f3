#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_check
short_description: Judge a GPU host's plan against its facts before anything changes
version_added: 0.1.0
description:
  - Runs every preflight rule over one host and returns one check per rule, each with the
    fact found, what was expected and the fix, plus the platform decision.
  - Rules are the supported OS, the pinned driver against the requested CUDA
    (M(gpuops.cluster.cuda_compat)), Fabric Manager at exactly the driver version on NVSwitch
    hosts, MIG refused on NVLink or multi-node training nodes (requested or already enabled),
    every GPU assigned to at most one member, time-slicing replicas of at least 2, and the
    platform (C(gpuops.cluster.choose_platform) unless overridden).
  - Pure computation; it reads nothing from the host and is normally delegated to the controller.
  - A failed check is an answer, not a module failure; the preflight role refuses the play.
options:
  gpu:
    description: The C(ansible_facts.gpu) dictionary from M(gpuops.cluster.gpu_facts).
    type: dict
    default: {}
  topology:
    description:
      - The topology, C(ansible_facts.gpu.topology) from M(gpuops.cluster.gpu_facts)
        (the shape M(gpuops.cluster.gpu_topology) returns), when gathered.
    type: dict
  os:
    description: C(distribution) and C(version) of the host, as in C(ansible_facts).
    type: dict
    required: true
  driver_version:
    description: The driver pin (C(nvidia_driver_version)), full dotted version.
    type: str
    default: ""
  cuda_version:
    description: The CUDA toolkit the team builds with (C(gpuops_cuda_version)).
    type: str
    default: ""
  gpu_name:
    description: GPU model for the forward-compatibility rule; defaults to the first GPU found.
    type: str
  workload:
    description: What the node runs. MIG is refused on C(training) and C(mixed) nodes with NVLink.
    type: str
    choices: [training, inference, mixed]
    default: training
  mig_requested:
    description: Whether the plan enables MIG on this node.
    type: bool
    default: false
  assume_nvlink:
    description: Treat the node as NVLinked even when no driver can say so yet (fresh servers).
    type: bool
    default: false
  multi_node_training:
    description: Whether the team often trains across nodes (C(gpuops_multi_node_training)).
    type: bool
    default: false
  gpu_assignments:
    description: Per-member GPU lists to check for double assignment, as C({name, gpus}) items.
    type: list
    elements: dict
    default: []
  time_slicing_replicas:
    description: Time-slicing replicas per GPU, when time-slicing is configured.
    type: int
  platform:
    description: C(auto) to decide from team size and GPUs, or an override.
    type: str
    choices: [auto, compose, kubernetes]
    default: auto
  team_size:
    description: People on the team (C(gpuops_team_size)); required when O(platform=auto).
    type: int
  gpu_count:
    description: GPUs the platform will serve in all; defaults to the GPUs found on this host.
    type: int
  supported_os:
    description: Override of the supported distributions and versions.
    type: dict
attributes:
  check_mode:
    support: full
    description: Computes only; behaves the same in check mode.
  diff_mode:
    support: none
    description: Nothing to diff.
  idempotent:
    support: full
    description: Never changes anything.
author:
  - gpuops.cluster contributors
"""

EXAMPLES = r"""
- name: Judge the plan on the controller
  gpuops.cluster.preflight_check:
    os:
      distribution: "{{ ansible_facts['distribution'] }}"
      version: "{{ ansible_facts['distribution_version'] }}"
    gpu: "{{ ansible_facts['gpu'] }}"
    driver_version: 550.90.07
    cuda_version: "12.4"
    team_size: 4
  delegate_to: localhost
  register: __preflight_result
"""

RETURN = r"""
ok:
  description: No check failed.
  returned: always
  type: bool
  sample: false
checks:
  description: One entry per rule; C(ok) is null when the rule did not apply.
  returned: always
  type: list
  elements: dict
  sample:
    - name: mig
      ok: false
      status: failed
      msg: "MIG is requested (preflight_mig_requested) on a training node, and GPUs [0, 1] report active NVLink..."
failed_checks:
  description: Names of the failed checks.
  returned: always
  type: list
  elements: str
  sample: [mig]
platform:
  description: The platform decision.
  returned: always
  type: dict
  sample: {platform: compose, source: auto, reason: "team of 3, 4 GPUs, multi-node training rare -> compose"}
compat:
  description: The M(gpuops.cluster.cuda_compat) answer, when a driver and CUDA version were given.
  returned: always
  type: dict
  sample: {compatible: true, mode: native, min_driver: "535.54.03", max_cuda: "12.2"}
driver_pin:
  description: The driver pin checked, or null.
  returned: always
  type: str
  sample: 535.261.03
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.preflight import evaluate

ARGUMENT_SPEC = {
    "gpu": {"type": "dict", "default": {}},
    "topology": {"type": "dict"},
    "os": {"type": "dict", "required": True},
    "driver_version": {"type": "str", "default": ""},
    "cuda_version": {"type": "str", "default": ""},
    "gpu_name": {"type": "str"},
    "workload": {"type": "str", "choices": ["training", "inference", "mixed"], "default": "training"},
    "mig_requested": {"type": "bool", "default": False},
    "assume_nvlink": {"type": "bool", "default": False},
    "multi_node_training": {"type": "bool", "default": False},
    "gpu_assignments": {"type": "list", "elements": "dict", "default": []},
    "time_slicing_replicas": {"type": "int"},
    "platform": {"type": "str", "choices": ["auto", "compose", "kubernetes"], "default": "auto"},
    "team_size": {"type": "int"},
    "gpu_count": {"type": "int"},
    "supported_os": {"type": "dict"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = dict(module.params)
    facts = {"gpu": params.pop("gpu") or {}, "topology": params.pop("topology"), "os": params.pop("os")}
    result = evaluate(params, facts)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
