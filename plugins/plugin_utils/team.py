# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The team: one list of members and teams for both platforms (``group_vars/all/team.yml``; its shape and every
rule: docs/small-team.md).

``gpuops_teams`` and ``gpuops_members`` are read by preflight, the compose workspaces and the Kubernetes tenancy.
``team_problems`` holds the rules that make the list usable by all three, run once on the whole team before any
host is touched (role ``_gpuops_vars``: site.yml's boilerplate play, ``playbooks/preflight.yml`` run alone, or
``playbooks/tasks/plan.yml`` where a play that deploys the workspaces runs alone); ``host_gpu_problems`` is the
part that depends on one host (a GPU it lacks), run by each compose host's workspace planning and by preflight.
Every problem names the variable path, the value found, what is allowed and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import mps

MEMBER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# Kubernetes resource.Quantity, non-negative: digits, optional fraction, optional suffix or exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[0-9]+(\.[0-9]*)?|\.[0-9]+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
            "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
MEMBER_KEYS = ("name", "uid", "gid", "team", "gpus", "image", "shm_size", "mounts", "memory", "cpus", "shared_gpus")
SIZE = re.compile(r"^([1-9][0-9]*)([mMgGtT])$")
_MIB = {"m": 1, "g": 1024, "t": 1024 * 1024}
MIN_MEMORY_MIB = 6  # Docker refuses a memory limit under 6 MiB
TEAM_KEYS = ("name", "namespace", "gpu_quota", "cpu_quota", "memory_quota", "storage_quota", "storage_class", "group")
QUOTA_KEYS = ("cpu_quota", "memory_quota", "storage_quota")
EXAMPLE_MEMBER = "{name: alice, uid: 2001, team: vision, gpus: [0, 1]}"
EXAMPLE_TEAM = "{name: vision, gpu_quota: 8, cpu_quota: '96', memory_quota: 768Gi, storage_quota: 4Ti}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def show(value: Any) -> str:
    """A value as a refusal quotes it: a string in single quotes, anything else as its repr."""
    return repr(value) if not isinstance(value, str) else f"'{value}'"


def parse_quantity(value: object) -> Decimal | None:
    """A non-negative Kubernetes quantity (``96``, ``500m``, ``768Gi``, ``4Ti``, ``1e3``) as a number; else None.
    The one parser of the teams' quotas and kube_tenancy's sizes."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation:
        return None
    suffix = match.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def size_mib(value: Any) -> int | None:
    """A size as the team list writes it (512m, 64g, 1t: MiB, GiB, TiB, as Docker reads them) in MiB; None when
    ``value`` is not one."""
    match = SIZE.match(value) if isinstance(value, str) else None
    return int(match.group(1)) * _MIB[match.group(2).lower()] if match else None


def format_mib(mib: int) -> str:
    """MiB as the shortest exact size: 20480 -> 20G, 1536 -> 1536M (the units MPS and Docker both read)."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def namespace_of(team: dict) -> str:
    """The team's namespace: ``namespace``, else ``team-<name>``."""
    return str(team.get("namespace") or f"team-{team.get('name')}")


def _mappings(variable: str, entries: list, keys: tuple[str, ...], example: str, problems: list[str]) -> Iterator:
    """(where, position, entry) of each mapping of ``entries`` (the teams or the members), for its own rules; an
    entry that is not a mapping, or keys outside ``keys``, is added to ``problems``."""
    kind = variable.removeprefix("gpuops_").rstrip("s")
    for position, entry in enumerate(entries):
        where = f"{variable}[{position}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} is {show(entry)}; expected a mapping such as {example}. Fix: write each {kind} "
                            "as a mapping")
            continue
        unknown = sorted(set(entry) - set(keys), key=str)
        if unknown:
            problems.append(f"{where} has unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(keys)}. "
                            "Fix: correct the spelling or remove them")
        yield where, position, entry


