# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU health: NVIDIA's resolution buckets -> the collection's actions -> a bounded plan per host.

Pure functions, no Ansible imports, controller-side. Input: per host the result of the host module
``gpuops.cluster.gpu_health`` and the controller's health state (``health_state``: what was already done, which GPUs
are out of service). Output: a plan (``build_plan``), whose steps ``health_steps.host_steps`` renders per platform.

What each bucket of NVIDIA's Xid catalog (../shared/data/xid/resolution-buckets.csv) leads to, and why an SXid's
action (NVSentinel's mapping, not NVIDIA's guidance) is never carried out, is docs/operations.md's table "What each
bucket does"; ``BUCKETS`` is its code. The concrete step of NVIDIA's Xid 45, 48 and 154 workflows is gpu_health's
verdict rule (module_utils/gpu_health_verdict.py, the one home of those rules), called here on the sweep's events.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_verdict as verdict
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics import EVENT_CHECKS
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_result import RESULT_SCHEMA
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_bounds as bounds_rules

# The collection's actions, mildest first; a host gets the strongest of its items.
#   none          nothing
#   notify_owner  tell the workload's owner (restart the application); nothing on the node
#   review        an operator looks (the report and the audit say what); nothing on the node
#   restart_fm    restart nvidia-fabricmanager, the GPUs' jobs stopped first
#   reset_gpu     nvidia-smi -r -i N, only when no process holds the GPU
#   reboot        cordon, drain, reboot one node at a time, sweep again, back in service only when healthy
#   quarantine    cordon, taint gpuops.io/unhealthy, nvidia-bug-report; out of service until released
ACTIONS = ("none", "notify_owner", "review", "restart_fm", "reset_gpu", "reboot", "quarantine")
RANK = {action: rank for rank, action in enumerate(ACTIONS)}
DISRUPTIVE = ("restart_fm", "reset_gpu", "reboot", "quarantine")  # take a node (k8s) or GPUs (compose) out
TAKES_GPU_OUT = ("reset_gpu", "reboot", "quarantine")  # the GPU is marked out of service until healthy again

Decision = Callable[[dict, list], "tuple[str, str]"]


def _fixed(action: str, why: str) -> Decision:
    def decide(_event: dict, _others: list) -> tuple[str, str]:
        return action, why

    return decide


def _others_on(event: dict, others: list) -> list:
    """The other events of the sweep (on the same GPU when the event names one)."""
    return [o for o in others if o is not event and (event.get("gpu") is None or o.get("gpu") in (None, event["gpu"]))]


def _sympathetic(event: dict, others: list) -> tuple[str, str]:
    if _others_on(event, others):
        return "none", "sympathetic: resolve the other events first"
    return "review", "seen alone: REPORT_ISSUE"


def _repeated(times: int, repeated: tuple[str, str], once: tuple[str, str]) -> Decision:
    """``repeated`` when the same code was seen ``times`` times or more on the same GPU in this sweep."""

    def decide(event: dict, others: list) -> tuple[str, str]:
        same = [o for o in others if o.get("kind") == event.get("kind") and o.get("code") == event.get("code")
                and o.get("gpu") == event.get("gpu")]
        return repeated if len(same) >= times else once

    return decide


# Xid 74 (WORKFLOW_NVLINK_ERR): the first of the seven register words, decoded as NVIDIA's sheet says.
_NVLINK_IGNORE = {0, 23, 30}
_NVLINK_MECHANICAL = {8, 9, 12, 16, 17, 21, 22, 24, 28}
_NVLINK_REGS = re.compile(r"\((0x[0-9a-fA-F]+(?:,\s*0x[0-9a-fA-F]+){6})\)")


def nvlink_bits(line: str) -> list[int] | None:
    """The set bits of the first register of an Xid 74 line, or None when the seven words are not there."""
    match = _NVLINK_REGS.search(line or "")
    if not match:
        return None
    first = int(match.group(1).split(",")[0], 16)
    return [bit for bit in range(32) if first >> bit & 1]


