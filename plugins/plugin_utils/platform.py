# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Compose or Kubernetes: the one platform rule, shared by the choose_platform filter and preflight.

- fewer than 5 people AND fewer than 8 GPUs            -> compose
- more than 10 people OR more than 16 GPUs             -> kubernetes
- anything in between -> kubernetes only when multi-node training is frequent, else compose

Pure functions, no Ansible imports. Wrong types raise TypeError, out-of-range values ValueError; both say what
was found and what is expected. ``get_var`` reads a host's variable for every plugin_utils module; a ``gpuops_*``
variable the inventory leaves unset reads as its default from the one home of those defaults (``role_defaults``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils.os_support import COLLECTION_ROOT

COMPOSE = "compose"
KUBERNETES = "kubernetes"
PLATFORMS = (COMPOSE, KUBERNETES)

SMALL_TEAM_BELOW = 5  # a team of fewer people is small
SMALL_GPUS_BELOW = 8  # fewer GPUs is small
LARGE_TEAM_ABOVE = 10  # a team of more people is large
LARGE_GPUS_ABOVE = 16  # more GPUs is large


def type_name(value: object) -> str:
    """The builtin type behind a value, as refusals name it (Ansible hands over tagged subclasses of them)."""
    for cls in type(value).__mro__:
        if cls.__module__ == "builtins" and cls is not object:
            return cls.__name__
    return type(value).__name__


def _count(value: object, name: str, minimum: int) -> int:
    # bool is a subclass of int; True is not a team of one
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an integer >= {minimum}, got {type_name(value)} {value!r}; "
            "set it as a YAML number (6, not '6'); with -e, pass JSON so it stays a number: -e '{\"var\": 6}'"
        )
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def choose_platform_with_reason(team_size: object, gpu_count: object, multi_node_training: object) -> tuple[str, str]:
    """(platform, one-sentence reason). team_size >= 1, gpu_count >= 0, multi_node_training a real bool."""
    team = _count(team_size, "team_size", 1)
    gpus = _count(gpu_count, "gpu_count", 0)
    if not isinstance(multi_node_training, bool):
        raise TypeError(f"multi_node_training must be a real boolean (true or false), got "
                        f"{type_name(multi_node_training)} {multi_node_training!r}; write true/false unquoted in YAML")
    if team < SMALL_TEAM_BELOW and gpus < SMALL_GPUS_BELOW:
        return COMPOSE, (
            f"a team of {team} (< {SMALL_TEAM_BELOW}) with {gpus} GPUs (< {SMALL_GPUS_BELOW}) is small: Docker Compose"
        )
    if team > LARGE_TEAM_ABOVE or gpus > LARGE_GPUS_ABOVE:
        return KUBERNETES, (
            f"a team of {team} with {gpus} GPUs is large (more than {LARGE_TEAM_ABOVE} people or more than "
            f"{LARGE_GPUS_ABOVE} GPUs): Kubernetes"
        )
    if multi_node_training:
        return KUBERNETES, (
            f"a mid-size setup (team of {team}, {gpus} GPUs) with frequent multi-node training: Kubernetes"
        )
    return (
        COMPOSE,
        f"a mid-size setup (team of {team}, {gpus} GPUs) without frequent multi-node training: Docker Compose",
    )


def _decide_host(request: dict, fleet_gpus: int | None, unknown: list[str], counted: int) -> dict:
    """One host's platform from its plan; GPUs are the plan's gpu_count, else the fleet's sum."""
    wanted = request.get("platform") or "auto"
    if wanted != "auto":
        return {"ok": True, "platform": wanted, "source": "override", "reason": f"gpuops_platform is set to {wanted}"}
    gpus = request.get("gpu_count")
    where = "gpuops_gpu_count"
    if gpus is None:
        if unknown:
            reason = (
                "cannot decide the platform: the fleet's GPU count is unknown, since no GPU facts exist for "
                f"{', '.join(sorted(unknown))} (not in this run, e.g. --limit). Fix: run preflight on every host "
                "of gpu_nodes, or set gpuops_gpu_count to the fleet's total"
            )
            return {"ok": False, "platform": None, "source": "error", "reason": reason}
        gpus = fleet_gpus
        where = f"the sum of the GPUs detected on {counted} gpu_nodes host{'s' if counted != 1 else ''}"
    try:
        multi = request.get("multi_node_training")
        platform, reason = choose_platform_with_reason(request.get("team_size"), gpus, multi is not None and multi)
    except (TypeError, ValueError) as exc:
        return {"ok": False, "platform": None, "source": "error", "reason": f"cannot decide the platform: {exc}"}
    return {"ok": True, "platform": platform, "source": "auto", "reason": f"{reason} (GPUs: {where})"}


