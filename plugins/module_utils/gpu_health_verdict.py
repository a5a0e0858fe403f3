# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Findings and verdicts: what the events, the GPUs' state and DCGM say, how bad it is, and what to do.

A finding is ``{gpu, check, severity, evidence, action, step}``: ``gpu`` an index or None (host level), ``severity``
``degraded`` or ``failed``, ``action`` NVIDIA's bucket (as in the Xid catalog) or a collection action name, ``step``
the concrete step where NVIDIA's bucket is a workflow (``WORKFLOW_XID_48`` alone -> ``RESET_GPU``), else None.

Xid bucket -> severity, and NVIDIA's workflows for Xid 45, 48, 144-150 and 154, are as the gpu_health module's
documentation states them (plugins/modules/gpu_health.py, docs/modules/gpu_health.md); ``XID_154_EVAL`` (the
resolution-buckets sheet's row, no catalog code) takes the judgement of an Xid 154 on the same GPU, else degraded with
step ``RESTART_APP``.
Their code lives here only: the controller's health plan (plugin_utils/health.py) calls ``xid_context`` and
``xid_judgement`` for each Xid, and ``fatal_sxids`` for an SXid.

A ``fallen_off_bus`` line is failed with Xid 79's bucket ``RESTART_BM``. An SXid is host level (it names an
NVSwitch): failed when the line says ``Fatal``, degraded when ``Non-fatal`` unless NVSentinel's mapping says
``IGNORE``; its action is NVSentinel's (not NVIDIA guidance). State and DCGM checks: see ``state_findings``.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_events import (
    KIND_FALLEN_OFF_BUS,
    KIND_SXID,
    UNKNOWN,
)

HEALTHY = "healthy"
DEGRADED = "degraded"
FAILED = "failed"
_RANK = {HEALTHY: 0, DEGRADED: 1, FAILED: 2}
INVESTIGATE = "INVESTIGATE"  # the collection's action for conditions NVIDIA gives no bucket for: report, do nothing
# Every check of the state, the GPU count and DCGM (the kernel-log events' are their kinds); the health plan's
# health_action_overrides may name one instead of a bucket (plugin_utils/health.py)
CHECKS = ("ecc_dbe", "row_remap_failure", "row_remap_pending", "retired_pages_pending", "gpu_missing", "nvlink_down",
          "dcgm_diag", "throttle_thermal", "throttle_hw_slowdown", "throttle_power", "nvlink_errors", "pcie_degraded",
          "persistence_off")

_DEGRADED_BUCKETS = ("RESTART_APP", "CHECK_UVM", UNKNOWN)
_SOLO_FM_BUCKETS = ("WORKFLOW_XID_45", "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)")
_RECOVERY_154 = {
    "none": (None, "IGNORE"),
    "drain p2p": (DEGRADED, "DRAIN_P2P"),
    "drain and reset": (FAILED, "DRAIN_AND_RESET"),
    "gpu reset required": (FAILED, "RESET_GPU"),
    "node reboot required": (FAILED, "RESTART_BM"),
}
_XID_ROW_REMAP = (63, 64)
_XID_45 = 45
_XID_154 = 154


def worst(verdicts) -> str:
    return max(verdicts, key=_RANK.__getitem__, default=HEALTHY)


def finding(gpu, check: str, severity: str, evidence: str, action: str, step: str | None = None) -> dict:
    return {"gpu": gpu, "check": check, "severity": severity, "evidence": evidence, "action": action, "step": step}


# --------------------------------------------------------------------------- events


def _where(event: dict) -> str:
    where = f"PCI {event['pci']}" if event["pci"] else "an unnamed device"
    return f"{where} (GPU {event['gpu']})" if event["gpu"] is not None else where


def _group(events: list) -> list:
    """Events grouped by (kind, code, GPU or PCI address), in first-seen order: ``[(first, last, count)]``."""
    groups: dict = {}
    for event in events:
        key = (event["kind"], event["code"], event["gpu"] if event["gpu"] is not None else event["pci"])
        first, _last, count = groups.get(key, (event, None, 0))
        groups[key] = (first, event, count + 1)
    return list(groups.values())


def where_of(event: dict):
    """The GPU an event names, else its PCI address: the key of the Xid rules' "on the same GPU"."""
    return event["gpu"] if event.get("gpu") is not None else event.get("pci")


def xid_context(events: list) -> tuple:
    """``(codes, recovery)`` per ``where_of``: the Xid codes seen there, and the last recovery action an Xid 154
    printed there. ``events``: gpu_health's events, or the health plan's items (the same keys)."""
    codes: dict = {}
    recovery: dict = {}
    for event in events:
        if event.get("kind") == "xid":
            codes.setdefault(where_of(event), set()).add(event["code"])
            if event.get("recovery_action") is not None:
                recovery[where_of(event)] = event["recovery_action"]
    return codes, recovery


