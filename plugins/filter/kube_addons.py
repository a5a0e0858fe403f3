# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the Kubernetes add-on roles (gpu_operator, kube_tenancy, training_stack):

* ``hostvars_list | gpuops.cluster.kube_gpu_nodes``: name, pool, GPU model, count, memory, MIG and topology per node;
* ``config | gpuops.cluster.gpu_operator_plan``: problems, Helm values, device-plugin configs, node labels;
* ``config | gpuops.cluster.kube_tenancy_plan``: problems and the tenancy objects;
* ``pool | gpuops.cluster.pytorchjob_template(config)``: a training pool's PyTorchJob template with NCCL settings;
* ``objects | gpuops.cluster.kube_mirror_images(mirror)``: upstream manifests with their images on the mirror.

Thin: the logic lives in plugins/plugin_utils/{gpu_operator,kube_tenancy,training_jobs}.py; documentation in the
.yml files next to this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

gpu_operator = lazy("gpu_operator")
images = lazy("images")
kube_tenancy = lazy("kube_tenancy")
training_jobs = lazy("training_jobs")


def _plain(value: Any) -> Any:
    """Ansible's lazy containers as plain dicts and lists, so plugin_utils see ordinary data."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _mapping(name: str, value: Any) -> dict:
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"{name}: expected a mapping, got {type(value).__name__}")
    return _plain(value)


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


def kube_gpu_nodes(hosts: Any) -> list[dict]:
    """One entry per GPU node, from this run's gpu facts (preflight) or else the inventory's declarations."""
    nodes = []
    for host in hosts or []:
        facts = host.get("ansible_facts") or {}
        gpu = facts.get("gpu") or {}
        topology = gpu.get("topology") or host.get("gpuops_gpu_topology")
        names = [g.get("name") for g in gpu.get("gpus") or [] if g.get("name")]
        nodes.append({
            "name": str(host.get("inventory_hostname")),
            "pool": host.get("gpuops_pool"),
            "gpu_model": names[0] if names else host.get("gpu_operator_gpu_model"),
            "gpu_count": _gpu_count(gpu, topology) or int(host.get("gpu_operator_gpu_count") or 0),
            "socket_ifname": str(((facts.get("default_ipv4") or {}).get("interface")) or ""),
            "topology": _plain(topology) if isinstance(topology, Mapping) else None,
            "gpu_memory_mib": _gpu_memory(gpu, host.get("gpu_operator_gpu_memory_mib")),
            "mig_enabled": any(g.get("mig_mode") == "Enabled" for g in gpu.get("gpus") or []),
        })
    return nodes


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
        return training_jobs.mirror_manifest_images(_plain(list(objects or [])),
                                                    lambda ref: images.mirror_image(ref, str(mirror or "")))
    except ValueError as exc:
        raise AnsibleFilterError(f"kube_mirror_images: {exc}") from exc


class FilterModule:
    """gpuops.cluster Kubernetes add-on filters."""

    def filters(self) -> dict:
        return {
            "kube_gpu_nodes": kube_gpu_nodes,
            "gpu_operator_plan": gpu_operator_plan,
            "kube_tenancy_plan": kube_tenancy_plan,
            "pytorchjob_template": pytorchjob_template,
            "kube_mirror_images": kube_mirror_images,
        }
