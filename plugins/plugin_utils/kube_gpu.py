# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The Kubernetes GPU nodes, as the add-on roles and the plan see them (pure functions, no Ansible imports).

``gpu_nodes(hosts)`` turns host variables (``hostvars[host]``: the gpu facts preflight read, else the inventory's
declarations) into one entry per GPU node: name, pool, GPU model, count, the smallest GPU's memory, MIG mode
and topology. The plan calls it once (``plan.nodes_part``: ``gpuops_plan.nodes.gpu``, which
gpu_operator, kube_tenancy, training_stack, grow and ``plan.gpu_sharing_part`` read).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> Any:
    """Ansible's lazy containers as plain dicts and lists, so plugin_utils see ordinary data."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def _gpu_count(gpu: Mapping, topology: Mapping | None) -> int:
    if gpu.get("count"):
        return int(gpu["count"])
    if topology and topology.get("gpus"):
        return len(topology["gpus"])
    if topology:
        return sum(len(domain) for domain in topology.get("nvlink_domains") or [])
    return 0


def _gpu_memory(gpu: Mapping, declared: Any) -> int | None:
    """The smallest GPU's memory in MiB (gpu facts), else the inventory's gpu_operator_gpu_memory_mib, else None."""
    found = [int(g["memory_total_mib"]) for g in gpu.get("gpus") or [] if g.get("memory_total_mib")]
    if found:
        return min(found)
    try:
        return int(declared) if declared else None
    except (TypeError, ValueError):
        return None


def gpu_nodes(hosts: Any) -> list[dict]:
    """One entry per GPU node, from this run's gpu facts (preflight) or else the inventory's declarations. A node
    with neither counts an even share of the fleet's ``gpuops_gpu_count`` (the first nodes one more each where it
    does not divide, so that the shares add up to it): the one count kube_tenancy's quota check and grow read (their
    sum is the cluster's GPUs)."""
    hosts = list(hosts or [])
    nodes = []
    for index, host in enumerate(hosts):
        share, left = divmod(int(host.get("gpuops_gpu_count") or 0), len(hosts))
        facts = host.get("ansible_facts") or {}
        gpu = facts.get("gpu") or {}
        topology = gpu.get("topology") or host.get("gpuops_gpu_topology")
        names = [g.get("name") for g in gpu.get("gpus") or [] if g.get("name")]
        nodes.append({
            "name": str(host.get("inventory_hostname")),
            "pool": host.get("gpuops_pool") or None,  # unset or "" (its shared default): no pool
            "gpu_model": names[0] if names else host.get("gpu_operator_gpu_model"),
            "gpu_count": _gpu_count(gpu, topology) or int(host.get("gpu_operator_gpu_count") or 0)
            or share + (index < left),
            "topology": plain(topology) if isinstance(topology, Mapping) else None,
            "gpu_memory_mib": _gpu_memory(gpu, host.get("gpu_operator_gpu_memory_mib")),
            "mig_enabled": any(g.get("mig_mode") == "Enabled" for g in gpu.get("gpus") or []),
        })
    return nodes
