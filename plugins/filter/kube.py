# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters used by the kube_* roles and playbooks/render.yml:

* ``topology | gpuops.cluster.kubelet_policy(pool, ...)``: a node's kubelet policy fields and the reason;
* ``policy | gpuops.cluster.kube_node_labels_taints(pool, ...)``: the labels, annotations and taints it registers with;
* ``plan | gpuops.cluster.kube_cluster_problems``: every refusal for a cluster plan, all at once;
* ``config_toml | gpuops.cluster.containerd_systemd_cgroup``: config.toml with runc's SystemdCgroup on;
* ``ca_crt_pem | gpuops.cluster.kube_ca_cert_hash``: the CA public key hash kubeadm join pins.

Thin: the logic lives in plugins/plugin_utils/kube_plan.py, containerd_config.py and kube_ca.py;
documentation in the .yml files next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

containerd_config = lazy("containerd_config")
kube_ca = lazy("kube_ca")
kube_plan = lazy("kube_plan")


def _typed(value: object, kind: type) -> object:
    """A reservation as the function takes it; None (not given) stays None, for kube_node's default."""
    return None if value is None else kind(value)


def kubelet_policy(
    topology: object,
    pool: object,
    reserved_cpus_per_numa: object = None,
    reserved_system_cpus: object = None,
    reserved_memory_mib: object = None,
    eviction_memory_mib: object = None,
) -> dict:
    if topology is not None and not isinstance(topology, dict):
        raise AnsibleFilterError(
            f"kubelet_policy: topology must be a gpu_topology result (a mapping), got {type(topology).__name__}"
        )
    try:
        return kube_plan.kubelet_policy(
            topology,
            str(pool),
            _typed(reserved_cpus_per_numa, int),
            _typed(reserved_system_cpus, str),
            _typed(reserved_memory_mib, int),
            _typed(eviction_memory_mib, int),
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"kubelet_policy: {exc}") from exc


def kube_node_labels_taints(
    policy: object, pool: object = "", control_plane: object = False, schedulable: object = False,
    health_sweep: object = None,
) -> dict:
    if policy is not None and not isinstance(policy, dict):
        raise AnsibleFilterError(
            "kube_node_labels_taints: expected the node's kubelet policy (a mapping) or none, "
            f"got {type(policy).__name__}"
        )
    try:
        return kube_plan.node_registration(
            policy, str(pool or ""), bool(control_plane), bool(schedulable), str(health_sweep or "") or None
        )
    except KeyError as exc:
        raise AnsibleFilterError(f"kube_node_labels_taints: the kubelet policy has no {exc}") from exc


def kube_cluster_problems(plan: object) -> list[str]:
    if not isinstance(plan, dict):
        raise AnsibleFilterError(f"kube_cluster_problems: expected a mapping, got {type(plan).__name__}")
    return kube_plan.cluster_problems(plan)


def containerd_systemd_cgroup(text: object) -> str:
    if not isinstance(text, str):
        raise AnsibleFilterError(f"containerd_systemd_cgroup: expected config.toml text, got {type(text).__name__}")
    try:
        return containerd_config.systemd_cgroup_on(text)
    except ValueError as exc:
        raise AnsibleFilterError(f"containerd_systemd_cgroup: {exc}") from exc


def kube_ca_cert_hash(pem: object) -> str:
    if not isinstance(pem, (str, bytes)):
        raise AnsibleFilterError(f"kube_ca_cert_hash: expected the PEM text of ca.crt, got {type(pem).__name__}")
    try:
        return kube_ca.ca_cert_hash(pem)
    except ValueError as exc:
        raise AnsibleFilterError(f"kube_ca_cert_hash: not a PEM certificate ({exc})") from exc
    except RuntimeError as exc:
        raise AnsibleFilterError(f"kube_ca_cert_hash: {exc}") from exc


class FilterModule:
    """gpuops.cluster Kubernetes filters."""

    def filters(self) -> dict:
        return {
            "kubelet_policy": kubelet_policy,
            "kube_node_labels_taints": kube_node_labels_taints,
            "kube_cluster_problems": kube_cluster_problems,
            "containerd_systemd_cgroup": containerd_systemd_cgroup,
            "kube_ca_cert_hash": kube_ca_cert_hash,
        }