def xid_judgement(bucket: str, codes_on_gpu: set, recovery: str | None, fatal: bool | None) -> tuple:
    """``(severity or None, step)`` of one Xid group (see the module doc): ``codes_on_gpu`` and ``recovery`` are its
    GPU's entries of ``xid_context``, ``fatal`` what the line says (``Fatal``/``Nonfatal``, else None)."""
    if bucket == "IGNORE":
        return None, None
    if bucket in _SOLO_FM_BUCKETS:
        return (None, "IGNORE") if codes_on_gpu - {_XID_45} else (DEGRADED, "RESTART_FM")
    if bucket == "WORKFLOW_XID_48":
        return FAILED, "DRAIN_AND_RESET" if codes_on_gpu & set(_XID_ROW_REMAP) else "RESET_GPU"
    if bucket == "WORKFLOW_NVLINK5_ERR":
        return (DEGRADED if fatal is False else FAILED), None
    if bucket == "XID_154" or (bucket == "XID_154_EVAL" and _XID_154 in codes_on_gpu):
        return _RECOVERY_154.get((recovery or "").strip().lower(), (DEGRADED, None))
    if bucket == "XID_154_EVAL":
        return DEGRADED, "RESTART_APP"
    if bucket in _DEGRADED_BUCKETS:
        return DEGRADED, None if bucket == UNKNOWN else bucket
    return FAILED, None if bucket.startswith("WORKFLOW_") else bucket


def fatal_sxids(events: list) -> set:
    """``(code, pci)`` of the SXid groups that are fatal: any of their lines says so (a lone continuation line,
    fatal null, may come first)."""
    sxids = [event for event in events if event.get("kind") == KIND_SXID]
    return {(event["code"], event.get("pci")) for event in sxids if event.get("fatal")}


def _evidence(first: dict, last: dict, count: int) -> str:
    name = {"xid": "Xid", "sxid": "SXid", KIND_FALLEN_OFF_BUS: "fallen off the bus (Xid 79)"}[first["kind"]]
    label = name if first["kind"] == KIND_FALLEN_OFF_BUS else f"{name} {first['code']}"
    mnemonic = f" {first['mnemonic']}" if first["mnemonic"] else ""
    times = f" x{count}" if count > 1 else ""
    when = f", last at {last['time']}" if last["time"] else ""
    return f"{label}{mnemonic}{times} on {_where(first)}{when}: {last['line']}"


def event_findings(events: list) -> list:
    """One finding per group of like events that calls for one (see the module doc)."""
    codes, recovery = xid_context(events)
    fatal = fatal_sxids(events)
    found = []
    for first, last, count in _group(events):
        where = where_of(first)
        action, step = first["immediate_action"], None
        if first["kind"] == KIND_FALLEN_OFF_BUS:
            severity, step = FAILED, action
        elif first["kind"] == KIND_SXID:
            severity = FAILED if (first["code"], first["pci"]) in fatal else None if action == "IGNORE" else DEGRADED
        else:
            severity, step = xid_judgement(action, codes.get(where, set()), recovery.get(where), first["fatal"])
        if severity is not None:
            found.append(finding(first["gpu"], first["kind"], severity, _evidence(first, last, count), action, step))
    return found


# --------------------------------------------------------------------------- state


def _links_down(record: dict) -> list:
    """Down NVLinks that matter: on a GPU with some link up, or in an NVSwitch fabric (a PCIe GPU without a bridge
    reports all its links down, which is no fault; NVIDIA/NVSentinel#1481 hit the same false positive)."""
    state = record["state"]
    down = state["nvlink_links_down"] or []
    fabric = (record.get("fabric") or {}).get("state")
    in_fabric = fabric not in (None, "Not Supported")
    return down if down and (state["nvlink_links_active"] or in_fabric) else []


# The state flags that are a finding as they are: check (the state key), severity, evidence, action.
_FLAG_FINDINGS = (
    ("row_remap_failure", FAILED, "Remapped Rows: Remapping Failure Occurred = Yes", "CONTACT_SUPPORT"),
    ("row_remap_pending", DEGRADED, "Remapped Rows: Pending = Yes (applied at the next GPU reset)", "RESET_GPU"),
    ("retired_pages_pending", DEGRADED, "Retired Pages: pending retirement (applied at the next GPU reset)",
     "RESET_GPU"),
    ("throttle_thermal", DEGRADED, "clocks slowed for temperature (HW or SW thermal slowdown active)", INVESTIGATE),
    ("throttle_power", DEGRADED, "clocks slowed by the HW power brake (the board or system signalled a power problem)",
     INVESTIGATE),
)


