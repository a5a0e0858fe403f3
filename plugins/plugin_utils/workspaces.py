# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Plan member workspaces on one GPU host: exclusive or MPS-shared GPUs, NUMA-local CPUs, memory and CPU limits.

Controller-only (used by ``plugin_utils/plan``).
The CPU-list grammar is ``module_utils/cpu_list``, shared with the topology parser.

Input is the team list (``gpuops_members``, its team rules already passed: ``team.team_problems``) and the GPU
topology as ``gpuops.cluster.gpu_facts`` reads it (``gpus: [{index, cpu_affinity, numa_node, ...}]``). The rules
(CPU pools and their split, MPS sharing, limits, what is refused) are described once, in docs/roles/compose_stack.md,
"What it guarantees".
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import format_cpu_list, parse_cpu_list, ranges
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import format_mib, host_gpu_problems, size_mib

# The member's own keys a workspace is deployed with, as the team list gives them (docs/small-team.md).
DEPLOYED_KEYS = ("name", "uid", "gid", "image", "shm_size", "mounts")


def _member_problems(members: list, known: set[int]) -> list[str]:
    """What depends on this host (``team.host_gpu_problems``), and a workspace's own rule: at least one GPU."""
    problems = host_gpu_problems(members, known)
    for position, member in enumerate(members):
        if isinstance(member, dict) and member.get("gpus", []) == [] and not member.get("shared_gpus"):
            problems.append(f"gpuops_members[{position}].gpus is {member.get('gpus')!r} for "
                            f"{member.get('name', f'#{position}')}; expected a non-empty list of GPU indexes such as "
                            "[0, 1], or one shared GPU (shared_gpus: [{gpu: 4, memory: 20g}]); a compose workspace "
                            "needs a GPU. Fix: give the member GPUs, e.g. gpus: [0]")
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


def _shared(members: list[dict]) -> dict[int, dict[str, int]]:
    """Shared GPU -> {member: cap in MiB}, in member order."""
    sharers: dict[int, dict[str, int]] = {}
    for member in members:
        for entry in member.get("shared_gpus") or []:
            sharers.setdefault(entry["gpu"], {})[member["name"]] = size_mib(entry["memory"]) or 0
    return sharers


def _gpu_memory(gpus: list[dict], gpus_found: Any) -> dict[int, int]:
    """GPU index -> memory in MiB, from the topology's entries, else the GPU facts' (``memory_total_mib``)."""
    found = {}
    for gpu in list(gpus_found or []) + gpus:
        if isinstance(gpu, dict) and isinstance(gpu.get("index"), int) and isinstance(gpu.get("memory_total_mib"), int):
            found[gpu["index"]] = gpu["memory_total_mib"]
    return found


def _num(value: float) -> str:
    """1433600 -> '1433600', 12.5 -> '12.5', 8.0 -> '8' (no exponent, at most two decimals)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _overcommit(kind: str, wanted: dict[str, tuple[float, bool]], total: float, unit: str, source: str) -> list[str]:
    """One problem when the limits add up past what the host has, naming every member and its number."""
    if not total or sum(v for v, _explicit in wanted.values()) <= total + 1e-9:
        return []
    listing = ", ".join(f"{name} {_num(value)} {unit} ({kind} given)" if explicit else f"{name} {_num(value)} {unit} "
                        "(share)" for name, (value, explicit) in wanted.items())
    lower = " or ".join(f"the {kind} of {name}" for name, (_v, given) in wanted.items() if given) or "the limits"
    return [f"the workspaces' {kind} limits overcommit this host: {listing} add up to "
            f"{_num(sum(v for v, _e in wanted.values()))} {unit}, more than the {_num(total)} {unit} of {source}. "
            "Fix: lower "
            f"{lower} (gpuops_members[].{kind}), or leave it out for the default share"]


def _cpu_split(holders: list[tuple[str, list[int]]], gpus: list[dict]) -> tuple[dict, dict, list[str]]:
    """Each holder's CPUs (its part of each pool it holds GPUs in), GPU -> pool, warnings."""
    pool_of, pool_cpus, warnings = _pools(gpus)
    pool_gpus: dict[Any, list[int]] = {}
    for index, key in pool_of.items():
        pool_gpus.setdefault(key, []).append(index)
    cpus: dict[str, list[int]] = {name: [] for name, _gpus in holders}
    for key, pool in pool_cpus.items():
        shares = [(name, sum(1 for g in held if pool_of.get(g) == key)) for name, held in holders]
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
    return cpus, pool_of, warnings


