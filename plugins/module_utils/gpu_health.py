# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""gpu_health for gpuops.cluster: one read-only sweep of a host's GPUs (``sweep``), its result the module's RETURN
(docs/modules/gpu_health.md) plus ``warnings``. The GPUs are read first, so that the kernel log's events map to them.
The host's commands run through ``run`` and ``which`` (a test's stand-ins, or the module's and the script's own).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import GpuFactsError
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_sysfs import scan_pci
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_dcgm import run_dcgm
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_events import map_gpus, parse_events
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_log import BOOT_ID_PATH, read_kernel_log
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import gather_state
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_verdict import (
    HEALTHY,
    dcgm_findings,
    event_findings,
    missing_findings,
    state_findings,
    worst,
)


def _gpu_entry(record: dict, findings: list) -> dict:
    own = [item for item in findings if item["gpu"] == record["index"]]
    return {
        "index": record["index"],
        "pci": record.get("pci_bus_id"),
        "uuid": record.get("uuid"),
        "name": record.get("name"),
        "verdict": worst(item["severity"] for item in own),
        "findings": own,
        "state": record["state"],
        "not_supported": record.get("not_supported", []),
        "unread": record.get("unread", []),
    }


def sweep(  # noqa: PLR0913 -- the module's options, the sweep script's boot-id file, and the command runner
    run,
    which,
    *,
    kernel_log_text: str | None = None,
    since_cursor: str | None = None,
    expected_gpus: int | None = None,
    dcgm_level: int = 1,
    backend: str = "auto",
    state_text: str | None = None,
    boot_id_path: str = BOOT_ID_PATH,
) -> dict:
    """One host's health: see the module doc. Raises GpuFactsError for refused input or a named backend that cannot
    answer;
    ``dcgm_level`` is one of 0-3 by both callers' argument choices (the module's, the sweep program's)."""
    if expected_gpus is not None and expected_gpus < 0:
        raise GpuFactsError(
            f"expected_gpus is {expected_gpus}: it must be 0 or more (the GPU count the plan expects on this host, "
            "gpuops_plan.hosts[host].gpu_count); leave it unset to skip the missing-GPU check"
        )
    state = gather_state(backend, run, which, state_text=state_text)
    log = read_kernel_log(since_cursor, run, which, text=kernel_log_text, boot_id_path=boot_id_path)
    events = map_gpus(parse_events(log["lines"]), state["gpus"])
    dcgm = run_dcgm(dcgm_level, run, which)
    pci_gpus = scan_pci("/sys")["gpus"] if state_text is None else []
    findings = event_findings(events)
    for record in state["gpus"]:
        findings.extend(state_findings(record))
    findings.extend(missing_findings(expected_gpus, state["gpus"], state["read_ok"], pci_gpus))
    findings.extend(dcgm_findings(dcgm, {record["index"] for record in state["gpus"]}))
    gpus = [_gpu_entry(record, findings) for record in state["gpus"]]
    notes = [f"state: {note}" for note in state["notes"]] + [f"log: {note}" for note in log["notes"]]
    if not dcgm["ran"]:
        notes.append(f"dcgm: {dcgm['reason']}")
    return {
        "events": events,
        "cursor": log["cursor"],
        "log_source": log["source"],
        "log_read_ok": log["ok"],
        "gpus": gpus,
        "findings": findings,
        "verdict": worst([HEALTHY, *(item["severity"] for item in findings)]),
        "state_source": state["source"],
        "read_ok": state["read_ok"],
        "dcgm": dcgm,
        "notes": notes,
        "warnings": state["warnings"],
    }
