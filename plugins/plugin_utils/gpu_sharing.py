# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""How a pool's GPUs are shared on Kubernetes: MPS, time-slicing, or whole GPUs (pure functions).

A pool (``gpu_operator_pools.<pool>``) chooses one:

* ``mps_replicas: N`` - CUDA MPS through the device plugin's ``sharing.mps``: each GPU is advertised N times and
  each replica is limited to an equal share of the GPU's memory and compute, enforced by the MPS control daemon.
  The default for the inference pool (``replicas: 4``).
* ``time_slicing_replicas: N`` - the explicit choice of time-slicing: N replicas that interleave in time, with
  **no memory isolation** (every replica sees, and can take, the whole GPU's memory) and one fault domain.
* neither - whole GPUs (the training pool).

Upstream rules, as the NVIDIA k8s-device-plugin implements them (github.com/NVIDIA/k8s-device-plugin at v0.20.0,
the device plugin the pinned gpu-operator chart v26.3.2 ships: its values.yaml ``devicePlugin.version``; MPS
sharing exists from v0.15.0, README "With CUDA MPS"):

* replicas >= 2 for either strategy (``api/config/v1/replicas.go``: "number of replicas must be >= 2");
* time-slicing and MPS are mutually exclusive (README "Shared Access to GPUs");
* MPS is not supported on MIG devices (``internal/plugin/mps.go``: "sharing using MPS is not supported for MIG
  devices"; README note under "With CUDA MPS");
* an MPS server takes at most 48 clients on a GPU of compute capability 7.5 or newer and 16 below
  (``cmd/mps-control-daemon/mps/device.go`` ``maxClients``; more fails "maximum allowed replicas exceeded");
* each MPS replica's pinned device memory limit is the GPU's total memory / replicas, in whole MiB
  (``cmd/mps-control-daemon/mps/daemon.go`` ``perDevicePinnedDeviceMemoryLimits``) and its active thread
  percentage 100 / replicas (``activeThreadPercentage``);
* ``failRequestsGreaterThanOne`` defaults to true for MPS (``api/config/v1/config.go``); we render it explicitly,
  so a pod asking for 2 replicas of one GPU is refused instead of silently getting one share;
* ``renameByDefault: true`` would advertise ``nvidia.com/gpu.shared``, which the teams' ResourceQuota
  (``requests.nvidia.com/gpu``) does not count: it stays false, rendered explicitly.

The chart's ``devicePlugin.mps.root`` (``/run/nvidia/mps``) reaches the ClusterPolicy as ``spec.devicePlugin.mps``
unchanged; the Operator runs the MPS control daemon for nodes whose config shares through MPS. ../shared/data
rules.md sections 2 and 3 quote the README and the config schema at the commit above.

Our own rules (docs/security.md): no MPS on the training pool (training jobs take whole GPUs
and NCCL between them; a share of a GPU is not a training GPU), and a pool that asks for memory isolation
(``memory_isolation: true``) cannot time-slice. A replica's share is an MPS cap, and the client's CUDA context
takes ``gpuops_mps_context_reserve`` of it: a share that leaves less than ``gpuops_mps_min_usable`` to allocate is
refused (``plugin_utils/mps``, the rule compose's caps follow too; ``mps_limits`` here). ``mps_memory_per_replica_mib``
states what the pool's workloads need to allocate per replica, a higher floor for that pool; it is also refused when
a node's GPU memory is unknown (no preflight facts and no ``gpu_operator_gpu_memory_mib``).

``plan_part(pools, nodes)`` is ``gpuops_plan.gpu_sharing``, made once by the plan (plan.gpu_sharing_part), from which
gpu_operator renders the device-plugin config; ``default_pools`` is gpu_operator_pools' default, for both.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import mps

MIN_REPLICAS = 2
DEFAULT_MPS_REPLICAS = 4        # the inference pool's default (default_pools)
MPS_MAX_CLIENTS = 48            # compute capability >= 7.5 (device.go maxClients)
MPS_MAX_CLIENTS_BEFORE_7_5 = 16
TRAINING_POOL = "training"      # kube_plan.POOLS: training, inference
# Data-center GPUs of compute capability below 7.5 (Volta 7.0, Pascal 6.x, Maxwell 5.x, Kepler 3.x), matched as
# whole words in the upper-cased product name: an MPS server takes 16 clients on them, not 48.
_BEFORE_7_5 = re.compile(r"(?<![A-Z0-9])(V100|TITAN V|P100|P40|P4|P6|K80|K40|M60|M40|M10|M4)(?![A-Z0-9])")
# What each replica of a pool gets (pool_sharing); the plan's gpu_sharing.<pool> adds mig_profile, gpu_memory_mib,
# nodes and reason.
SHARE_KEYS = ("strategy", "replicas", "memory_isolation", "memory_per_replica_mib", "thread_percentage")


def max_mps_clients(gpu_model: str | None) -> int:
    """48, or 16 for a GPU NVIDIA's device plugin treats as older than compute capability 7.5."""
    name = " ".join(str(gpu_model or "").upper().replace("-", " ").split())
    return MPS_MAX_CLIENTS_BEFORE_7_5 if _BEFORE_7_5.search(name) else MPS_MAX_CLIENTS


def _bad_count(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or value < MIN_REPLICAS


def _mps_problems(var: str, name: str, pool: dict, nodes: list[dict], rule: mps.Limits) -> list[str]:
    replicas = pool["mps_replicas"]
    found = []
    if name == TRAINING_POOL or pool.get("multi_node_training"):
        found.append(
            f"{var}.mps_replicas is {replicas!r} on the training pool: training jobs take whole GPUs (NCCL between "
            "them), and an MPS replica is a fraction of one; fix: remove mps_replicas from this pool, and share "
            "GPUs only in the inference pool"
        )
    if pool.get("mig_profile"):
        found.append(
            f"{var} sets both mps_replicas ({replicas!r}) and mig_profile ({pool['mig_profile']!r}): the device "
            "plugin does not support MPS on MIG devices; fix: choose one (MPS shares whole GPUs, MIG partitions them)"
        )
    mig_nodes = sorted(node["name"] for node in nodes if node.get("mig_enabled"))
    if mig_nodes:
        found.append(
            f"{var}.mps_replicas is {replicas!r} but MIG is enabled on the GPUs of {', '.join(mig_nodes)} "
            "(gpu facts, mig_mode Enabled): the device plugin does not support MPS on MIG devices; fix: disable MIG "
            "on those GPUs (nvidia-smi -mig 0), or move the nodes to a pool without MPS"
        )
    if _bad_count(replicas):
        return [*found, f"{var}.mps_replicas is {replicas!r}: the device plugin needs >= {MIN_REPLICAS} replicas per "
                        "GPU (1 is a whole GPU); fix: set 2 or more (default 4), or remove it for whole GPUs"]
    for node in nodes or [{}]:  # no node known: the limit of compute capability 7.5 and newer
        limit = max_mps_clients(node.get("gpu_model"))
        where = f" on node {node['name']} ({node.get('gpu_model') or 'GPU model unknown'})" if node else ""
        if replicas > limit:
            found.append(f"{var}.mps_replicas is {replicas} but an MPS server{where} takes at most {limit} clients per "
                         f"GPU; fix: set mps_replicas to {limit} or fewer")
    found.extend(_memory_problems(var, pool, replicas, nodes, rule))
    return found


def _memory_problems(var: str, pool: dict, replicas: int, nodes: list[dict], rule: mps.Limits) -> list[str]:
    """Each node whose GPUs' share per replica leaves too little after the CUDA context (``mps.cap_problem``, with
    the pool's ``mps_memory_per_replica_mib`` as its floor when higher); a need with no GPU memory to check it."""
    need = pool.get("mps_memory_per_replica_mib")
    if need is not None and (isinstance(need, bool) or not isinstance(need, int) or need < 1):
        return [f"{var}.mps_memory_per_replica_mib is {need!r}: expected the MiB each replica's workload needs, a "
                "whole number >= 1; fix: e.g. 16384, or remove it"]
    found = []
    unknown = sorted(node["name"] for node in nodes if not node.get("gpu_memory_mib"))
    if unknown and need is not None:
        found.append(
            f"{var}.mps_memory_per_replica_mib is {need} but the GPU memory of {', '.join(unknown)} is unknown "
            "(no preflight facts): the share each of the "
            f"{replicas} replicas gets cannot be checked; fix: run preflight, or declare gpu_operator_gpu_memory_mib "
            "(MiB per GPU) in those hosts' host_vars"
        )
    floor = max(need or 0, rule.min_usable_mib)
    for node in nodes:
        memory = node.get("gpu_memory_mib")
        if not memory:
            continue
        fit = int(memory) // (rule.reserve_mib + floor)
        fix = (f"lower mps_replicas to {fit} or fewer" if fit >= MIN_REPLICAS else
               "remove mps_replicas (whole GPUs), or move the node to a pool of larger GPUs")
        problem = mps.cap_problem(
            f"{var}: each replica's MPS cap on node {node['name']}'s GPUs ({node.get('gpu_model') or 'model unknown'}, "
            f"{memory} MiB / mps_replicas {replicas}: the MPS daemon's default pinned device memory limit)",
            int(memory) // replicas, rule, fix, need, f"{var}.mps_memory_per_replica_mib")
        if problem:
            found.append(problem)
    return found


def sharing_problems(name: str, pool: dict, nodes: list[dict], mps_limits: mps.Limits | None = None) -> list[str]:
    """Every refusal of pool ``name``'s sharing settings (``nodes``: the pool's GPU nodes, kube_gpu.gpu_nodes;
    ``mps_limits``: the MPS cap rule's settings, None for the defaults)."""
    var = f"gpu_operator_pools.{name}"
    shares, slicing = pool.get("mps_replicas"), pool.get("time_slicing_replicas")
    found = []
    if shares is not None and slicing is not None:
        found.append(f"{var} sets both mps_replicas ({shares!r}) and time_slicing_replicas ({slicing!r}); the device "
                     "plugin's MPS and time-slicing are mutually exclusive; fix: keep one (MPS isolates memory)")
    if slicing is not None and pool.get("memory_isolation"):
        found.append(
            f"{var}.memory_isolation is true but the pool time-slices (time_slicing_replicas {slicing!r}): "
            "time-slicing gives no memory isolation, any replica can take the whole GPU's memory; fix: use "
            "mps_replicas instead of time_slicing_replicas, or drop memory_isolation"
        )
    if slicing is not None and _bad_count(slicing):
        found.append(
            f"{var}.time_slicing_replicas is {slicing!r}: the device plugin needs >= {MIN_REPLICAS} replicas per GPU "
            "(1 is a whole GPU, 0 is none); fix: set 2 or more (inference default 4), or remove it for whole GPUs"
        )
    if shares is not None:
        found.extend(_mps_problems(var, name, pool, nodes, mps_limits or mps.limits()))
    return found


def default_pools(multi_node_training: bool = False) -> dict[str, dict]:
    """gpu_operator_pools' default (the role's default calls this through gpuops.cluster.gpu_operator_default_pools,
    and the plan when the inventory sets none): the inference pool shares each GPU through MPS, 4 replicas; the
    training pool takes whole GPUs, marked multi_node_training as gpuops_multi_node_training says."""
    return {"inference": {"mps_replicas": DEFAULT_MPS_REPLICAS},
            TRAINING_POOL: {"multi_node_training": bool(multi_node_training)}}


def pool_sharing(pool: dict, nodes: list[dict]) -> dict[str, Any]:
    """What each replica of the pool gets: strategy, replicas, memory isolation, memory per replica, SM share (the
    last two only under MPS)."""
    whole = {**dict.fromkeys(SHARE_KEYS), "replicas": 1, "memory_isolation": True}
    if pool.get("mps_replicas"):
        replicas = int(pool["mps_replicas"])
        known = [int(node["gpu_memory_mib"]) for node in nodes if node.get("gpu_memory_mib")]
        return {**whole, "strategy": "mps", "replicas": replicas, "thread_percentage": 100 // replicas,
                "memory_per_replica_mib": min(known) // replicas if known else None}
    if pool.get("time_slicing_replicas"):
        return {**whole, "strategy": "time-slicing", "replicas": int(pool["time_slicing_replicas"]),
                "memory_isolation": False}
    return {**whole, "strategy": "mig" if pool.get("mig_profile") else "none"}


def _reason(name: str, pool: dict, share: dict, nodes: list[dict], source: str) -> str:
    """One sentence: which setting chose the strategy, and where the memory per replica comes from."""
    key = {"mps": "mps_replicas", "time-slicing": "time_slicing_replicas", "mig": "mig_profile"}.get(share["strategy"])
    chosen = (f"{source}.{name}.{key} is {pool[key]!r}" if key
              else f"{source}.{name} sets neither mps_replicas nor time_slicing_replicas")
    text = f"{chosen}: {describe(share)}"
    if share["strategy"] != "mps":
        return text
    known = sorted((int(n["gpu_memory_mib"]), n["name"]) for n in nodes if n.get("gpu_memory_mib"))
    if known:
        return (f"{text}; memory per replica from the pool's smallest GPU, {known[0][0]} MiB on {known[0][1]}, "
                f"divided by {share['replicas']}")
    return (f"{text}; the pool's GPU memory is unknown (no gpu facts, no gpu_operator_gpu_memory_mib), so the "
            "MPS control daemon divides each GPU's own memory")


def plan_part(pools: dict, nodes: list[dict], source: str = "gpu_operator_pools",
              mps_limits: mps.Limits | None = None) -> dict[str, dict]:
    """``gpuops_plan.gpu_sharing``: pool name -> what its GPUs' replicas get (``pool_sharing``), the pool's
    mig_profile, smallest GPU memory and nodes, and the reason. ``nodes``: kube_gpu.gpu_nodes; ``source``: where the
    pools came from (gpu_operator_pools, or its default). A pool whose settings are refused (``sharing_problems``)
    gets strategy null and its refusals as the reason: gpu_operator refuses it before any change. ``mps_limits``:
    see ``sharing_problems``."""
    part = {}
    for name in sorted(pools):
        pool = pools[name] or {}
        members = [node for node in nodes if node.get("pool") == name]
        memory = [int(node["gpu_memory_mib"]) for node in members if node.get("gpu_memory_mib")]
        entry = {"mig_profile": pool.get("mig_profile") or None, "gpu_memory_mib": min(memory) if memory else None,
                 "nodes": [str(node["name"]) for node in members]}
        problems = sharing_problems(name, pool, members, mps_limits)
        if problems:
            entry.update(dict.fromkeys(SHARE_KEYS), reason="refused (gpu_operator's assert): " + " | ".join(problems))
        else:
            share = pool_sharing(pool, members)
            entry.update(share, reason=_reason(name, pool, share, members, source))
        part[name] = entry
    return part


def describe(sharing: dict) -> str:
    """One line for review (the device-plugin ConfigMap's annotation)."""
    if sharing["strategy"] == "mps":
        memory = (f"{sharing['memory_per_replica_mib']} MiB" if sharing["memory_per_replica_mib"]
                  else "1/{} of the GPU's memory".format(sharing["replicas"]))
        return (f"MPS: {sharing['replicas']} replicas per GPU, each limited to {memory} and "
                f"{sharing['thread_percentage']}% of the SMs (enforced by the MPS control daemon)")
    if sharing["strategy"] == "time-slicing":
        return (f"time-slicing: {sharing['replicas']} replicas per GPU, no memory isolation (any replica can take "
                "the whole GPU's memory)")
    if sharing["strategy"] == "mig":
        return "MIG: each GPU partitioned into MIG devices (the pool's mig_profile), each with its own memory"
    return "whole GPUs: no sharing"


def sharing_yaml(sharing: dict) -> str:
    """The ``sharing:`` block of a pool's device-plugin config from what its replicas get (``pool_sharing``, or the
    plan's ``gpu_sharing.<pool>``); empty for whole GPUs and MIG."""
    section = {"mps": "mps", "time-slicing": "timeSlicing"}.get(sharing.get("strategy"))
    if not section:
        return ""
    return (f"sharing:\n  {section}:\n    renameByDefault: false\n    failRequestsGreaterThanOne: true\n"
            f"    resources:\n      - name: nvidia.com/gpu\n        replicas: {int(sharing['replicas'])}\n")