def _xid_74(event: dict, others: list) -> tuple[str, str]:
    bits = nvlink_bits(str(event.get("line") or ""))
    if bits is None:
        return "review", "WORKFLOW_NVLINK_ERR: the register words were not in the message; decode them by hand"
    rest = set(bits) - _NVLINK_IGNORE
    if not rest:
        return "none", f"WORKFLOW_NVLINK_ERR: first register bits {bits} can be safely ignored"
    if rest & _NVLINK_MECHANICAL:
        return "quarantine", (f"WORKFLOW_NVLINK_ERR: first register bits {sorted(rest & _NVLINK_MECHANICAL)}: check "
                              "the link's mechanical connections, run field diagnostics")
    if rest <= {1, 20} and _others_on(event, others):
        return "none", "WORKFLOW_NVLINK_ERR: bits 1/20 are sympathetic; the other events' resolution is followed"
    return "review", f"WORKFLOW_NVLINK_ERR: first register bits {sorted(rest)}: report a bug if it repeats"


def _nvlink5(event: dict, _others: list) -> tuple[str, str]:
    """Xid 144-150: '<Xid> <sub component> <fatal|nonfatal> ...' (gpu_health's ``fatal``); the full decode
    (IntrInfo, error status) is the operator's, against NVIDIA's decode table. A fatal one takes the node out, a
    non-fatal one is reviewed."""
    if event.get("fatal") is False:
        return "review", "WORKFLOW_NVLINK5_ERR non-fatal: decode IntrInfo/error status (NVIDIA's Xid 144-150 table)"
    return "quarantine", "WORKFLOW_NVLINK5_ERR fatal (or not stated): out of service until decoded and resolved"


def _nvlink_failure(event: dict, others: list) -> tuple[str, str]:
    if any(o.get("check") == "nvlink_down" for o in others):
        return "none", "CHECK_NVLINK_FAILURE_FLOW: a link is down; this is its by-product, resolve the link"
    return "review", "CHECK_NVLINK_FAILURE_FLOW: no link-down seen: REPORT_ISSUE"


_NO_STEP = _fixed("review", "gpu_health's verdict names no step for this workflow (for Xid 154: the recovery action "
                  "could not be read from the message); an operator reads the line")