def _shared_checks(sharers: dict[int, dict[str, int]], gpu_memory: dict[int, int], problems: list[str],
                   warnings: list[str]) -> dict[str, dict]:
    """The ``shared`` part; caps past a GPU's memory are added to ``problems``, an unknown memory to ``warnings``."""
    shared_plan = {}
    for gpu, caps in sharers.items():
        total = gpu_memory.get(gpu)
        # The daemon's default cap, for a client that clears its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: the smallest, so
        # clearing the variable never gives a sharer more than any sharer's own cap.
        shared_plan[str(gpu)] = {"members": dict(caps), "memory_total_mib": total,
                                 "default_limit": format_mib(min(caps.values()))}
        listing = ", ".join(f"{n} {format_mib(mb)}" for n, mb in caps.items())
        if total is None:
            warnings.append(f"GPU {gpu} is shared ({listing}) but its memory is not known here (no driver yet?); "
                            "the caps are checked against it on the run after the driver is installed")
        elif sum(caps.values()) > total:
            problems.append(f"the members sharing GPU {gpu} are given {listing} of its memory (shared_gpus), "
                            f"{sum(caps.values())} MiB in all, more than the GPU's {total} MiB; MPS could not "
                            f"honour every cap. Fix: lower the memory of the shared_gpus entries for GPU {gpu}, so "
                            f"they add up to at most {format_mib(total)}")
    return shared_plan


def plan_workspaces(members: list[dict], topology: dict, gpus_found: Any = None) -> dict:
    """Return ``{"members": {name: {name, uid, gid, image, shm_size, mounts, gpus, shared_gpus, mps, cpuset, cpus,
    memory_mb, numa_nodes}}, "shared":
    {gpu: {members: {name: cap MiB}, memory_total_mib}}, "problems": [...], "warnings": [...], "gpu_total": n}``,
    each member's ``memory_mb`` and ``cpus`` its own (null where not given: ``size_workspaces`` sizes them).

    ``gpus_found``: the GPU facts' ``gpus`` (their ``memory_total_mib``). ``members`` passed the team rule
    (``team.team_problems``); gid is the uid where not given. With problems, members and shared are empty."""
    gpus = [g for g in (topology or {}).get("gpus", []) if isinstance(g, dict) and "index" in g]
    known = {g["index"] for g in gpus}
    problems = _member_problems(members, known)
    if not gpus:
        problems.append("the topology lists no GPUs, so GPUs cannot be assigned. Fix: run on the GPU host with the "
                        "driver loaded, or set gpuops_gpu_topology to the host's topology (gpu_facts with "
                        "topology: true)")
    if problems:
        return {"members": {}, "shared": {}, "problems": problems, "warnings": [], "gpu_total": len(gpus)}

    sharers = _shared(members)
    # A shared GPU is held by one pseudo-member in the CPU split; each of its sharers gets that part.
    holders = [(m["name"], list(m["gpus"]) if m.get("gpus") else []) for m in members]
    holders += [(f"shared:{gpu}", [gpu]) for gpu in sharers]
    cpus, pool_of, warnings = _cpu_split(holders, gpus)
    numa_of = {g["index"]: g.get("numa_node") for g in gpus}

    planned: dict[str, dict] = {}
    for member in members:
        name = member["name"]
        exclusive = list(member.get("gpus") or [])
        shared_here = [e["gpu"] for e in member.get("shared_gpus") or []]
        held = exclusive + shared_here
        mine = cpus[name] + [c for g in shared_here for c in cpus[f"shared:{g}"]]
        missing = [g for g in held if g not in pool_of]
        if missing:
            warnings.append(f"member {name}: GPU(s) {missing} have no CPU affinity in the topology; "
                            "no cpuset is set for this member")
        nodes = sorted({numa_of[g] for g in held if numa_of.get(g) is not None})
        if len({pool_of.get(g) for g in held}) > 1:
            warnings.append(f"member {name}: GPUs {held} sit on different NUMA nodes/CPU sets; "
                            "traffic between them crosses the CPU interconnect")
        planned[name] = {
            **{key: member.get(key) for key in DEPLOYED_KEYS},
            "gid": member.get("gid") or member["uid"],
            "gpus": sorted(exclusive),
            "shared_gpus": [{"gpu": g, "memory_mb": sharers[g][name]} for g in shared_here],
            # The one shared GPU is device 0 of the MPS daemon that serves it (its CUDA_VISIBLE_DEVICES).
            "mps": ({"gpu": shared_here[0], "pinned_mem_limit": f"0={format_mib(sharers[shared_here[0]][name])}"}
                    if shared_here else None),
            "cpuset": format_cpu_list(sorted(set(mine))) if mine and not missing else None,
            "cpus": float(member["cpus"]) if member.get("cpus") is not None else None,
            "memory_mb": size_mib(member.get("memory")),
            "numa_nodes": nodes,
        }
    shared_plan = _shared_checks(sharers, _gpu_memory(gpus, gpus_found), problems, warnings)
    return {"members": {} if problems else planned, "shared": {} if problems else shared_plan, "problems": problems,
            "warnings": warnings, "gpu_total": len(gpus)}


