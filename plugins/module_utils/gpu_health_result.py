# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The scheduled sweep's last result, kept on the host for health.yml (``health_sweep_results: last``).

The sweep (``gpu_health_metrics``, run by gpu_health's timer or kube_monitoring's DaemonSet) writes, beside its state
file, ``result.json``: its last gpu_health result, as the module returns it, whose ``events`` are every event the
sweeps read in this boot (each with ``read_at``), not only the last run's. health.yml's cursor is its own (the last
applied run's, in the controller's state): with the whole boot's events it misses none, and what it already handled
it knows by the events' keys. plugins/plugin_utils/health.py ``sweep_record`` judges the record on the controller.
"""

from __future__ import annotations

import json
import os

RESULT_NAME = "result.json"
RESULT_SCHEMA = 1
# The events of one boot kept; past it the oldest go and the record says it is incomplete (health.yml sweeps again).
EVENTS_KEPT = 5000


def result_record(previous: dict | None, result: dict, now: float, boot_id: str | None, since_cursor: str | None,
                  options: dict) -> dict:
    """result.json after one run. ``previous``: the last record, or None; ``result``: this run's gpu_health
    ``sweep``; ``boot_id``: the kernel's boot id now; ``since_cursor``: the cursor this run read from; ``options``:
    the run's ``dcgm_level`` and ``expected_gpus``, which health.yml compares with its own.

    ``events_complete`` is false when an event of this boot may be missing: the record was started by a run that
    read from a cursor when there was no record before (a state file older than result.json), or more than
    ``EVENTS_KEPT`` events were read. The first run in a new boot reads the whole boot (journalctl -b, dmesg)."""
    same_boot = (bool(previous) and previous.get("schema") == RESULT_SCHEMA and boot_id is not None
                 and previous.get("boot_id") == boot_id)
    if same_boot:
        kept, complete = list(previous["result"]["events"]), bool(previous.get("events_complete"))
    else:
        kept, complete = [], boot_id is not None and (previous is not None or since_cursor is None)
    kept += [{**event, "read_at": round(now, 3)} for event in result["events"]]
    if len(kept) > EVENTS_KEPT:
        kept, complete = kept[-EVENTS_KEPT:], False
    return {"schema": RESULT_SCHEMA, "time": round(now, 3), "boot_id": boot_id, **options,
            "events_complete": complete, "result": {**result, "events": kept}}


def write_result(state_file: str, result: dict, now: float, boot_id: str | None, since_cursor: str | None,
                 options: dict, write) -> str:
    """Read the last record beside ``state_file``, write the next one with ``write(path, text)`` (the sweep's
    atomic writer); returns its path."""
    path = os.path.join(os.path.dirname(state_file), RESULT_NAME)
    try:
        with open(path, encoding="utf-8") as stream:
            previous = json.load(stream)
    except (OSError, ValueError):
        previous = None
    previous = previous if isinstance(previous, dict) else None
    write(path, json.dumps(result_record(previous, result, now, boot_id, since_cursor, options)) + "\n")
    return path