# bucket -> decision. Every bucket of NVIDIA's resolution-buckets sheet has one (tests/unit checks the file), plus
# NVSentinel's SXid actions (sxid-catalog.csv) and UNKNOWN (a code not in the catalog).
BUCKETS: dict[str, Decision] = {
    "RESTART_APP": _fixed("notify_owner", "RESTART_APP: restart the application; no reset or reboot needed"),
    "IGNORE": _fixed("none", "IGNORE: no action required"),
    "RESET_GPU": _fixed("reset_gpu", "RESET_GPU: reset the GPU; a reboot is not needed"),
    "RESTART_BM": _fixed("reboot", "RESTART_BM: restart the bare-metal node"),
    "RESTART_VM": _fixed("notify_owner", "RESTART_VM: restart the VM that owns the GPU (its owner does)"),
    "CONTACT_SUPPORT": _fixed("quarantine", "CONTACT_SUPPORT: out of service, bug report for NVIDIA support"),
    "CHECK_MECHANICALS": _fixed("quarantine", "CHECK_MECHANICALS: out of service until seating and cables are checked"),
    "UPDATE_SWFW": _fixed("review", "UPDATE_SWFW: update firmware and software (an operator's upgrade)"),
    "CHECK_UVM": _fixed("none", "CHECK_UVM: no vGPU/UVM sharing on these nodes: IGNORE"),
    "CHECK_APP/CUDA": _fixed("notify_owner", "CHECK_APP/CUDA: the application passed bad data; its owner checks it"),
    "INVESTIGATE_SW": _fixed("notify_owner", "INVESTIGATE_SW: user or NVIDIA software to look at (PID in the line)"),
    "INVESTIGATE_SW_USER": _fixed("notify_owner", "INVESTIGATE_SW_USER: software or user initiated, if unexpected"),
    "XID_137_FLOW": _fixed("notify_owner", "XID_137_FLOW: an application-level illegal NVLink access; cuda-memcheck"),
    "INVESTIGATE_LINK_SI": _fixed("quarantine", "INVESTIGATE_LINK_SI: link signal integrity; out of service"),
    "INVESTIGATE_LINK_SI_AND_CABLES": _fixed("quarantine", "INVESTIGATE_LINK_SI_AND_CABLES: cable, transceiver, "
                                             "temperature or seating; out of service"),
    "INVESTIGATE_SW_USER_LINK_SI": _fixed("review", "INVESTIGATE_SW_USER_LINK_SI: software or user first, then SI"),
    "INVESTIGATE_PEER_DEVICE": _fixed("review", "INVESTIGATE_PEER_DEVICE: the peer device reported the fault"),
    "INVESTIGATE_HOST": _fixed("review", "INVESTIGATE_HOST: a secondary indicator; check the host's other logs"),
    "REPORT_ISSUE (if seen >1 per day)": _repeated(2, ("review", "seen more than once: REPORT_ISSUE"),
                                                   ("none", "seen once: nothing yet")),
    "IGNORE (sympathetic)": _sympathetic,
    "SYMPATHETIC_REPORT_SOLO": _sympathetic,
    "N/A Informational only regarding another Xid": _fixed("none", "informational; the other Xid carries the action"),
    "WORKFLOW_XID_45": _NO_STEP,
    "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)": _NO_STEP,
    "WORKFLOW_XID_48": _NO_STEP,
    "WORKFLOW_XID_13": _repeated(2, ("review", "WORKFLOW_XID_13 repeated on this GPU: RUN_DCGMEUD, then field diags"),
                                 ("notify_owner", "WORKFLOW_XID_13 solo: CHECK_APP/CUDA")),
    "WORKFLOW_XID_31": _repeated(2, ("review", "WORKFLOW_XID_31 repeated on this GPU: RUN_DCGMEUD, then field diags"),
                                 ("notify_owner", "WORKFLOW_XID_31 solo: CHECK_APP/CUDA")),
    "WORKFLOW_NVLINK_ERR": _xid_74,
    "WORKFLOW_NVLINK5_ERR": _nvlink5,
    "XID_154": _NO_STEP,
    "XID_154_EVAL": _NO_STEP,
    "CHECK_NVLINK_FAILURE_FLOW": _nvlink_failure,
    "UNKNOWN": _fixed("review", "UNKNOWN: not in NVIDIA's catalog; an operator reads the line"),
    "INVESTIGATE": _fixed("review", "gpu_health: report only (throttling, NVLink counters, persistence)"),
}

# gpu_health's concrete steps of NVIDIA's workflow buckets (a finding's ``step``) that are no bucket themselves.
STEPS = {
    "DRAIN_AND_RESET": ("reset_gpu", "DRAIN_AND_RESET: drain the GPU's work, then reset it"),
    "RESTART_FM": ("restart_fm", "RESTART_FM: restart Fabric Manager with the GPUs' jobs stopped"),
    "DRAIN_P2P": ("notify_owner", "DRAIN_P2P: the owner drains the peer-to-peer work; nothing on the node"),
}