def size_workspaces(workspaces: dict, memory_pool_mb: int = 0, cpus_total: float = 0) -> dict:
    """The step after ``plan_workspaces``: each member's ``memory_mb`` and ``cpus`` left null get the default
    share of ``memory_pool_mb`` and ``cpus_total`` (the member's GPU share of the host's ``gpu_total`` GPUs), and
    limits that add up past either are a problem. A limit already set counts as given. With problems, members and
    shared are empty."""
    problems = list(workspaces.get("problems") or [])
    warnings = list(workspaces.get("warnings") or [])
    shared = dict(workspaces.get("shared") or {})
    total_gpus = int(workspaces.get("gpu_total") or 0)
    planned: dict[str, dict] = {}
    memory: dict[str, tuple[float, bool]] = {}
    quota: dict[str, tuple[float, bool]] = {}
    for name, entry in (workspaces.get("members") or {}).items():
        share = len(entry.get("gpus") or []) + sum(
            1 / len(shared[str(e["gpu"])]["members"]) for e in entry.get("shared_gpus") or [])
        memory_mb, cpu_quota = entry.get("memory_mb"), entry.get("cpus")
        given = (memory_mb is not None, cpu_quota is not None)
        if memory_mb is None and memory_pool_mb and total_gpus:
            memory_mb = int(int(memory_pool_mb) * share // total_gpus)
        if cpu_quota is None and cpus_total and total_gpus:
            cpu_quota = max(int(float(cpus_total) * share * 100 / total_gpus) / 100, 0.01)
        if memory_mb is not None:
            memory[name] = (memory_mb, given[0])
        if cpu_quota is not None:
            quota[name] = (cpu_quota, given[1])
        planned[name] = {**entry, "memory_mb": memory_mb, "cpus": cpu_quota}
    problems += _overcommit("memory", memory, int(memory_pool_mb or 0), "MiB",
                            "memory for workspaces (compose_stack_member_memory_pool_mb)")
    problems += _overcommit("cpus", quota, float(cpus_total or 0), "CPUs", "this host's CPUs")
    return {"members": {} if problems else planned, "shared": {} if problems else shared, "problems": problems,
            "warnings": warnings, "gpu_total": total_gpus}


MEMORY_POOL_SHARE = 0.8  # of the host's memory, for workspaces, where compose_stack_member_memory_pool_mb is unset


def _pool(given: Any, name: str, found: Any, share: float, unit: str) -> tuple[float, str, str | None]:
    """One amount for workspaces: ``given`` (the inventory's ``name``), else ``share`` of what the host has
    (``found``), else 0 (unknown). Returns the amount, where it came from, and the problem with ``given``."""
    if given is not None:
        try:
            amount = float(given)
        except (TypeError, ValueError):
            amount = -1.0
        if amount < 0:
            return 0, name, (f"{name} is {given!r}; expected a number, 0 or more (0: no default limits). "
                             f"Fix: set {name} to the {unit} for workspaces, or leave it unset for the host's")
        return amount, name, None
    if isinstance(found, int) and found > 0:
        return found * share, f"{share:.0%} of the host's {found} {unit} (gpu_facts in preflight)", None
    return 0, f"unknown: no gpu_facts of this host and {name} unset, so no default limits", None


def host_pools(memory_pool_mb: Any, cpus_pool: Any, host: dict | None) -> dict:
    """The memory (MiB) and CPUs the workspaces' limits divide, and where each came from: ``memory_pool_mb`` and
    ``cpus_pool`` (compose_stack_member_memory_pool_mb, compose_stack_member_cpus_pool) where the inventory sets
    them, else MEMORY_POOL_SHARE of the host's ``memtotal_mb`` and all its ``processor_vcpus`` (``host``: the OS
    facts gpu_facts read in preflight, named as in ansible_facts), else 0 (unknown: no default limits, no
    overcommit check). Returns {memory_pool_mb, cpus_pool, source, problems}."""
    host = host if isinstance(host, dict) else {}
    memory, memory_from, memory_problem = _pool(memory_pool_mb, "compose_stack_member_memory_pool_mb",
                                                host.get("memtotal_mb"), MEMORY_POOL_SHARE, "MiB")
    cpus, cpus_from, cpus_problem = _pool(cpus_pool, "compose_stack_member_cpus_pool", host.get("processor_vcpus"),
                                          1.0, "CPUs")
    return {
        "memory_pool_mb": int(memory),
        "cpus_pool": cpus,
        "source": f"memory: {memory_from}; cpus: {cpus_from}",
        "problems": [problem for problem in (memory_problem, cpus_problem) if problem],
    }
