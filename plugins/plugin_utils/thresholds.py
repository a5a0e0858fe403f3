# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The acceptance thresholds table (issue 38): a host's measured values (``measure``, from the outputs burn-in,
validate and the return-to-service run collect) judged against its GPU model's row of gpu_models.yml (``judge``),
each check PASS, WARN, FAIL or UNKNOWN with the threshold, the measured value and the source. The rules are
described once, in docs/thresholds.md ("How a host is judged").
"""

from __future__ import annotations

import math

from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin_membw import (
    GPU_MODELS,
    gpu_model,
    parse_nvbandwidth,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import parse_all_reduce

# Worst first: a verdict is its worst check's status. UNKNOWN is worse than PASS: nothing unjudged passes.
STATUSES = ("FAIL", "WARN", "UNKNOWN", "PASS")
# gpuops-run's exit codes (issue 38): 0 pass, 1 warnings (and anything not judged), 2 fail.
EXIT_CODES = {"PASS": 0, "WARN": 1, "UNKNOWN": 1, "FAIL": 2}
# The words of the judgements older than this table (burn-in's nccl, memory bandwidth and pairs; gpu_health's
# verdict) in its statuses; any other word ("skipped", "not run", "unjudged") is UNKNOWN.
_WORDS = {"ok": "PASS", "healthy": "PASS", "degraded": "WARN", "failed": "FAIL", "slow": "FAIL",
          "tcp_fallback": "FAIL"}
H2D, D2H, P2P = "host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"

# check -> (bound: "min" = measured at least the figure, "max" = at most; unit); what each measures and how: measure()
# and docs/thresholds.md ("How a host is judged")
CHECKS: dict[str, tuple[str, str]] = {
    "nccl_busbw_gbps": ("min", "GB/s"),
    "host_device_gbps": ("min", "GB/s"),
    "gpu_gpu_gbps": ("min", "GB/s"),
    "row_remap_pending": ("max", "GPUs"),
    "row_remap_failure": ("max", "GPUs"),
    "sram_uncorrectable": ("max", "errors"),
    "sram_correctable": ("max", "errors"),
    "nvlink_inactive": ("max", "links"),
    "pcie_replays_per_min": ("max", "per minute"),
}


def status_of(word: str) -> str:
    """An older judgement's word (ok, failed, slow, healthy, degraded, skipped, ...) as PASS, WARN, FAIL or UNKNOWN."""
    return _WORDS.get(str(word), "UNKNOWN")


def worst(statuses) -> str:
    """The worst of some statuses (STATUSES order); UNKNOWN when there are none: nothing judged does not pass."""
    found = set(statuses)
    return next((s for s in STATUSES if s in found), "UNKNOWN")


def _worst_of(values: list) -> float | None:
    found = [float(v) for v in values if v is not None]
    return min(found) if found else None


