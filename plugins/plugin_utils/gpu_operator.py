# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The NVIDIA GPU Operator's Helm values, built from a handful of variables (one document, no template branches).

``plan(config)`` returns ``{"problems": [...], "values": {...}, "device_plugin_config": {...}, ...}``.
Every refusal names the variable, the value found and the fix; values are only meaningful when there are none.

Decisions (sources: ../shared/data/rules.md sections 2-4, the chart's values.yaml at NVIDIA/gpu-operator@a22dbf6):

* ``driver_owner: host`` (default): our host layer pins and holds the driver and the container toolkit, so the
  Operator must not install them (``driver.enabled=false``, ``toolkit.enabled=false``). ``operator``: the Operator
  installs the driver, which then must be an exact version (never the chart's moving default) and must run
  ``gpuops_cuda_version`` (checked with cuda_compat).
* GPU sharing (MPS, time-slicing or whole GPUs per pool; the rules: ``gpu_sharing``): one device-plugin config per
  pool in one ConfigMap, rendered from the plan's ``gpuops_plan.gpu_sharing`` (``config["sharing"]``); a node
  selects its pool's by the label ``nvidia.com/device-plugin.config=<pool>`` (``node_labels``, in the plan's node
  registration, which kube_join applies). A plan that lacks a pool or chose otherwise than its settings now ask is
  refused as stale. ``config["mps_context_reserve"]`` and ``["mps_min_usable"]``: the
  gpuops_mps_* variables, None for their defaults (the rule is ``plugin_utils/mps``).
* MIG: only on pools that are neither NVLink-connected (MIG disables NVLink P2P; NCCL does not run on MIG) nor
  marked for multi-node training, and only on MIG-capable GPUs (Ampere data-center and newer, per NVIDIA's list).
* Every image repository goes through the registry mirror; versions stay the pinned chart's own.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils import cuda_compat, versions
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_sharing, images, kube_plan, mps

CONFIGMAP_NAME = "gpuops-device-plugin-config"
WHOLE_GPU_CONFIG = "whole-gpu"
# Chart sections that hold an image: repository is rewritten to the mirror.
IMAGE_SECTIONS = {
    "operator": "nvcr.io/nvidia",
    "validator": "nvcr.io/nvidia",
    "driver": "nvcr.io/nvidia",
    "toolkit": "nvcr.io/nvidia/k8s",
    "devicePlugin": "nvcr.io/nvidia",
    "dcgm": "nvcr.io/nvidia/cloud-native",
    "dcgmExporter": "nvcr.io/nvidia/k8s",
    "gfd": "nvcr.io/nvidia",
    "migManager": "nvcr.io/nvidia/cloud-native",
    "nodeStatusExporter": "nvcr.io/nvidia",
    "ccManager": "nvcr.io/nvidia/cloud-native",
    # only deployed with sandbox workloads, GDS or GDRCopy switched on; mirrored all the same
    "vfioManager": "nvcr.io/nvidia/cloud-native",
    "sandboxDevicePlugin": "nvcr.io/nvidia",
    "kataSandboxDevicePlugin": "nvcr.io/nvidia/cloud-native",
    "vgpuDeviceManager": "nvcr.io/nvidia/cloud-native",
    "gds": "nvcr.io/nvidia/cloud-native",
    "gdrcopy": "nvcr.io/nvidia/cloud-native",
    "draDriver": "nvcr.io/nvidia",
}
DRIVER_MANAGER_REPOSITORY = "nvcr.io/nvidia/cloud-native"  # k8s-driver-manager
# Sections whose k8s-driver-manager image sits one level down (driver.manager, vgpuManager.driverManager, ...).
DRIVER_MANAGER_KEYS = {"driver": "manager", "vgpuManager": "driverManager", "vfioManager": "driverManager"}
NFD_REPOSITORY = "registry.k8s.io/nfd/node-feature-discovery"

# MIG-capable GPUs (NVIDIA MIG User Guide, "Supported GPUs"; rules.md 2.1): compute capability >= 8.0 data-center
# parts. Matched as whole words in the upper-cased product name, so "H20" does not match "H200".
MIG_CAPABLE = (
    "A100",
    "A800",
    "A30",
    "H100",
    "H800",
    "H200",
    "H20",
    "GH200",
    "B200",
    "GB200",
    "B300",
    "GB300",
    "RTX PRO 6000 BLACKWELL",
    "RTX PRO 5000 BLACKWELL",
    "RTX PRO 4500 BLACKWELL",
)
_MIG_PATTERNS = [re.compile(r"(?<![A-Z0-9])" + re.escape(name) + r"(?![A-Z0-9])") for name in MIG_CAPABLE]
_MIG_CONFIG = re.compile(r"^[a-z0-9]([a-z0-9.+-]{0,61}[a-z0-9])?$")


def mig_capable(gpu_model: str | None) -> bool:
    """True when the product name is in NVIDIA's MIG list (A100, A30, H100, H200, B200, ...)."""
    name = " ".join(str(gpu_model or "").upper().replace("-", " ").split())
    return any(pattern.search(name) for pattern in _MIG_PATTERNS)


def _nvlinked(topology: dict | None) -> bool:
    """NVLink between any two GPUs of the node (the topology's nvlink_domains, or the GPUs' nvlink_peers)."""
    topology = topology or {}
    if any(len(domain) > 1 for domain in topology.get("nvlink_domains") or []):
        return True
    return any((gpu.get("nvlink_peers") or {}) for gpu in topology.get("gpus") or [])


def _pool_problems(name: str, pool: dict, nodes: list[dict], rule: mps.Limits, multi_node: bool) -> list[str]:
    """``multi_node``: gpuops_multi_node_training, which marks the training pool whatever its own settings say."""
    var = f"gpu_operator_pools.{name}"
    problems = gpu_sharing.sharing_problems(name, pool, nodes, rule)
    replicas = pool.get("time_slicing_replicas")
    profile = pool.get("mig_profile") or ""
    if not profile:
        return problems
    if not isinstance(profile, str) or not _MIG_CONFIG.match(profile):
        problems.append(
            f"{var}.mig_profile is {profile!r}: expected a mig-parted config name such as 'all-1g.10gb' or "
            "'all-balanced'; fix: use a name from the mig-manager ConfigMap"
        )
    if replicas is not None:
        problems.append(
            f"{var} sets both mig_profile ({profile!r}) and time_slicing_replicas ({replicas!r}); "
            "fix: choose one way to share this pool's GPUs"
        )
    if pool.get("multi_node_training") or (multi_node and name == gpu_sharing.TRAINING_POOL):
        marked = ("the pool is marked multi_node_training" if pool.get("multi_node_training")
                  else "the team runs multi-node training in this pool (gpuops_multi_node_training)")
        problems.append(
            f"{var}.mig_profile is {profile!r} but {marked}: NCCL does not run on MIG "
            "and MIG disables NVLink P2P; fix: remove mig_profile, or use a separate pool that is not for training"
        )
    linked = sorted(node["name"] for node in nodes if _nvlinked(node.get("topology")))
    if linked:
        problems.append(
            f"{var}.mig_profile is {profile!r} but these nodes of the pool have NVLink-connected GPUs "
            f"(by their topology): {', '.join(linked)}; MIG disables NVLink P2P between them; fix: remove mig_profile "
            "for this pool, or move the nodes to a pool without MIG"
        )
    for node in nodes:
        if not mig_capable(node.get("gpu_model")):
            problems.append(
                f"{var}.mig_profile is {profile!r} but node {node['name']} has GPU {node.get('gpu_model')!r}, which "
                "cannot do MIG (MIG needs A30, A100, H100, H200, B200 or another GPU on NVIDIA's MIG list); "
                "fix: remove mig_profile for this pool, or declare the node's real GPU model"
            )
    return problems


def _driver_problems(config: dict) -> list[str]:
    if config.get("driver_owner", "host") == "host":  # host or operator: the role's argument spec's choices
        return []
    version = config.get("driver_version") or ""
    try:
        parsed = versions.parse_driver_version(version, name="gpu_operator_driver_version")
    except ValueError as exc:
        return [f"gpu_operator_driver_owner is 'operator', which needs an exact driver version: {exc}"]
    if len(parsed) != 3:  # noqa: PLR2004 - branch.minor.patch, as the driver images are tagged
        return [f"gpu_operator_driver_version is {version!r}: the Operator's driver image needs the exact version "
                "with three parts, e.g. '580.105.08'; fix: pin it"]
    cuda = config.get("cuda_version") or ""
    if not cuda:
        return []
    try:
        result = cuda_compat.check_compat(str(version), str(cuda))
    except ValueError as exc:
        return [f"gpuops_cuda_version: {exc}"]
    if not result["compatible"]:
        return [f"gpu_operator_driver_version {version!r} cannot run gpuops_cuda_version {cuda!r}: "
                + "; ".join(result["reasons"])]
    return []


def problems(config: dict) -> list[str]:
    """Every refusal for ``config`` (see ``plan``)."""
    found = []
    chart = kube_plan.release_problem("gpu_operator_chart_version", config.get("chart_version"), "gpu_operator")
    if chart:
        found.append(chart)
    found.extend(_driver_problems(config))
    pools = config.get("pools") or {}
    nodes = config.get("nodes") or []
    for node in nodes:
        if node.get("pool") not in pools:
            found.append(
                f"node {node.get('name')} is in pool {node.get('pool')!r}, which gpu_operator_pools does not define "
                f"({', '.join(sorted(pools)) or 'none'}); fix: set gpuops_pool to one of them, or add the pool"
            )
    try:
        rule = mps.limits(config.get("mps_context_reserve"), config.get("mps_min_usable"))
    except ValueError as exc:
        return [*found, str(exc)]
    for name in sorted(pools):
        found.extend(_pool_problems(name, pools[name] or {}, [n for n in nodes if n.get("pool") == name], rule,
                                    bool(config.get("multi_node_training"))))
    try:
        images.mirror_image("nvcr.io/nvidia", config.get("registry_mirror") or "")
    except ValueError as exc:
        found.append(f"gpuops_registry_mirror: {exc}")
    return found


def device_plugin_config(sharing: dict) -> dict[str, str]:
    """The device-plugin ConfigMap's data: one config per pool from what its replicas get (``gpu_sharing.plan_part``,
    the plan's ``gpu_sharing``), plus the whole-GPU default."""
    data = {WHOLE_GPU_CONFIG: "version: v1\nflags:\n  migStrategy: none\n"}
    for name in sorted(sharing):
        mig = "single" if sharing[name].get("strategy") == "mig" else "none"
        data[name] = f"version: v1\nflags:\n  migStrategy: {mig}\n" + gpu_sharing.sharing_yaml(sharing[name])
    return data


def _planned_sharing(pools: dict, planned: Any, enabled: bool) -> tuple[dict, list[str]]:
    """Each pool's sharing: the plan's (``gpuops_plan.gpu_sharing``, made by preflight from the GPU memory it read).
    A plan without the pool, or whose entry chose otherwise than the pool's settings now ask, is older than the
    inventory: refused. With the GPU Operator off (``enabled``), a plan holds no part and none is asked for."""
    if planned is None and not enabled:
        return {}, []
    planned = planned if isinstance(planned, dict) else {}
    keys, found = ("strategy", "replicas", "mig_profile"), []
    for name in sorted(pools):
        entry, pool = planned.get(name) or {}, pools[name] or {}
        asked = {**gpu_sharing.pool_sharing(pool, []), "mig_profile": pool.get("mig_profile") or None}
        if any(entry.get(key) != asked[key] for key in keys):
            found.append(
                f"gpuops_plan.gpu_sharing.{name} ({', '.join(f'{k} {entry.get(k)!r}' for k in keys)}) is not what "
                f"gpu_operator_pools.{name} asks now ({', '.join(f'{k} {asked[k]!r}' for k in keys)}): "
                f"{kube_plan.STALE_PLAN}"
            )
    return {name: planned.get(name) for name in pools}, found


def build_values(config: dict) -> dict[str, Any]:
    """The one values document for the gpu-operator chart."""
    mirror = config.get("registry_mirror") or ""
    operator_owns = config.get("driver_owner", "host") == "operator"
    pools = config.get("pools") or {}
    any_mig = any((pool or {}).get("mig_profile") for pool in pools.values())
    values: dict[str, Any] = {section: {"repository": images.mirror_image(repo, mirror)}
                              for section, repo in IMAGE_SECTIONS.items()}
    values["driver"]["enabled"] = operator_owns
    for section, key in DRIVER_MANAGER_KEYS.items():
        values.setdefault(section, {})[key] = {"repository": images.mirror_image(DRIVER_MANAGER_REPOSITORY, mirror)}
    if operator_owns:
        values["driver"]["version"] = str(config["driver_version"])
    values["toolkit"]["enabled"] = operator_owns
    values["devicePlugin"]["config"] = {"create": False, "name": CONFIGMAP_NAME, "default": WHOLE_GPU_CONFIG}
    values["mig"] = {"strategy": "single" if any_mig else "none"}
    values["migManager"]["enabled"] = bool(any_mig)
    values["dcgmExporter"]["serviceMonitor"] = {"enabled": True}
    values["nfd"] = {"enabled": True}
    values["cdi"] = {"enabled": True}
    values["node-feature-discovery"] = {"image": {"repository": images.mirror_image(NFD_REPOSITORY, mirror)}}
    return values


def node_labels(pools: dict, nodes: list[dict]) -> dict[str, dict[str, str]]:
    """Labels each GPU node carries: its device-plugin config, and its MIG profile where the pool has one."""
    labels = {}
    for node in nodes:
        pool = pools.get(node.get("pool")) or {}
        node_set = {"nvidia.com/device-plugin.config": str(node.get("pool"))}
        if pool.get("mig_profile"):
            node_set["nvidia.com/mig.config"] = str(pool["mig_profile"])
        labels[node["name"]] = node_set
    return labels


def plan(config: dict) -> dict[str, Any]:
    """Problems, values and device-plugin ConfigMap data for ``config``; ``config["sharing"]``: the
    plan's gpu_sharing part; ``config["enabled"]``: kube_addons_gpu_operator."""
    found = problems(config)
    pools = config.get("pools") or {}
    if not found:
        sharing, found = _planned_sharing(pools, config.get("sharing"), bool(config.get("enabled", True)))
    if found:
        return {"problems": found, "values": {}, "device_plugin_config": {}, "sharing": {},
                "device_plugin_annotations": {}}
    return {
        "problems": [],
        "sharing": {name: {key: entry.get(key) for key in gpu_sharing.SHARE_KEYS} for name, entry in sharing.items()},
        # one line per pool on the device-plugin ConfigMap, for review: what each replica gets
        "device_plugin_annotations": {f"gpuops.io/sharing.{name}": gpu_sharing.describe(item)
                                      for name, item in sharing.items()},
        "values": build_values(config),
        "device_plugin_config": device_plugin_config(sharing),
    }
