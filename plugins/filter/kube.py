# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the kube_* roles and playbooks/render.yml, thin over plugin_utils kube_plan, containerd_config,
kube_ca and kubeadm; each is documented in the .yml file of its name next to this one."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

containerd_config_text = lazy("containerd_config")
kube_ca = lazy("kube_ca")
kube_plan = lazy("kube_plan")
kubeadm = lazy("kubeadm")


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
        return kubeadm.node_registration(str(name), registration)  # type: ignore[arg-type]
    except ValueError as exc:
        raise AnsibleFilterError(f"kubeadm_node_registration: {exc}") from exc


class FilterModule:
    """gpuops.cluster Kubernetes filters."""

    def filters(self) -> dict:
        return {
            "kube_cluster_problems": kube_cluster_problems,
            "unpinned_releases": unpinned_releases,
            "containerd_config": containerd_config,
            "kube_ca_cert_hash": kube_ca_cert_hash,
            "kubeadm_node_registration": kubeadm_node_registration,
        }