def settings_problems(max_unavailable: Any, overrides: Any, apply: Any, plan_source: Any,
                      dcgm_level: Any = None) -> list[str]:
    """Everything wrong with the health settings that the argument spec (types, choices) cannot say, before
    anything is swept or changed."""
    problems = []
    if dcgm_level is not None and (isinstance(dcgm_level, bool) or dcgm_level not in (0, 1, 2, 3)):
        problems.append(f"health_dcgm_level is {dcgm_level!r}; expected 0 (no DCGM diag), 1 (quick deployment "
                        "checks), 2 (medium) or 3 (long) - dcgmi diag -r <level> - or unset (gpu_health's own level; "
                        "with health_sweep_results last, the scheduled sweep's). Fix: e.g. health_dcgm_level: 1, or "
                        "leave it out")
    if isinstance(max_unavailable, bool) or not isinstance(max_unavailable, int) or max_unavailable < 1:
        problems.append(f"health_max_unavailable is {max_unavailable!r}; expected a whole number >= 1 (the most "
                        "nodes health.yml takes out of service at once). Fix: e.g. health_max_unavailable: 1")
    if not isinstance(overrides, dict):
        problems.append(f"health_action_overrides is {overrides!r}; expected a mapping bucket -> action, e.g. "
                        "{RESTART_BM: quarantine}. Fix: write it as a YAML mapping, or leave it out")
    else:
        for bucket, action in overrides.items():
            # a state or DCGM finding's bucket decides as an event's (gpu_health names one for each, e.g.
            # CHECK_MECHANICALS for pcie_degraded); an override may name the finding's check instead
            if bucket not in BUCKETS and bucket not in verdict.CHECKS:
                problems.append(f"health_action_overrides names {bucket!r}, which is no bucket or check; expected one "
                                f"of {', '.join(sorted([*BUCKETS, *verdict.CHECKS]))}. Fix: spell it as NVIDIA's "
                                "catalog does, e.g. RESTART_BM")
            if action not in ACTIONS:
                problems.append(f"health_action_overrides[{bucket!r}] is {action!r}; expected one of "
                                f"{', '.join(ACTIONS)}. Fix: e.g. {bucket}: quarantine")
    if apply and plan_source != "preflight":
        problems.append(f"health_apply is true, but the plan is the {plan_source or 'missing'} one, not preflight's: "
                        "health.yml acts only on a fleet preflight has judged (GPU counts, members' GPUs). Fix: run "
                        "playbooks/preflight.yml (or site.yml) first, which writes plan.json, then apply")
    return problems


def _sxid(item: dict, others: list) -> tuple[str, str]:
    """An SXid: never NVSentinel's action; fatal (its group, gpu_health's rule) -> the CONTACT_SUPPORT behaviour, else
    reviewed."""
    advice = f"NVSentinel suggests {item.get('bucket') or 'nothing'} (advice, not NVIDIA guidance)"
    if (item.get("code"), item.get("pci")) in verdict.fatal_sxids([item, *others]):
        return "quarantine", f"SXid {item.get('code')} fatal: CONTACT_SUPPORT behaviour; {advice}"
    return "review", f"SXid {item.get('code')} not fatal: report only; {advice}"


def decide(item: dict, others: list, overrides: dict | None = None) -> tuple[str, str]:
    """(action, why) for one event or finding; an override (health_action_overrides) replaces the bucket's action."""
    bucket, step = item.get("bucket"), item.get("step")
    if step is None and item.get("kind") == "xid":  # the step gpu_health's verdict rule names among the sweep's events
        codes, recovery = verdict.xid_context([item, *others])
        where = verdict.where_of(item)
        step = verdict.xid_judgement(bucket or "UNKNOWN", codes.get(where, set()), recovery.get(where),
                                     item.get("fatal"))[1]
    if item.get("kind") == "sxid":
        action, why = _sxid(item, others)
    elif step in STEPS:
        action, why = STEPS[step][0], f"{bucket}: gpu_health's step {STEPS[step][1]}"
    elif step in BUCKETS and step != bucket:
        action, why = BUCKETS[step](item, others)
        why = f"{bucket}: gpu_health's step {why}"
    elif bucket in BUCKETS:
        action, why = BUCKETS[bucket](item, others)
    else:
        action, why = BUCKETS["UNKNOWN"](item, others)
    key = bucket if bucket in (overrides or {}) else item.get("check")
    if overrides and key in overrides and overrides[key] != action:
        return overrides[key], f"{why}; overridden to {overrides[key]} (health_action_overrides[{key}])"
    return action, why