def _team_problems(teams: list) -> tuple[list[str], dict[str, int]]:
    problems: list[str] = []
    names: dict[str, int] = {}
    namespaces: dict[str, str] = {}
    for where, i, team in _mappings("gpuops_teams", teams, TEAM_KEYS, EXAMPLE_TEAM, problems):
        name = team.get("name")
        if not isinstance(name, str) or not DNS_LABEL.match(name):
            problems.append(f"{where}.name is {show(name)}; expected a DNS-1123 label (lower-case letters, digits "
                            "and '-', at most 63, starting and ending with a letter or digit). Fix: e.g. name: vision")
            continue
        if names.setdefault(name, i) != i:
            problems.append(f"{where}.name '{name}' appears twice (also gpuops_teams[{names[name]}]); team names "
                            "must be unique. Fix: merge the two teams or rename one")
            continue
        namespace = namespace_of(team)
        if not DNS_LABEL.match(namespace):
            problems.append(f"{where}.namespace is {show(team.get('namespace'))}; expected a DNS-1123 label. "
                            f"Fix: e.g. namespace: team-{name}, or leave it out")
        elif namespaces.setdefault(namespace, name) != name:
            problems.append(f"teams {namespaces[namespace]} and {name} share namespace '{namespace}'; each team needs "
                            "its own. Fix: change one team's namespace")
        gpu_quota = team.get("gpu_quota")
        if gpu_quota is not None and (not _is_int(gpu_quota) or gpu_quota < 0):
            problems.append(f"{where}.gpu_quota is {show(gpu_quota)}; expected a whole number >= 0 (GPUs), "
                            "unquoted. Fix: e.g. gpu_quota: 8")
        for key in QUOTA_KEYS:
            value = team.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or parse_quantity(str(value)) is None:
                problems.append(f"{where}.{key} is {show(value)}; expected a Kubernetes quantity such as "
                                "'96', 500m, 768Gi or 4Ti. Fix: write the amount with a binary suffix (Gi, Ti)")
        for key in ("storage_class", "group"):
            value = team.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                problems.append(f"{where}.{key} is {show(value)}; expected a non-empty string. Fix: set it or "
                                "leave it out for the default")
    return problems, names


def _label(member: dict, position: int) -> str:
    name = member.get("name")
    return name if isinstance(name, str) else f"#{position}"


def members_of(members: Any) -> list[tuple[int, dict, str]]:
    """(position, member, label) of each mapping in ``gpuops_members``; the member rules name any other entry."""
    listed = members if isinstance(members, list) else []
    return [(i, member, _label(member, i)) for i, member in enumerate(listed) if isinstance(member, dict)]


def gpu_assignment_problems(members: Any, mps_limits: mps.Limits | None = None) -> list[str]:
    """The GPU-assignment rule of the whole team (what depends on one host is ``host_gpu_problems``).

    A member's ``gpus`` (when given) is a list of GPU indexes, whole numbers >= 0; each GPU goes to one member
    only. Members without ``gpus`` and entries that are not mappings are left to the member rules. A shared GPU's
    cap must leave the member memory (``mps.cap_problem`` with ``mps_limits``; None: the defaults).
    """
    problems: list[str] = []
    owner: dict[int, str] = {}
    for i, member, label in members_of(members):
        if "gpus" not in member:
            continue
        where, gpus = f"gpuops_members[{i}]", member["gpus"]
        if not isinstance(gpus, list):
            problems.append(f"{where}.gpus is {show(gpus)}; expected a list of GPU indexes such as [0, 1]. "
                            "Fix: e.g. gpus: [0, 1]")
            continue
        for gpu in gpus:
            if not _is_int(gpu) or gpu < 0:
                problems.append(f"{where}.gpus lists {show(gpu)}; expected GPU indexes, whole numbers >= 0 as "
                                "nvidia-smi numbers them. Fix: write 0, not '0', GPU0 or -1")
            elif gpu in owner:
                problems.append(f"GPU {gpu} is given twice: to {owner[gpu]} and to {label} (gpuops_members[].gpus); "
                                "each GPU goes to exactly one member. Fix: give one of them another GPU")
            else:
                owner[gpu] = label
    return problems + _shared_gpu_problems(members, owner, mps_limits or mps.limits())


def host_gpu_problems(members: Any, host_gpus: Iterable[int] | None) -> list[str]:
    """The part of the team rule that depends on one host (``host_gpus``: the indexes of its GPUs; empty or None
    when unknown): every well-formed GPU index a member is given (``gpus``) or shares (``shared_gpus``) is one of
    them. The rest of the rule runs once, on the whole team (``team_problems``)."""
    host = sorted(set(host_gpus or ()))
    listing = ", ".join(str(i) for i in host)
    problems: list[str] = []
    for i, member, label in members_of(members) if host else []:
        gpus, shared = member.get("gpus"), member.get("shared_gpus")
        for gpu in gpus if isinstance(gpus, list) else []:
            if _is_int(gpu) and gpu >= 0 and gpu not in host:
                problems.append(f"member {label} is given GPU {gpu}, but this host has GPUs {listing} "
                                f"(gpuops_members[{i}].gpus); expected indexes as nvidia-smi -L numbers them. "
                                f"Fix: give {label} one of GPUs {listing}")
        for entry in shared if isinstance(shared, list) else []:
            gpu = entry.get("gpu") if isinstance(entry, dict) else None
            if _is_int(gpu) and gpu >= 0 and gpu not in host:
                problems.append(f"member {label} shares GPU {gpu}, but this host has GPUs {listing} "
                                f"(gpuops_members[{i}].shared_gpus). Fix: share one of GPUs {listing}")
    return problems