def state_findings(record: dict) -> list:
    """Findings of one GPU's state (the checks, their severity and bucket: the gpu_health module's documentation).
    ``ecc_dbe`` takes ``WORKFLOW_XID_48``, the catalog's bucket for a DBE; ``row_remap_failure`` ``CONTACT_SUPPORT``,
    Xid 64's investigatory action, since the flag survives resets."""
    state, found = record["state"], []

    def add(check: str, severity: str, evidence: str, action: str, step: str | None = None) -> None:
        found.append(finding(record["index"], check, severity, evidence, action, step))

    volatile = state["ecc_uncorrectable_volatile"]
    if volatile:
        add("ecc_dbe", FAILED, f"{volatile} uncorrectable ECC errors since the driver loaded "
            f"(aggregate {state['ecc_uncorrectable_aggregate']})", "WORKFLOW_XID_48", "RESET_GPU")
    for check, severity, evidence, action in _FLAG_FINDINGS:
        if state[check]:
            add(check, severity, evidence, action)
    if state["throttle_hw_slowdown"] and not state["throttle_thermal"] and not state["throttle_power"]:
        add("throttle_hw_slowdown", DEGRADED, "HW slowdown active", INVESTIGATE)
    counters = {key: state[key] for key in ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors")}
    if any(counters.values()):
        shown = ", ".join(f"{key.split('_')[1]} {value}" for key, value in counters.items() if value)
        add("nvlink_errors", DEGRADED, f"NVLink error counters: {shown}", INVESTIGATE)
    down = _links_down(record)
    if down:
        add("nvlink_down", DEGRADED, f"NVLink links down: {down} (up: {state['nvlink_links_active'] or []})",
            INVESTIGATE)
    width, width_max = state["pcie_width_current"], state["pcie_width_max"]
    gen, gen_max = state["pcie_gen_current"], state["pcie_gen_max"]
    # a slower generation counts only while the GPU is busy: an idle GPU lowers its link speed to save power
    slow = gen is not None and gen_max is not None and gen < gen_max and state["gpu_idle"] is False
    if (width is not None and width_max is not None and width < width_max) or slow:
        add("pcie_degraded", DEGRADED, f"PCIe link x{width} gen {gen}, maximum x{width_max} gen {gen_max}",
            "CHECK_MECHANICALS")
    if state["persistence_mode"] is False:
        add("persistence_off", DEGRADED, "persistence mode is off (start nvidia-persistenced)", INVESTIGATE)
    return found


def missing_findings(expected: int | None, gpus: list, read_ok: bool, pci_gpus: list) -> list:
    """``gpu_missing`` (failed, ``RESTART_BM``: a GPU the driver lost is Xid 79's case) when the state was read and
    lists fewer GPUs than expected; ``pci_gpus``: the NVIDIA GPUs on the PCI bus, to name the ones not listed."""
    if expected is None or not read_ok or len(gpus) >= expected:
        return []
    listed = {gpu.get("pci_bus_id") for gpu in gpus}
    absent = [item["pci_bus_id"] for item in pci_gpus if item["pci_bus_id"] not in listed]
    where = f"; on the PCI bus but not listed: {absent}" if absent else ""
    evidence = f"expected {expected} GPUs (expected_gpus), the driver lists {len(gpus)}{where}"
    return [finding(None, "gpu_missing", FAILED, evidence, "RESTART_BM")]


def dcgm_findings(dcgm: dict, gpu_indexes: set) -> list:
    """``dcgm_diag``: a FAIL is failed (``CONTACT_SUPPORT``: NVIDIA's field diagnostics), a WARN degraded
    (``INVESTIGATE``); on each GPU the result names, host level when it names none we know."""
    found = []
    for result in dcgm.get("results") or []:
        if result["status"] not in ("fail", "warn"):
            continue
        severity, action = (FAILED, "CONTACT_SUPPORT") if result["status"] == "fail" else (DEGRADED, INVESTIGATE)
        detail = "; ".join(result["warnings"] + result["info"]) or "no detail given"
        evidence = (
            f"DCGM diag level {dcgm['level']} {result['category'] or ''} {result['test']}: "
            f"{result['status'].upper()} ({detail})"
        )
        targets = [gpu for gpu in result["gpus"] if gpu in gpu_indexes] or [None]
        found.extend(finding(gpu, "dcgm_diag", severity, " ".join(evidence.split()), action) for gpu in targets)
    return found