def _items(sweep: dict) -> list[dict]:
    """A sweep's events and its state findings (kernel-log findings are the events themselves), as plan items."""
    items = []
    for event in sweep.get("events") or []:
        kind, code = event.get("kind"), event.get("code")
        label = {"xid": f"Xid {code}", "sxid": f"SXid {code}"}.get(kind, f"fallen off the bus ({code})")
        items.append({"source": "event", "kind": kind, "code": code, "gpu": event.get("gpu"), "pci": event.get("pci"),
                      "bucket": event.get("immediate_action") or "UNKNOWN", "event": label,
                      "line": event.get("line") or "", "time": event.get("time"), "fatal": event.get("fatal"),
                      "recovery_action": event.get("recovery_action"),
                      "key": f"{kind}:{code}:{event.get('gpu')}:{event.get('time') or event.get('line')}"})
    for finding in sweep.get("findings") or []:
        if finding.get("check") in EVENT_CHECKS:
            continue
        items.append({"source": "finding", "check": finding.get("check"), "gpu": finding.get("gpu"),
                      "bucket": finding.get("action"), "step": finding.get("step"),
                      "event": f"{finding.get('check')}: {finding.get('evidence')}",
                      "severity": finding.get("severity"), "line": finding.get("evidence") or "",
                      "key": f"finding:{finding.get('check')}:{finding.get('gpu')}"})
    return items


def host_plan(sweep: dict, previous: dict, overrides: dict | None = None, release: bool = False) -> dict:
    """One host: each item with its action, the host's action (the strongest), the GPUs it takes out and gives back.
    ``previous``: this host's entry in the health state (handled item keys, GPUs out of service); ``release``: the
    operator says the node was serviced (health_release), so a GPU waiting for its remedy goes back when healthy."""
    if not sweep.get("read_ok", False):
        return {"read_ok": False, "status": "unreadable", "action": "none", "items": [], "gpus_out": {},
                "gpus_back": [], "restart": [], "verdict": sweep.get("verdict"),
                "reason": "the sweep could not read this host's GPU state (read_ok false): nothing is done here"}
    handled = set(previous.get("handled") or [])
    items = _items(sweep)
    for item in items:
        item["action"], item["why"] = decide(item, items, overrides)
        item["new"] = item["key"] not in handled
    new = [i for i in items if i["new"] and i["action"] != "none"]
    action = max((i["action"] for i in new), key=RANK.__getitem__, default="none")
    gpus_out = {}
    every = [str(g.get("index")) for g in sweep.get("gpus") or [] if g.get("index") is not None]
    for item in new:
        if item["action"] not in TAKES_GPU_OUT:
            continue
        # an event that names no GPU (its PCI address matched none) takes every GPU of the host out
        for gpu in [str(item["gpu"])] if item["gpu"] is not None else every:
            gpus_out.setdefault(gpu, {"event": item["event"], "action": item["action"], "why": item["why"],
                                      "line": item["line"]})
    verdicts = {str(g.get("index")): g.get("verdict") for g in sweep.get("gpus") or []}
    still = {str(i["gpu"]) for i in items if i["action"] != "none" and i["gpu"] is not None}
    held = previous.get("out_of_service") or {}
    back = [gpu for gpu, entry in sorted(held.items())
            if (release or not entry.get("pending")) and verdicts.get(gpu) == "healthy" and gpu not in still]
    # the workspaces an earlier run stopped start again once every GPU it took out is back
    restart = list(previous.get("stopped") or []) if back and set(back) == set(held) and not gpus_out else []
    # each GPU's UUID as this sweep read it: what gpu_health's release takes (a clear_held step)
    uuids = {str(g.get("index")): g["uuid"] for g in sweep.get("gpus") or [] if g.get("uuid")}
    return {"read_ok": True, "status": "act" if new else "clear", "action": action, "items": items,
            "gpus_out": gpus_out, "gpus_back": back, "restart": restart, "verdict": sweep.get("verdict"),
            "uuids": uuids,
            "reason": "; ".join(f"{i['event']} on GPU {i['gpu']}: {i['why']}" for i in new) or "nothing new"}


