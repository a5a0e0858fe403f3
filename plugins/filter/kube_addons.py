# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the Kubernetes add-on roles (gpu_operator, kube_tenancy, training_stack), thin over plugin_utils
kube_gpu, gpu_sharing, gpu_operator, kube_tenancy and training_jobs; each is documented in the .yml file of its name
next to this one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

gpu_operator = lazy("gpu_operator")
gpu_sharing = lazy("gpu_sharing")
kube_gpu = lazy("kube_gpu")
kube_tenancy = lazy("kube_tenancy")
training_jobs = lazy("training_jobs")


def _mapping(name: str, value: Any) -> dict:
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"{name}: expected a mapping, got {type(value).__name__}")
    return kube_gpu.plain(value)


def gpu_operator_default_pools(multi_node_training: Any = False) -> dict:
    return gpu_sharing.default_pools(boolean(multi_node_training, strict=False))


def gpu_operator_plan(config: Any) -> dict:
    return gpu_operator.plan(_mapping("gpu_operator_plan", config))


def kube_tenancy_plan(config: Any) -> dict:
    return kube_tenancy.plan(_mapping("kube_tenancy_plan", config))


def pytorchjob_template(pool: Any, config: Any) -> dict:
    try:
        return training_jobs.pytorchjob(str(pool), _mapping("pytorchjob_template", config))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"pytorchjob_template: {exc!r}") from exc


def kube_mirror_images(objects: Any, mirror: Any = "") -> list[dict]:
    try:
        return training_jobs.mirror_manifest_images(kube_gpu.plain(list(objects or [])), str(mirror or ""))
    except ValueError as exc:
        raise AnsibleFilterError(f"kube_mirror_images: {exc}") from exc


class FilterModule:
    """gpuops.cluster Kubernetes add-on filters."""

    def filters(self) -> dict:
        return {
            "gpu_operator_default_pools": gpu_operator_default_pools,
            "gpu_operator_plan": gpu_operator_plan,
            "kube_tenancy_plan": kube_tenancy_plan,
            "pytorchjob_template": pytorchjob_template,
            "kube_mirror_images": kube_mirror_images,
        }
