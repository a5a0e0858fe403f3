# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Plan member workspaces on one GPU host: exclusive GPUs, NUMA-local CPUs, a memory share.

Controller-only (used by the ``workspace_plan`` filter). The CPU-list grammar is
``module_utils/cpu_list``, shared with the topology parser.

Input is the team list (``gpuops_members``, the role parameter ``compose_stack_members``) and the GPU topology as
``gpuops.cluster.gpu_topology`` returns it (``gpus: [{index, cpu_affinity, numa_node, ...}]``).

Rules (also the role's documented behaviour):

* The members must pass the team's rules (``plugin_utils/team``: ``member_problems``, which holds the
  GPU-assignment rule): a GPU assigned twice, a GPU the host does not have, a bad or duplicate name or
  uid are *problems*, and so is a member without GPUs (a workspace needs one). The caller refuses to go
  on (the compose_stack assert stage), listing all of them at once.
* CPUs: GPUs are grouped into pools by NUMA node (by identical CPU affinity when the node is
  unknown). Each pool's CPU list (the union of its GPUs' ``cpu_affinity``) is shared among the
  members holding GPUs in it, in proportion to how many of the pool's GPUs each holds. Every
  contiguous range is cut separately, so a member gets matching cores from ``0-51`` and their
  hyper-thread siblings from ``104-155``. CPUs of unassigned GPUs stay free for the host.
  A member whose GPUs span pools gets its share of each, and a warning.
* When a pool has fewer CPUs in a range than members, members share that range (warning).
* A GPU without ``cpu_affinity`` leaves its member without a cpuset (warning), never a guess.
* Memory: ``memory_pool_mb`` is shared in proportion to each member's GPUs out of all the
  host's GPUs, so memory of unassigned GPUs also stays free.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import format_cpu_list, parse_cpu_list, ranges
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import member_problems


def _member_problems(members: list, known: set[int]) -> list[str]:
    """The team's member and GPU-assignment rules (plugin_utils/team), and a workspace's own: at least one GPU."""
    problems = member_problems(members, host_gpus=known)
    for position, member in enumerate(members):
        if isinstance(member, dict) and member.get("gpus", []) == []:
            problems.append(f"gpuops_members[{position}].gpus is {member.get('gpus')!r} for "
                            f"{member.get('name', f'#{position}')}; expected a non-empty list of GPU indexes such as "
                            "[0, 1] (a compose workspace needs a GPU). Fix: give the member GPUs, e.g. gpus: [0]")
    return problems


def _pools(gpus: list[dict]) -> tuple[dict[int, Any], dict[Any, list[int]], list[str]]:
    """GPU index -> pool key, pool key -> CPU list, warnings."""
    pool_of: dict[int, Any] = {}
    cpus: dict[Any, set[int]] = {}
    warnings: list[str] = []
    for gpu in gpus:
        affinity = gpu.get("cpu_affinity")
        if not affinity:
            continue
        try:
            cpu_list = parse_cpu_list(affinity)
        except ValueError as exc:
            warnings.append(f"GPU {gpu['index']}: cpu_affinity {exc}; its member gets no cpuset")
            continue
        key = ("numa", gpu["numa_node"]) if gpu.get("numa_node") is not None else ("cpus", tuple(cpu_list))
        pool_of[gpu["index"]] = key
        cpus.setdefault(key, set()).update(cpu_list)
    return pool_of, {k: sorted(v) for k, v in cpus.items()}, warnings


def _split(run: list[int], shares: list[tuple[str, int]], total: int) -> tuple[dict[str, list[int]], bool]:
    """Cut one run of CPUs among (member, gpu_count) shares of ``total`` pool GPUs."""
    out: dict[str, list[int]] = {}
    shared = False
    done = 0
    for name, count in shares:
        start = len(run) * done // total
        done += count
        end = len(run) * done // total
        if end <= start:  # fewer CPUs than members in this run: share the CPU at this point
            index = min(start, len(run) - 1)
            out[name] = [run[index]]
            shared = True
        else:
            out[name] = run[start:end]
    return out, shared


def plan_workspaces(members: list[dict], topology: dict, memory_pool_mb: int) -> dict:
    """Return ``{"members": {name: {gpus, cpuset, memory_mb, numa_nodes}}, "problems": [...], "warnings": [...]}``."""
    if not isinstance(members, list):
        return {"members": {}, "problems": [f"members must be a list, got {type(members).__name__}"], "warnings": []}
    gpus = [g for g in (topology or {}).get("gpus", []) if isinstance(g, dict) and "index" in g]
    known = {g["index"] for g in gpus}
    problems = _member_problems(members, known)
    if not gpus:
        problems.append("the topology lists no GPUs, so GPUs cannot be assigned. Fix: run on the GPU host with the "
                        "driver loaded, or pass the host's gpu_topology result as compose_stack_topology")
    if problems:
        return {"members": {}, "problems": problems, "warnings": []}

    pool_of, pool_cpus, warnings = _pools(gpus)
    numa_of = {g["index"]: g.get("numa_node") for g in gpus}
    pool_gpus: dict[Any, list[int]] = {}
    for index, key in pool_of.items():
        pool_gpus.setdefault(key, []).append(index)

    cpus: dict[str, list[int]] = {m["name"]: [] for m in members}
    for key, pool in pool_cpus.items():
        shares = [(m["name"], sum(1 for g in m["gpus"] if pool_of.get(g) == key)) for m in members]
        shares = [(name, count) for name, count in shares if count]
        if not shares:
            continue
        for run in ranges(pool):
            part, shared = _split(run, shares, len(pool_gpus[key]))
            if shared:
                warnings.append(f"CPUs {format_cpu_list(run)} are fewer than the members using them "
                                f"({', '.join(n for n, _share in shares)}); those members share CPUs")
            for name, chunk in part.items():
                cpus[name].extend(chunk)

    planned: dict[str, dict] = {}
    total_gpus = len(gpus)
    for member in members:
        name = member["name"]
        missing = [g for g in member["gpus"] if g not in pool_of]
        if missing:
            warnings.append(f"member {name}: GPU(s) {missing} have no CPU affinity in the topology; "
                            "no cpuset is set for this member")
        nodes = sorted({numa_of[g] for g in member["gpus"] if numa_of.get(g) is not None})
        if len({pool_of.get(g) for g in member["gpus"]}) > 1:
            warnings.append(f"member {name}: GPUs {member['gpus']} sit on different NUMA nodes/CPU sets; "
                            "traffic between them crosses the CPU interconnect")
        planned[name] = {
            "gpus": sorted(member["gpus"]),
            "cpuset": format_cpu_list(cpus[name]) if cpus[name] and not missing else None,
            "memory_mb": int(memory_pool_mb) * len(member["gpus"]) // total_gpus if memory_pool_mb else None,
            "numa_nodes": nodes,
        }
    return {"members": planned, "problems": [], "warnings": warnings}