def _bound(host: str, hplan: dict, sweep: dict, entry: dict, bounds: dict, now: Any) -> None:
    """Over time (plugin_utils/health_bounds.py): the opt-out, "service required" (held until health_release) and
    the escalation of a repeated remediation to it; who cordoned the node."""
    node = (bounds.get("nodes") or {}).get(host)
    hplan["cordoned_by"] = entry.get("cordoned_by") or ("gpuops" if entry.get("cordoned") else None)
    if bounds.get("nodes") is not None:
        hplan["operator_cordon"] = bounds_rules.operator_cordon(node, entry)
    why = bounds_rules.opted_out(host, (bounds.get("remediation") or {}).get(host, True), node)
    held = entry.get("service_required")
    if why and (hplan["status"] == "act" or hplan["gpus_back"]):
        hplan.update(status="opted_out", gpus_back=[], restart=[], reason=f"{hplan['reason']} ({why})")
    elif held and not bounds.get("release"):
        hplan.update(status="service_required", gpus_back=[], restart=[],
                     reason=f"{hplan['reason']} (held: {held.get('reason')})")
    elif hplan["status"] == "act" and hplan["action"] in DISRUPTIVE and now is not None:
        escalate = bounds_rules.escalation(entry, now, int(bounds["escalate_after"]), int(bounds["escalate_window"]))
        if escalate:
            every = [str(g["index"]) for g in sweep.get("gpus") or [] if g.get("index") is not None]
            first = next(iter(hplan["gpus_out"].values()), {"event": "repeat", "line": ""})
            hplan.update(action="quarantine", escalated=escalate, reason=f"{hplan['reason']}; {escalate}",
                         gpus_out={g: {**first, "action": "quarantine", "why": escalate} for g in every}
                         or hplan["gpus_out"])


def build_plan(sweeps: dict[str, dict], state: dict, max_unavailable: int, overrides: dict | None = None,
               release: bool = False, bounds: dict | None = None) -> dict:
    """The fleet's plan: every host's plan (its ``status`` says whether it acts now) and the breaker. At most
    ``max_unavailable`` nodes are out of service at once (those the state already holds out count); the rest are
    deferred to a later run. ``bounds``: the health_plan filter's option (windows in seconds, ``nodes`` as
    node_facts); none, no bound over time."""
    known = (state or {}).get("hosts") or {}
    bounds = {**(bounds or {}), "release": release}
    now = bounds_rules.when(bounds.get("now"))
    hosts = {h: host_plan(s, known.get(h) or {}, overrides, release) for h, s in sorted(sweeps.items())}
    for host, hplan in hosts.items():
        _bound(host, hplan, sweeps[host] or {}, known.get(host) or {}, bounds, now)
        if (state or {}).get("schema", 1) > 1:
            # the workspaces it stopped start again once every GPU is back: those, never one an operator stopped
            kept = (known.get(host) or {}).get("stopped_containers") or []
            hplan["containers"] = list(kept) if hplan["restart"] else []
    already_out = {h for h, entry in known.items() if entry.get("out_of_service") or entry.get("cordoned")}
    disruptive = sorted((h for h, p in hosts.items() if p["action"] in DISRUPTIVE and p["status"] == "act"),
                        key=lambda h: (-RANK[hosts[h]["action"]], h))
    room = max_unavailable - len(already_out - set(disruptive))
    for host in disruptive:
        if host in already_out or room > 0:
            room -= 0 if host in already_out else 1
        else:
            hosts[host]["status"] = "deferred"
            hosts[host]["reason"] += (f" (deferred: {max_unavailable} node(s) may be out of service at once, "
                                      "health_max_unavailable; a later run takes it)")
    guard = None
    if now is not None:
        guard = bounds_rules.breaker(state, int(bounds.get("fleet_size") or len(sweeps)), now,
                                     float(bounds["breaker_fraction"]), int(bounds["breaker_window"]),
                                     bool(bounds.get("breaker_reset")))
        # tripped before this run: nothing acts (nor gives back); tripped by this plan: the hosts past the limit wait
        held = [h for h, p in hosts.items() if p["status"] == "act" or p["gpus_back"]] if guard["tripped"] else [
            h for h in disruptive if hosts[h]["status"] == "act" and not bounds_rules.admit(guard, h)]
        for host in held:
            hosts[host].update(status="held", gpus_back=[], restart=[],
                               reason=f"{hosts[host]['reason']} (held: {guard['reason']})")
        by = bounds.get("by") or "unknown"
        guard["record"] = bounds_rules.breaker_state(state, guard, bounds["now"], by)
        # the audit log's lines for it (health_record, host none): a reset, then a trip by this plan
        done = [("breaker_reset", "health_breaker_reset=true")] if guard["reset"] else []
        done += [("breaker_tripped", guard["reason"])] if guard["tripped_now"] else []
        guard["done"] = [{"kind": kind, "result": "ok", "by": by, "detail": detail} for kind, detail in done]
    return {"breaker": guard, "hosts": hosts}


