# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Preflight report section: the kubelet policy a Kubernetes GPU node will get, and why.

A section of the preflight report (``preflight_report.add_sections``). It shows the host's part of ``gpuops_plan``
(``record["planned"]``, set by preflight_fleet); nothing here derives it again.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan


def kubelet_section(host: str, record: dict, hostvars: Any) -> dict | None:
    """``{"name": "kubelet", ...}`` for a kubernetes GPU node, else None."""
    del host
    platform = ((record.get("result") or {}).get("platform") or {}).get("platform")
    if platform != "kubernetes" or "gpu_nodes" not in (plan.get_var(hostvars, "group_names", []) or []):
        return None
    part = record["planned"]
    policy = part.get("kubelet_policy")
    section = {"name": "kubelet", "title": "Kubernetes kubelet policy"}
    if policy is None:
        why = "none: the node has no gpuops_pool (training or inference); the plan refuses it"
        return {**section, "rows": [["policy", why]], "data": {"pool": part.get("pool")}}
    if "error" in policy:
        return {**section, "rows": [["policy", f"not derived: {policy['error']}"]]}
    source = "this preflight" if part.get("topology_source") == "preflight" else part.get("topology_source")
    return {
        **section,
        "rows": [
            ["pool", part["pool"]],
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