def decide_fleet(requests: dict, detected: dict) -> dict:
    """One platform for the whole site.

    ``requests``: host -> {platform, team_size, gpu_count, multi_node_training} from that host's plan.
    ``detected``: every gpu_nodes host -> the GPUs its facts found (None: no facts, e.g. outside --limit).
    Where ``gpu_count`` is unset, the count is the sum over ``detected``. Hosts whose plans lead to different
    platforms are refused, named by platform. Returns ok, platform, source, reason, gpu_count and, per host,
    {ok, platform, source, reason}: the reason every host's platform check carries.
    """
    unknown = [host for host, count in detected.items() if count is None]
    fleet_gpus = None if unknown else sum(int(count) for count in detected.values())
    hosts = {host: _decide_host(req, fleet_gpus, unknown, len(detected)) for host, req in requests.items()}
    by_platform: dict = {}
    for host, decision in sorted(hosts.items()):
        if decision["ok"]:
            by_platform.setdefault(decision["platform"], []).append(host)
    result = {"ok": all(d["ok"] for d in hosts.values()), "gpu_count": fleet_gpus, "hosts": hosts}
    if len(by_platform) > 1:
        split = "; ".join(f"{', '.join(names)} on {name}" for name, names in sorted(by_platform.items()))
        reason = (
            f"one site gets one platform, but this plan puts {split}. Fix: set gpuops_platform, gpuops_team_size, "
            "gpuops_gpu_count and gpuops_multi_node_training once for the whole inventory (group_vars/all), "
            "not per host or group"
        )
        for host, decision in hosts.items():
            if decision["ok"]:
                hosts[host] = {**decision, "ok": False, "reason": f"{reason} (this host alone: {decision['reason']})"}
        return {**result, "ok": False, "platform": None, "source": "error", "reason": reason}
    if not by_platform:
        first = next(iter(hosts.values()), {"reason": "no hosts"})
        return {**result, "ok": False, "platform": None, "source": "error", "reason": first["reason"]}
    platform = next(iter(by_platform))
    first = next(d for d in hosts.values() if d["ok"])
    return {**result, "platform": platform, "source": first["source"], "reason": first["reason"]}


# Inputs of the platform rule, per host: name in the rule -> inventory variable (unset: its shared default, if any).
# The one mapping: the preflight action reads a host's inputs with platform_request() from its task variables,
# plan.inventory_plan from hostvars. Here, beside the rule, because preflight's per-host action imports it on every
# host: this module is cheap to import, plan.py is not (docs/performance.md, "Filter lookup").
_PLATFORM_INPUTS = {
    "platform": "gpuops_platform",
    "team_size": "gpuops_team_size",
    "gpu_count": "gpuops_gpu_count",
    "multi_node_training": "gpuops_multi_node_training",
}


@cache
def role_defaults(role: str = "_gpuops_vars") -> dict:
    """A role's defaults/main.yml, read once per process: the one reader of a role's defaults in Python. The default,
    the internal role _gpuops_vars (the file plays import), holds every gpuops_* default."""
    path = COLLECTION_ROOT / "roles" / role / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def get_var(hostvars: Any, name: str, default: Any = None) -> Any:
    """A variable of one host; an undefined or untemplatable one reads as the default, which is, when none is given,
    the variable's shared default (role defaults never reach hostvars, so a gpuops_* default is read here)."""
    if default is None:
        default = role_defaults().get(name)
    try:
        value = hostvars.get(name, default) if hasattr(hostvars, "get") else default
    except Exception:  # Ansible raises on a variable that cannot be templated
        return default
    return default if value is None else value


class ReadOnce:
    """``hostvars`` for one call that reads the same hosts' variables several times (the preflight fleet step: the
    plan, the pools, the reports; the inventory_plan filter: the fleet, each host's part, the nodes): each host's
    variables are merged once and each variable templated once. With ``templar_for`` (an action, which has a loader):
    ``hostvars.raw_get`` (one VariableManager.get_vars) and a templar over that host's variables
    (``templar_for(variables)``, what ``hostvars[host]`` builds); the names in ``data`` hold module output (a host's
    ``ansible_facts``, a registered result): Ansible keeps it untrusted, so templating would return it unchanged
    after walking it whole; they are read as they are. Without it (a filter, which has no loader): ``hostvars[host]``
    once, Ansible's own view of the host that templates a variable as it is read (a plain mapping's value: as it is),
    and each variable read once through it. Read-only, like hostvars; a read that raises is not kept, so it raises
    again. Only what the plan's functions use: ``hostvars[host]``, ``host in hostvars``, ``.get(name)``."""

    def __init__(self, hostvars: Any, templar_for: Any = None, data: tuple[str, ...] = ()) -> None:
        self._hostvars = hostvars
        self._templar_for = templar_for
        self._data = frozenset(data)
        self._hosts: dict = {}

    def __getitem__(self, host: str) -> Any:
        if host not in self._hosts:
            self._hosts[host] = self._read(host)
        return self._hosts[host]

    def __contains__(self, host: object) -> bool:
        return host in self._hostvars

    def _read(self, host: str) -> ReadOnceHost:
        if host not in self._hostvars:
            raise KeyError(host)
        if self._templar_for is None:
            view = self._hostvars[host]
            # get_var reads anything but a mapping as no variables
            return ReadOnceHost(view if isinstance(view, Mapping) else {}, None, frozenset())
        variables = self._hostvars.raw_get(host)
        if not isinstance(variables, dict):
            raise KeyError(host)
        return ReadOnceHost(variables, self._templar_for(variables), self._data)


class ReadOnceHost:
    """One host's variables, each templated on its first read (module output in ``data`` not at all) and kept for
    the call (see ReadOnce); also the preflight action's own task variables. ``templar`` None: the values are read
    as ``variables`` gives them (Ansible's view of a host templates them itself)."""

    def __init__(self, variables: Mapping, templar: Any, data: frozenset) -> None:
        self._vars = variables
        self._templar = templar
        self._data = data
        self._read: dict = {}

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._read:
            if name not in self._vars:
                return default
            value = self._vars[name]
            self._read[name] = value if self._templar is None or name in self._data else self._templar.template(value)
        return self._read[name]


def platform_request(hostvars: Any) -> dict:
    """One host's inputs of the platform rule, read from its variables."""
    request = {key: get_var(hostvars, name) for key, name in _PLATFORM_INPUTS.items()}
    members = get_var(hostvars, "gpuops_members")
    # The team size is counted from the members; an empty list (the shared default) counts no one.
    if request["team_size"] is None and isinstance(members, list) and members:
        request["team_size"] = len(members)
    return request
