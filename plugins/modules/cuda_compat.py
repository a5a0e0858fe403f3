#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_compat
short_description: Decide whether a CUDA toolkit release runs on an NVIDIA driver, and how
version_added: "0.1.0"
description:
  - Answers whether applications built with CUDA O(cuda_version) run on a host with NVIDIA driver O(driver_version),
    and through which mechanism (RV(mode)).
  - V(native) - the driver is at or above the minimum Linux driver of that exact toolkit release
    (NVIDIA CUDA release notes, Table 3).
  - V(minor_version) - same CUDA major, the driver is below the native minimum but at or above the major's
    minor-version compatibility floor (C(MINOR_VERSION_FLOORS) in the table). Runs with a limited feature set (no
    PTX JIT; some APIs return C(cudaErrorCallRequiresNewerDriver)).
  - V(forward_compat) - the driver is too old for that CUDA major, but the GPU is a data-center GPU (or Jetson) and
    the driver is on a data-center branch NVIDIA still supports (C(SUPPORTED_DATACENTER_BRANCHES) in the table), so
    the C(cuda-compat-<major>-<minor>) package can carry the newer CUDA. Needs O(gpu_name); without it forward
    compatibility cannot be established.
  - V(incompatible) otherwise. Incompatibility is an answer (RV(compatible=false)), not a task failure.
  - A bare O(cuda_version) such as V(12.4) is checked as that minor's GA release (what C(nvidia-smi) reports as
    "CUDA Version"); give V(12.4.1) to check an update exactly.
  - When O(fabric_manager_version) is given it is compared with the driver's full dotted version (V(530.30.02) vs
    V(530.41.03) is a mismatch that nv-fabricmanager refuses). This is reported in RV(fabric_manager_match) and
    does not change RV(compatible).
  - Pure computation; it reads nothing from and changes nothing on the target. The table lives in
    C(plugins/module_utils/cuda_compat.py) with its sources.
  - Fails only on malformed input (a bare branch such as V(550), a package version, a CUDA release the table does
    not know), with a message saying what was found and what is expected.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  driver_version:
    description:
      - Installed or planned NVIDIA driver version, full and dotted as C(nvidia-smi) prints it, for example
        V(550.90.07) or V(570.26). A bare branch such as V(550) is refused.
      - Quote it in YAML.
    type: str
    required: true
  cuda_version:
    description:
      - CUDA toolkit version the workloads are built with, V(major.minor) or V(major.minor.update), for example
        V(12.4) or V(12.4.1), a release in the table (C(CUDA_RELEASES)).
      - Quote it in YAML (an unquoted V(12.10) would be read as the number 12.1).
    type: str
    required: true
  gpu_name:
    description:
      - GPU product name as C(nvidia-smi --query-gpu=name) prints it, for example V(NVIDIA A100-SXM4-80GB).
      - Needed to establish forward compatibility, which applies only to data-center GPUs.
    type: str
  fabric_manager_version:
    description:
      - Installed C(nvidia-fabricmanager) version on NVSwitch systems (HGX/DGX). It must equal the driver version
        exactly.
    type: str
seealso:
  - name: NVIDIA CUDA Compatibility guide
    description: Minor-version and forward compatibility rules.
    link: https://docs.nvidia.com/deploy/cuda-compatibility/
"""

EXAMPLES = r"""
- name: Check the planned CUDA against the installed driver
  gpuops.cluster.cuda_compat:
    driver_version: "550.90.07"
    cuda_version: "12.4.1"
    gpu_name: "NVIDIA H100 80GB HBM3"
    fabric_manager_version: "550.90.07"
  register: __preflight_cuda

- name: Refuse before changing anything
  ansible.builtin.assert:
    that:
      - __preflight_cuda.compatible
      - __preflight_cuda.fabric_manager_match is not false
    fail_msg: "{{ __preflight_cuda.reasons | join('; ') }}"
"""

RETURN = r"""
compatible:
  description: Whether CUDA O(cuda_version) runs on the driver at all (RV(mode) is not V(incompatible)).
  returned: success
  type: bool
  sample: true
mode:
  description: How it runs.
  returned: success
  type: str
  choices: [native, minor_version, forward_compat, incompatible]
  sample: minor_version
min_driver:
  description: Minimum driver for native support of the checked toolkit release, as NVIDIA prints it.
  returned: success
  type: str
  sample: "550.54.15"
max_cuda:
  description:
    - Newest CUDA toolkit major.minor this driver supports natively.
    - Usually what C(nvidia-smi) prints as "CUDA Version"; that is the driver's API version and can name a minor
      without a toolkit release (driver 565.57.01 prints 12.7, RV(max_cuda) is V(12.6)).
    - V(null) when the driver is older than every release in the table.
  returned: success
  type: str
  sample: "12.2"
fabric_manager_match:
  description: Whether O(fabric_manager_version) equals the driver's full version; V(null) when it was not given.
  returned: success
  type: bool
  sample: false
datacenter_gpu:
  description: Whether O(gpu_name) qualifies for forward compatibility; V(null) when it was not given.
  returned: success
  type: bool
  sample: true
cuda_release:
  description: The table row that was checked, as NVIDIA's release notes name it.
  returned: success
  type: str
  sample: "12.4 Update 1"
reasons:
  description: Explanations of the verdict, its caveats and the fix, one sentence each.
  returned: success
  type: list
  elements: str
  sample:
    - "driver 535.104.05 is below 550.54.15, the native minimum for CUDA 12.4 Update 1, but at or above 525.60.13,
      the CUDA 12.x minor-version compatibility floor: it runs with a limited feature set"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.cuda_compat import check_compat


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "driver_version": {"type": "str", "required": True},
            "cuda_version": {"type": "str", "required": True},
            "gpu_name": {"type": "str"},
            "fabric_manager_version": {"type": "str"},
        },
        supports_check_mode=True,
    )
    try:
        result = check_compat(**module.params)  # the options are check_compat's parameters, by name
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