def _shared_gpu_problems(members: Any, owner: dict[int, str], rule: mps.Limits) -> list[str]:
    """A GPU in a member's ``shared_gpus`` that is also someone's exclusive GPU, or a cap that leaves the member
    too little memory after its CUDA context."""
    problems: list[str] = []
    for i, member, label in members_of(members):
        for entry in member["shared_gpus"] if isinstance(member.get("shared_gpus"), list) else []:
            gpu = entry.get("gpu") if isinstance(entry, dict) else None
            if not _is_int(gpu) or gpu < 0:
                continue  # the member rules name the malformed entry
            if gpu in owner:
                problems.append(f"GPU {gpu} is shared by {label} (gpuops_members[{i}].shared_gpus) and given "
                                f"exclusively to {owner[gpu]} (gpus); a GPU is either exclusive to one member or "
                                f"shared through MPS, never both. Fix: take GPU {gpu} out of {owner[gpu]}'s gpus, "
                                f"or share another GPU")
            cap = size_mib(entry.get("memory"))
            short = cap and mps.cap_problem(
                f"member {label}'s MPS cap on GPU {gpu} (gpuops_members[{i}].shared_gpus memory "
                f"{show(entry['memory'])})", cap, rule, f"raise {label}'s memory on GPU {gpu} to "
                f"{format_mib(rule.reserve_mib + rule.min_usable_mib)} or more, or give {label} an exclusive GPU "
                "(gpus) instead")
            if short:
                problems.append(short)
    return problems


def _limit_problems(where: str, label: str, member: dict) -> list[str]:
    """The compose limits of one member: ``memory``, ``cpus`` and the shape of ``shared_gpus``."""
    problems: list[str] = []
    memory = member.get("memory")
    if memory is not None and (size_mib(memory) or 0) < MIN_MEMORY_MIB:
        problems.append(f"{where}.memory is {show(memory)} for {label}; expected a size of at least "
                        f"{MIN_MEMORY_MIB}m such as 512m, 64g or 1t (MiB, GiB, TiB). Fix: e.g. memory: 64g, or "
                        "leave it out for the default share (the host's memory in proportion to the member's GPUs)")
    cpus = member.get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not cpus > 0):
        problems.append(f"{where}.cpus is {show(cpus)} for {label}; expected a number of CPUs > 0, unquoted, such "
                        "as 8 or 2.5. Fix: e.g. cpus: 8, or leave it out for the default share")
    shared = member.get("shared_gpus")
    if shared is None:
        return problems
    example = "[{gpu: 4, memory: 20g}]"
    if not isinstance(shared, list) or len(shared) > 1:
        problems.append(f"{where}.shared_gpus is {show(shared)} for {label}; expected a list of at most one entry "
                        f"such as {example} (an MPS client reaches one MPS control daemon, one per shared GPU). "
                        "Fix: share one GPU")
        return problems
    for entry in shared:
        if (not isinstance(entry, dict) or set(entry) != {"gpu", "memory"} or not _is_int(entry["gpu"])
                or entry["gpu"] < 0 or (size_mib(entry["memory"]) or 0) < 1):
            problems.append(f"{where}.shared_gpus lists {show(entry)} for {label}; expected {{gpu: <GPU index>, "
                            f"memory: <this member's cap of its memory, e.g. 20g>}}, as in {example}. Fix: write both "
                            "keys, the GPU as nvidia-smi numbers it and the memory as a size")
    if shared and member.get("gpus"):
        problems.append(f"{where} gives {label} both gpus {show(member.get('gpus'))} and shared_gpus; expected one "
                        "or the other: an MPS client sees only the shared GPU, so its exclusive GPUs would be "
                        "unusable while MPS is on. Fix: give the member exclusive gpus, or one shared GPU")
    return problems


