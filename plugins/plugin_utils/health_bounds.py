# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU health over time (issue 38 §2): the circuit breaker, escalation to "service required", the opt-out and who
took a node out. Pure functions, controller-side; plugins/plugin_utils/health.py's build_plan applies them to the
fleet's plan, health_steps.py records what was done in the state (``STATE_FILE``).

The state's parts read here (schema 2; a schema 1 file has none of them and reads as "nothing recorded"):
  hosts.<host>.remediations      [{time, action, cause, gpus}] every remediation that took the node or GPUs out
  hosts.<host>.service_required  {since, reason} set by an escalation, cleared only by health_release
  hosts.<host>.cordoned_by       gpuops | operator (who cordoned the node, Kubernetes)
  breaker                        {tripped, since, reason, resets: [{time, by}]}
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

STATE_FILE = "health/state.json"  # in the report folder (lookup report_dir health_state); preflight's plan reads it
OPT_OUT_LABEL = "gpuops.io/health-remediation"
CORDONED_BY = "gpuops.io/cordoned-by"
CORDONED_BY_US = "gpuops-health"
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(value: Any) -> int | None:
    """A duration in seconds from a whole number of seconds or a string like 300, 5m, 12h, 7d; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    match = _DURATION.match(str(value))
    return int(match.group(1)) * _UNIT[match.group(2)] if match else None


def when(text: Any) -> datetime | None:
    """A state time (``%Y-%m-%dT%H:%M:%SZ``) as an aware datetime; None when it is not one."""
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def settings_problems(fraction: Any, window: Any, after: Any, escalate_window: Any) -> list[str]:
    """What is wrong with the breaker and escalation settings (health_breaker_*, health_escalate_*) past their
    types (the argument spec)."""
    problems = []
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        problems.append(f"health_breaker_fraction is {fraction!r}; expected a number above 0 and at most 1 (the "
                        "share of GPU nodes taken out within health_breaker_window that stops health.yml acting). "
                        "Fix: e.g. health_breaker_fraction: 0.5")
    for name, value, example in (("health_breaker_window", window, "5m"),
                                 ("health_escalate_window", escalate_window, "7d")):
        if not seconds(value):
            problems.append(f"{name} is {value!r}; expected a duration above 0: seconds, or a whole number with "
                            f"s, m, h or d. Fix: e.g. {name}: {example}")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        problems.append(f"health_escalate_after is {after!r}; expected a whole number >= 0 (remediations within "
                        "health_escalate_window before a node is marked service required). "
                        "Fix: e.g. health_escalate_after: 1")
    return problems


def node_facts(nodes: Any) -> dict[str, dict]:
    """``kubectl get nodes -o json`` -> name -> {unschedulable, cordoned_by, opt_out} (Kubernetes only)."""
    facts = {}
    for node in (nodes or {}).get("items") or []:
        meta = node.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        facts[meta.get("name")] = {
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "cordoned_by": notes.get(CORDONED_BY) or labels.get(CORDONED_BY),
            "opt_out": labels.get(OPT_OUT_LABEL) == "disabled"}
    return facts


def opted_out(host: str, remediation: Any, node: dict | None) -> str | None:
    """Why ``host`` is never acted on (health_remediation false, or the node label), else None."""
    if remediation is False:
        return "health_remediation is false for this host: reported, never acted on"
    if (node or {}).get("opt_out"):
        return f"node label {OPT_OUT_LABEL}=disabled: reported, never acted on"
    return None


def operator_cordon(node: dict | None, entry: dict) -> bool:
    """The node is cordoned now, and not by the collection (neither its annotation nor its own record says so)."""
    ours = (node or {}).get("cordoned_by") == CORDONED_BY_US or entry.get("cordoned_by") == "gpuops"
    return bool((node or {}).get("unschedulable")) and not ours


def recent(entry: dict, now: datetime, window: int, since: datetime | None = None) -> list[dict]:
    """The host's remediations within ``window`` seconds before ``now`` (and after ``since``)."""
    start = now - timedelta(seconds=window)
    start = max(start, since) if since else start
    return [r for r in entry.get("remediations") or [] if (when(r.get("time")) or start) >= start]


def escalation(entry: dict, now: datetime, after: int, window: int) -> str | None:
    """Why the host's next remediation is escalated to "service required" (it was remediated ``after`` times or more
    within ``window``), else None."""
    done = recent(entry, now, window)
    if len(done) < after:
        return None
    causes = "; ".join(f"{r.get('time')} {r.get('action')} ({r.get('cause')})" for r in done[-3:])
    return (f"service required: remediated {len(done)} time(s) within {window}s before this one (health_escalate_after "
            f"{after}, health_escalate_window): {causes}. Never remediated automatically again until an operator "
            "services it and runs -e health_release=true --limit <host>")


def breaker(state: dict, fleet_size: int, now: datetime, fraction: float, window: int, reset: bool) -> dict:
    """The breaker before this run: tripped (and why) or closed, with the hosts taken out within the window (those
    since the last reset only). ``reset``: the operator's health_breaker_reset, which closes it for this run."""
    record = (state or {}).get("breaker") or {}
    resets = [when(r.get("time")) for r in record.get("resets") or []]
    since = now if reset else max((r for r in resets if r), default=None)
    hosts = (state or {}).get("hosts") or {}
    taken = sorted(h for h, entry in hosts.items() if recent(entry, now, window, since))
    limit = fraction * max(fleet_size, 1)
    tripped = bool(record.get("tripped")) and not reset
    return {"tripped": tripped, "reason": record.get("reason", "") if tripped else "", "since": record.get("since"),
            "taken": taken, "limit": limit, "fleet_size": fleet_size, "reset": bool(reset), "tripped_now": False}


def admit(guard: dict, host: str) -> bool:
    """Whether the breaker lets ``host`` be taken out now; a refusal trips it (``guard`` is updated)."""
    if guard["tripped"]:
        return False
    if host in guard["taken"] or len(guard["taken"]) + 1 <= guard["limit"]:
        guard["taken"] = sorted({*guard["taken"], host})
        return True
    guard.update(tripped=True, tripped_now=True, reason=(
        f"circuit breaker: {len(guard['taken'])} of {guard['fleet_size']} GPU node(s) ({', '.join(guard['taken'])}) "
        f"were taken out within health_breaker_window, and taking {host} out too would pass health_breaker_fraction "
        f"({guard['limit']:g} node(s)); health.yml acts on no node until an operator has looked and runs "
        "-e health_breaker_reset=true"))
    return False


def breaker_state(state: dict, guard: dict, now: str, by: str) -> dict | None:
    """The state's ``breaker`` after the plan: tripped now (time, reason) or reset (time, who; audited); else None."""
    record = dict((state or {}).get("breaker") or {})
    if guard.get("reset"):
        record.update(tripped=False, reason="", resets=[*(record.get("resets") or []), {"time": now, "by": by}])
    if guard.get("tripped_now"):
        record.update(tripped=True, since=now, reason=guard["reason"])
    return record or None
