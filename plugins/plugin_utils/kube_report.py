# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Preflight report section: the kubelet policy a Kubernetes GPU node will get, and why.

Registered in ``preflight_report.SECTIONS``. For a host whose platform is kubernetes and that is in
``gpu_nodes``, the policy is derived by ``kube_plan.kubelet_policy`` (the same function the kube_node role's
render uses) from the topology preflight just read, else the inventory's ``gpuops_gpu_topology``.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils import kube_plan

_RESERVATIONS = (
    ("kube_node_reserved_cpus_per_numa", 2),
    ("kube_node_reserved_system_cpus", ""),
    ("kube_node_reserved_memory_mib", 4096),
    ("kube_node_eviction_memory_mib", 500),
)


def _get(hostvars: Any, name: str, default: Any) -> Any:
    try:
        value = hostvars.get(name, default) if hasattr(hostvars, "get") else default
    except Exception:  # an undefined or untemplatable variable reads as its default
        return default
    return default if value is None else value


def kubelet_section(host: str, record: dict, hostvars: Any) -> dict | None:
    """``{"name": "kubelet", ...}`` for a kubernetes GPU node, else None."""
    platform = ((record.get("result") or {}).get("platform") or {}).get("platform")
    if platform != "kubernetes" or "gpu_nodes" not in (_get(hostvars, "group_names", []) or []):
        return None
    pool = str(_get(hostvars, "gpuops_pool", "") or "")
    topology = (record.get("gpu") or {}).get("topology") or _get(hostvars, "gpuops_gpu_topology", None)
    source = "this preflight" if (record.get("gpu") or {}).get("topology") else "inventory (gpuops_gpu_topology)"
    if pool not in kube_plan.POOLS:
        return {
            "name": "kubelet",
            "title": "Kubernetes kubelet policy",
            "rows": [["policy", "none: the node has no gpuops_pool (training or inference); the plan refuses it"]],
            "data": {"pool": pool or None},
        }
    try:
        args = [(int if isinstance(d, int) else str)(_get(hostvars, n, d)) for n, d in _RESERVATIONS]
        policy = kube_plan.kubelet_policy(topology if isinstance(topology, dict) else None, pool, *args)
    except (TypeError, ValueError) as exc:
        return {"name": "kubelet", "title": "Kubernetes kubelet policy", "rows": [["policy", f"not derived: {exc}"]]}
    return {
        "name": "kubelet",
        "title": "Kubernetes kubelet policy",
        "rows": [
            ["pool", pool],
            ["topologyManagerPolicy", policy["topology_manager_policy"]],
            ["topologyManagerScope", policy["topology_manager_scope"]],
            ["cpuManagerPolicy", policy["cpu_manager_policy"]],
            ["reservedSystemCPUs", policy["reserved_system_cpus"]],
            ["memoryManagerPolicy", policy["memory_manager_policy"]],
            ["gpuops.io/nvlink-domains", policy["nvlink_domains_label"]],
            ["reason", policy["reason"]],
            ["topology from", source],
        ],
        "data": dict(policy, topology_source=source),
    }