def out_of_service_problems(members: Any, out_of_service: Any, host: str = "this host") -> list[str]:
    """Members given a GPU that health.yml took out of service on ``host`` (``out_of_service``: GPU index -> {event,
    action, since}, as gpuops_plan.hosts.<host>.out_of_service holds it); each problem names the GPU and the event."""
    out = out_of_service if isinstance(out_of_service, dict) else {}
    problems = []
    for i, member, label in members_of(members):
        for gpu in member["gpus"] if isinstance(member.get("gpus"), list) else []:
            why = out.get(str(gpu))
            if _is_int(gpu) and isinstance(why, dict):
                problems.append(f"member {label} is given GPU {gpu} of {host}, which is out of service since "
                                f"{why.get('since') or '?'}: {why.get('event') or 'a health event'} "
                                f"({why.get('action') or 'health'}, playbooks/health.yml). Fix: give {label} another "
                                f"GPU (gpuops_members[{i}].gpus), or, once the GPU is serviced, run gpuops-run health "
                                f"--limit {host} -e health_apply=true (-e health_release=true after a repair) to give "
                                "it back")
    return problems


def _member_problems(members: list, team_names: dict[str, int], mps_limits: mps.Limits | None) -> list[str]:
    """Everything wrong with the members themselves: keys, names, uids, gids, teams (``team_names``) and GPUs."""
    problems: list[str] = []
    names: dict[str, int] = {}
    uids: dict[int, tuple[int, str]] = {}  # uid -> (position, label) of its first member
    for where, i, member in _mappings("gpuops_members", members, MEMBER_KEYS, EXAMPLE_MEMBER, problems):
        name = member.get("name")
        label = _label(member, i)
        if not isinstance(name, str) or not MEMBER_NAME.match(name):
            problems.append(f"{where}.name is {show(name)}; expected lower-case letters, digits and '-', "
                            "starting with a letter, at most 31 (it becomes a user, a service ws-<name> and a path; "
                            "no spaces or shell characters). Fix: e.g. name: alice")
        elif names.setdefault(name, i) != i:
            problems.append(f"{where}.name '{name}' appears twice (also gpuops_members[{names[name]}]); member names "
                            "must be unique. Fix: rename one, e.g. alice2")
        uid = member.get("uid")
        if not _is_int(uid) or uid < 1:
            problems.append(f"{where}.uid is {show(uid)} for {label}; expected a whole number >= 1, unquoted "
                            "(workspaces never run as root). Fix: give the member their own uid, e.g. 2001")
        elif uids.setdefault(uid, (i, label))[0] != i:
            problems.append(f"{where}.uid {uid} of {label} is also the uid of {uids[uid][1]}; each member needs their "
                            "own uid. Fix: give one of them another uid")
        gid = member.get("gid")
        if gid is not None and (not _is_int(gid) or gid < 1):
            problems.append(f"{where}.gid is {show(gid)} for {label}; expected a whole number >= 1. "
                            "Fix: give a non-root group id, or leave it out (the uid is used)")
        problems += _limit_problems(where, label, member)
        team = member.get("team")
        if not isinstance(team, str) or team not in team_names:
            known = ", ".join(team_names) or "none defined"
            problems.append(f"{where}.team is {show(team)} for {label}; expected one of the gpuops_teams names "
                            f"({known}). Fix: set team: to an existing team, or add the team to gpuops_teams")
    return problems + gpu_assignment_problems(members, mps_limits)


def team_problems(teams: Any, members: Any, mps_limits: mps.Limits | None = None) -> list[str]:
    """Everything wrong with ``gpuops_teams`` and ``gpuops_members``, all at once ([] when usable); ``mps_limits``:
    see ``gpu_assignment_problems``."""
    problems: list[str] = []
    if not isinstance(teams, list) or not teams:
        problems.append(f"gpuops_teams is {show(teams)}; expected a list of at least one team such as "
                        f"[{EXAMPLE_TEAM}]. Fix: declare the teams in group_vars/all/team.yml")
        teams = teams if isinstance(teams, list) else []
    if not isinstance(members, list) or not members:
        problems.append(f"gpuops_members is {show(members)}; expected a list of at least one member such as "
                        f"[{EXAMPLE_MEMBER}] (an empty team gets no workspaces and no namespaces). "
                        "Fix: list the members in group_vars/all/team.yml")
        members = members if isinstance(members, list) else []
    found, team_names = _team_problems(teams)
    problems += found
    problems += _member_problems(members, team_names, mps_limits)
    used = {m["team"] for m in members if isinstance(m, dict) and isinstance(m.get("team"), str)}
    if members:
        for name in team_names:
            if name not in used:
                problems.append(f"team '{name}' (gpuops_teams) has no members; expected every team to have at least "
                                "one member in gpuops_members. Fix: add a member with team: "
                                f"{name}, or remove the team")
    return problems
