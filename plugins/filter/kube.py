# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the Kubernetes platform's roles (kube_*, gpu_operator, kube_tenancy, training_stack) and
playbooks/render.yml, thin over plugin_utils kube_plan, containerd_config, kube_ca, kube_gpu, gpu_sharing,
gpu_operator, kube_tenancy and training_jobs; each is documented in the .yml file of its name next to this one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

containerd_config_text = lazy("containerd_config")
gpu_operator = lazy("gpu_operator")
gpu_sharing = lazy("gpu_sharing")
kube_ca = lazy("kube_ca")
kube_gpu = lazy("kube_gpu")
kube_plan = lazy("kube_plan")
kube_tenancy = lazy("kube_tenancy")
training_jobs = lazy("training_jobs")


def kube_cluster_problems(plan: dict) -> list[str]:
    return kube_plan.cluster_problems(plan)


def unpinned_releases(releases: dict, role: str) -> list[str]:
    return [found for found in (kube_plan.release_problem(str(name), value, str(role))
                                for name, value in releases.items()) if found]


def containerd_config(text: str, systemd_cgroup: bool = False, imports: object = (), drop_imports: object = ()) -> str:
    try:
        if imports or drop_imports:
            text = containerd_config_text.with_imports(text, list(imports), list(drop_imports))
        return containerd_config_text.systemd_cgroup_on(text) if systemd_cgroup else text
    except ValueError as exc:
        raise AnsibleFilterError(f"containerd_config: {exc}") from exc


def kube_ca_cert_hash(pem: str | bytes) -> str:
    try:
        return kube_ca.ca_cert_hash(pem)
    except ValueError as exc:
        raise AnsibleFilterError(f"kube_ca_cert_hash: not a PEM certificate ({exc})") from exc
    except RuntimeError as exc:
        raise AnsibleFilterError(f"kube_ca_cert_hash: {exc}") from exc


def kubeadm_node_registration(registration: object, name: object) -> dict:
    try:
        return kube_plan.kubeadm_registration(str(name), registration)  # type: ignore[arg-type]
    except ValueError as exc:
        raise AnsibleFilterError(f"kubeadm_node_registration: {exc}") from exc


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
    """gpuops.cluster Kubernetes filters."""

    def filters(self) -> dict:
        return {
            "kube_cluster_problems": kube_cluster_problems,
            "unpinned_releases": unpinned_releases,
            "containerd_config": containerd_config,
            "kube_ca_cert_hash": kube_ca_cert_hash,
            "kubeadm_node_registration": kubeadm_node_registration,
            "gpu_operator_default_pools": gpu_operator_default_pools,
            "gpu_operator_plan": gpu_operator_plan,
            "kube_tenancy_plan": kube_tenancy_plan,
            "pytorchjob_template": pytorchjob_template,
            "kube_mirror_images": kube_mirror_images,
        }