def _stale_why(record: dict, age: float, settings: dict) -> str | None:
    """Why the sweep's last result cannot stand for a new gpu_health call with these settings, or None."""
    max_age, wanted = int(settings.get("max_age") or 0), settings.get("expected_gpus")
    result = record.get("result") or {}
    if age < 0 or age > max_age:
        return (f"the sweep's last result is {age:.0f} s old, over health_sweep_max_age ({max_age} s): is its timer "
                "running (systemctl status gpuops-gpu-health-sweep.timer; on Kubernetes the gpu-health-sweep "
                "DaemonSet's pod)? Swept again")
    if not record.get("events_complete"):
        return ("the sweep's record of this boot's events is incomplete (it started from a cursor, or kept only "
                "the latest events): swept again from this host's cursor")
    if not result.get("read_ok"):
        return "the sweep could not read the GPUs' state (read_ok false): swept again"
    level, asked = int(record.get("dcgm_level") or 0), settings.get("dcgm_level")
    if asked is not None and level < int(asked):
        return (f"the sweep ran DCGM diag at level {level}, health_dcgm_level asks for {asked}: swept again at "
                f"level {asked} (unset health_dcgm_level to take the sweep's level, or raise the sweep's, "
                "gpu_health_sweep_dcgm_level)")
    checked = record.get("expected_gpus")
    if wanted is not None and checked != wanted and len(result.get("gpus") or []) < int(wanted):
        return (f"the sweep lists {len(result.get('gpus') or [])} GPU(s) and did not check for the {wanted} the "
                "plan expects: swept again, for the missing-GPU check")
    return None


def sweep_record(read: dict, settings: dict) -> dict:
    """Whether a host's sweep is the scheduled sweep's last result (``health_sweep_results: last``) or a new
    gpu_health call, and why: the health_sweep_record filter's input, options (``settings``) and result. The
    record's events are the whole boot's (the health state's handled keys say which were acted on)."""
    def again(why: str, age: float | None = None) -> dict:
        return {"source": "gpu_health", "why": why, "age": age, "sweep": None}

    if settings.get("mode") != "last":
        return again("health_sweep_results is fresh: gpu_health swept this host")
    if settings.get("replay"):
        return again("health_kernel_log_text or health_state_text is given: gpu_health swept that text")
    clock, _newline, text = str(read.get("stdout") or "").partition("\n")
    if read.get("rc") != 0 or not text.strip():
        return again(f"no sweep result at {settings.get('path')} on this host (is the scheduled sweep installed? "
                     "gpu_health_sweep_timer_enabled, or kube_monitoring's gpu-health-sweep DaemonSet): swept again")
    try:
        record, now = json.loads(text), float(clock)
    except ValueError as err:
        return again(f"the sweep result at {settings.get('path')} cannot be read ({err}): swept again")
    if not isinstance(record, dict) or record.get("schema") != RESULT_SCHEMA:
        return again(f"the sweep result at {settings.get('path')} is not schema {RESULT_SCHEMA} (a sweep of "
                     "another collection version?): swept again")
    age = round(now - float(record.get("time") or 0), 1)
    why = _stale_why(record, age, settings)
    if why:
        return again(why, age)
    level = int(record.get("dcgm_level") or 0)
    asked = ("health_dcgm_level unset: the sweep's level stands" if settings.get("dcgm_level") is None
             else f"health_dcgm_level {settings['dcgm_level']} or above")
    return {"source": "sweep", "age": age, "sweep": record["result"],
            "why": f"the scheduled sweep's last result, {age:.0f} s old (health_sweep_max_age "
                   f"{int(settings.get('max_age') or 0)} s), with every event it read in this boot, DCGM diag "
                   f"level {level} ({asked})"}