def _gpu_gpu(values: list) -> float | None:
    """The slowest pair of an n x n peer matrix, the diagonal (a GPU with itself, N/A or 0.00) left out."""
    n = math.isqrt(len(values))
    if n * n != len(values):
        return _worst_of(values)
    return _worst_of([v for i, v in enumerate(values) if i // n != i % n])


def measure(nccl: str | None = None, nvbandwidth: str | None = None, health: list | None = None) -> dict:
    """The measured values of one host: {"values": {check: number}, "errors": {check: why the run gave none}}.

    nccl: all_reduce_perf's output (one node, all its GPUs). nvbandwidth: its output for any of the three testcases
    of CHECKS. health: gpu_health's GPU records (``state``: row_remap_pending, row_remap_failure, nvlink_links_down).
    Nothing measures the SRAM ECC and PCIe replay checks yet: a caller that reads them adds them to ``values``."""
    values: dict = {}
    errors: dict = {}
    if nccl is not None:
        parsed = parse_all_reduce(nccl)
        if not parsed["rows"]:
            errors["nccl_busbw_gbps"] = "all_reduce_perf printed no result row"
        elif parsed["wrong"]:
            errors["nccl_busbw_gbps"] = f"all_reduce_perf counted {parsed['wrong']} wrong results"
        values["nccl_busbw_gbps"] = parsed["peak_busbw"] if parsed["rows"] else None
    if nvbandwidth is not None:
        parsed = parse_nvbandwidth(nvbandwidth)
        why = (parsed["errors"] or ["no result matrix"])[-1]
        for check, testcases in (("host_device_gbps", (H2D, D2H)), ("gpu_gpu_gbps", (P2P,))):
            ran = [t for t in testcases if f"Running {t}." in nvbandwidth or t in parsed["results"]]
            if not ran:
                continue
            matrices = [(parsed["results"].get(t) or {}).get("values") or [] for t in ran]
            missing = [t for t, m in zip(ran, matrices) if not m]
            pick = _gpu_gpu if check == "gpu_gpu_gbps" else _worst_of
            values[check] = _worst_of([pick(m) for m in matrices if m])
            if missing:
                errors[check] = f"nvbandwidth printed no {', '.join(missing)} result: {why[:200]}"
    if health is not None:
        states = [record.get("state") or {} for record in health]
        for check in ("row_remap_pending", "row_remap_failure"):
            seen = [s.get(check) for s in states if s.get(check) is not None]
            if seen:  # null on every GPU: the driver does not report it, not measured
                values[check] = sum(1 for flag in seen if flag)
        down = [s.get("nvlink_links_down") for s in states if s.get("nvlink_links_down") is not None]
        if down:
            values["nvlink_inactive"] = sum(len(links) for links in down)
    return {"values": values, "errors": errors}


def _row(gpu_name: str, overrides: dict) -> tuple[str | None, dict]:
    model = gpu_model(gpu_name)
    row = {check: dict(entry) for check, entry in ((model or {}).get("acceptance") or {}).items()}
    for check, value in (overrides or {}).items():
        if check not in CHECKS:
            raise ValueError(f"thresholds override {check!r} is not a check; allowed: {', '.join(CHECKS)}")
        row[check] = {"value": float(value), "source": "operator override"}
    return (model["model"] if model else None), row


def _status(check: str, measured: float, entry: dict) -> str:
    bound, value = CHECKS[check][0], float(entry["value"])
    if bound == "min":
        if measured < value:
            return "FAIL"
        return "WARN" if measured < value * (1 + float(entry.get("warn_within") or 0)) else "PASS"
    if measured <= value:
        return "PASS"
    return "WARN" if entry.get("exceed") == "warn" else "FAIL"


def _judge_one(check: str, model: str | None, entry: dict | None, measured, error: str | None,
               gpu_count: int | None) -> dict:
    source = (entry or {}).get("source")
    cited = GPU_MODELS["sources"].get(source) or {}
    out = {"check": check, "status": "UNKNOWN", "threshold": (entry or {}).get("value"), "bound": CHECKS[check][0],
           "unit": CHECKS[check][1], "measured": measured, "source": source, "url": cited.get("url"),
           "says": cited.get("says"), "detail": ""}
    if error:
        out.update(status="FAIL", detail=error)
    elif entry is None:
        out["detail"] = (f"no published figure for {model}" if model
                         else "GPU model not in the thresholds table (gpu_models.yml)") + "; set an override to judge"
    elif measured is None:
        out["detail"] = "the tool ran but reported no value for this check"
    elif entry.get("gpus") and (gpu_count is None or int(gpu_count) != int(entry["gpus"])):
        has = "its GPU count was not given" if gpu_count is None else f"this host has {gpu_count}"
        out["detail"] = f"the figure is for {entry['gpus']} GPUs ({source}); {has}: set an override to judge"
    else:
        out["status"] = _status(check, float(measured), entry)
        word = "at least" if out["bound"] == "min" else "at most"
        out["detail"] = f"{measured:g} {out['unit']}, {word} {float(entry['value']):g} ({source})"
    return out


def judge(gpu_name: str, measured: dict, overrides: dict | None = None, gpu_count: int | None = None) -> dict:
    """A host's measured values (``measure``'s answer) against its model's row: {"model", "gpu_name", "status",
    "exit_code", "checks": [{check, status, threshold, bound, unit, measured, source, url, says, detail}]}.
    Only the checks measured are judged; with none, the verdict is UNKNOWN."""
    model, row = _row(gpu_name, overrides or {})
    values, errors = measured.get("values") or {}, measured.get("errors") or {}
    checks = [_judge_one(check, model, row.get(check), values.get(check), errors.get(check), gpu_count)
              for check in CHECKS if check in values or check in errors]
    status = worst(c["status"] for c in checks)
    return {"model": model, "gpu_name": gpu_name, "status": status, "exit_code": EXIT_CODES[status], "checks": checks}
