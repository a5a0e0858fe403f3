# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The Prometheus side of "is training slow?" (roles/diagnose/tasks/slowdown.yml): which series are the job's,
the range queries, and the window means the rule (training_slowdown.py) reads; docs/operations.md ("Is training
slow?": the signals, which GPUs are the job's) describes them. Controller-side and pure: the playbook sends the
queries and hands the JSON answers back here.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import role_defaults
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_slowdown import SIGNALS, SlowdownInputError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import NVLINK_GBPS_PER_LINK, PCIE_X16_GBPS

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
MAX_POINTS = 1000  # per series and query; Prometheus refuses above 11000
MIN_STEP_S = 15  # dcgm-exporter's and Prometheus's usual interval
ROUNDING = 1.02  # a fraction up to this is the capacity's rounding (MiB vs MB, link overhead), read as 1
MULTI_GPU = 2


def _time(text: str, now: float, what: str) -> float:
    text = str(text).strip()
    if text == "now":
        return now
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise SlowdownInputError(f"diagnose_window {what} '{text}' is not a time; expected RFC 3339 with a zone "
                                 "(2026-12-01T09:00:00Z), Unix seconds or 'now'. Fix: e.g. "
                                 "-e diagnose_window=2026-12-01T09:00:00Z/2026-12-01T11:00:00Z")
    return moment.timestamp()


def parse_window(window: str, now: float) -> dict:
    """``<start>/<end>`` -> {start, end, step} in Unix seconds; the step keeps each series under MAX_POINTS."""
    first, sep, last = str(window).partition("/")
    if not sep or "/" in last:
        raise SlowdownInputError(f"diagnose_window '{window}' is not <start>/<end>. Fix: e.g. "
                                 "-e diagnose_window=2026-12-01T09:00:00Z/2026-12-01T11:00:00Z")
    start, end = _time(first, now, "start"), _time(last, now, "end")
    if end <= start:
        raise SlowdownInputError(f"diagnose_window '{window}': the end is not after the start. Fix: <start>/<end>")
    return {"start": start, "end": end, "step": max(MIN_STEP_S, math.ceil((end - start) / MAX_POINTS))}


def _literal(value: str) -> str:
    """``value`` as a regex literal inside a PromQL double-quoted string: regex metacharacters escaped, and each
    backslash doubled for the string (PromQL refuses unknown string escapes such as \\-)."""
    return "".join(c if c.isalnum() or c in "-_" else "\\\\" + c for c in value)


def _alternation(values: list[str]) -> str:
    return "|".join(_literal(v) for v in values)


def gpu_list(gpus) -> list[str]:
    """diagnose_gpus as a list of strings: a list, or a comma-separated string, of indexes or UUIDs."""
    items = gpus.split(",") if isinstance(gpus, str) else list(gpus or [])
    out = [str(g).strip() for g in items if str(g).strip()]
    bad = [g for g in out if not (g.isdigit() or UUID.match(g))]
    if bad or not out:
        raise SlowdownInputError(f"diagnose_gpus {gpus!r}: expected GPU indexes or UUIDs (GPU-...), e.g. 0,1 or "
                                 "[GPU-1f3a...]. Fix: -e diagnose_gpus=0,1")
    return out


def selectors(platform: str, job: str = "", gpus=None, members: dict | None = None, namespace: str = "",
              hosts: list[str] | None = None) -> list[str]:
    """The label matchers (without braces) that pick the job's GPUs: one string, or two alternatives joined with
    ``or`` by the queries (Kubernetes pod labels, with and without Prometheus's ``exported_`` prefix)."""
    if gpus:
        wanted = gpu_list(gpus)
        index = [g for g in wanted if g.isdigit()]
        uuids = [g for g in wanted if not g.isdigit()]
        matchers = ([f'gpu=~"{_alternation(index)}"'] if index else []) + \
                   ([f'UUID=~"{_alternation(uuids)}"'] if uuids else [])
        if platform == "kubernetes" and hosts and index:  # an index names a GPU on a node; a UUID is unique
            matchers.append(f'Hostname=~"{_alternation(sorted(hosts))}"')
        return [", ".join(matchers)]
    if not job:
        raise SlowdownInputError("neither diagnose_job nor diagnose_gpus is set. Fix: -e diagnose_job=<name>, or "
                                 "-e diagnose_window=<start>/<end> -e diagnose_gpus=0,1")
    if platform == "compose":
        member = (members or {}).get(job)
        if member is None:
            raise SlowdownInputError(f"diagnose_job '{job}' is not a member of the team (gpuops_plan.team.members: "
                                     f"{sorted(members or {})}). Fix: name a member, or use diagnose_window with "
                                     "diagnose_gpus")
        gpu_indexes = [str(int(g)) for g in member.get("gpus") or []]
        if not gpu_indexes:
            raise SlowdownInputError(f"member '{job}' has no GPUs (gpuops_members[].gpus). Fix: give the member "
                                     "GPUs, or use diagnose_window with diagnose_gpus")
        return [f'gpu=~"{_alternation(gpu_indexes)}"']
    if not DNS1123.match(job) or (namespace and not DNS1123.match(namespace)):
        raise SlowdownInputError(f"diagnose_job '{job}' / diagnose_namespace '{namespace}': Kubernetes names are "
                                 "lower-case letters, digits, '-' and '.'. Fix: the PyTorchJob's or the pod's name")
    pod = f"{_literal(job)}(-[a-z]+-[0-9]+)?"
    ns = _literal(namespace) if namespace else ".+"
    return [f'exported_namespace=~"{ns}", exported_pod=~"{pod}"', f'namespace=~"{ns}", pod=~"{pod}"']


def _union(template: str, sels: list[str]) -> str:
    """``template`` (with ``{s}`` for the matchers) once per alternative, joined with ``or``."""
    return "(" + " or ".join(template.replace("{s}", s) for s in sels) + ")"


def queries(sels: list[str], pcie_gbps: float, nvlink_peak_gbps: float, rate_window: str = "5m") -> dict:
    """One range query per signal, each a single series (aggregated over the job's GPUs), kept only at the steps
    where one of the job's GPUs was busy.

    pcie_gbps: one direction of the GPUs' PCIe link (GB/s; Gen4 x16 31.5, Gen5 x16 63); pcie_util is the busier
    direction of each GPU, averaged over the GPUs. nvlink_peak_gbps: a GPU's NVLink total, both directions
    (600 A100, 900 H100/H200), as DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (MiB/s) counts both."""
    for name, value in (("diagnose_pcie_gbps", pcie_gbps), ("diagnose_nvlink_peak_gbps", nvlink_peak_gbps)):
        if value <= 0:  # build passes floats: diagnose_pcie_gbps or the PCIe generation's, the NVLink peak or 1.0
            raise SlowdownInputError(f"{name} is {value!r}; expected GB/s > 0. Fix: e.g. {name}=63")
    if not re.fullmatch(r"\d+[smh]", str(rate_window)):
        raise SlowdownInputError(f"diagnose_rate_window '{rate_window}' is not a duration like 5m")
    busy = f" and on() (max{_union('DCGM_FI_DEV_GPU_UTIL{{s}}', sels)} > 0)"
    pcie = _union('{__name__=~"DCGM_FI_PROF_PCIE_(TX|RX)_BYTES", {s}}', sels)
    return {
        "memory_bandwidth_util": f"avg{_union('DCGM_FI_PROF_DRAM_ACTIVE{{s}}', sels)}{busy}",
        "sm_active": f"avg{_union('DCGM_FI_PROF_SM_ACTIVE{{s}}', sels)}{busy}",
        "gpu_temp_c": f"max{_union('DCGM_FI_DEV_GPU_TEMP{{s}}', sels)}{busy}",
        "pcie_util": f"(avg(max by (UUID) {pcie}) / {float(pcie_gbps) * 1e9:g}){busy}",
        "nvlink_util": (f"(avg{_union('DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{s}}', sels)} * 1048576 / "
                        f"{float(nvlink_peak_gbps) * 1e9:g}){busy}"),
        "throttle_thermal": (f"(max{_union('rate(DCGM_FI_DEV_THERMAL_VIOLATION{{s}}[' + rate_window + '])', sels)}"
                             f" / 1e9){busy}"),
        "gpu_count": f"count{_union('DCGM_FI_DEV_GPU_TEMP{{s}}', sels)}",
    }


def _values(name: str, answer) -> list[float]:
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else answer
        raise SlowdownInputError(f"Prometheus refused the {name} query: {error}. Fix: check diagnose_prometheus_url "
                                 "and that Prometheus answers /api/v1/query_range")
    values = []
    for series in (answer.get("data") or {}).get("result") or []:
        for _t, value in series.get("values") or []:
            number = float(value)
            if not math.isnan(number) and not math.isinf(number):
                values.append(number)
    return values


def window_means(answers: dict, nvlink_capacity_known: bool = True) -> dict:
    """The rule's input from the query_range answers (name -> API JSON): each signal's mean over the steps, None
    without samples; gpu_count the most GPUs seen at once; nvlink_util None for a single-GPU job, or when the
    NVLink capacity is not known."""
    means: dict = {}
    for name in SIGNALS:
        values = _values(name, answers[name]) if name in answers else []
        if name == "gpu_count":
            means[name] = int(max(values)) if values else None
        else:
            means[name] = round(sum(values) / len(values), 4) if values else None
    # A fraction a hair above 1 is the capacity's rounding; more is refused by the rule.
    for name in ("pcie_util", "nvlink_util"):
        if means[name] is not None and 1.0 < means[name] <= ROUNDING:
            means[name] = 1.0
    if (means["gpu_count"] or 0) < MULTI_GPU or not nvlink_capacity_known:
        means["nvlink_util"] = None
    return means


def nvlink_peak_gbps(topology: dict | None) -> float | None:
    """A GPU's NVLink total, both directions, from preflight's topology (gpuops_plan.hosts.<h>.topology): the most
    links to one peer (NVSwitch systems report every pair with the GPU's full count, NV12 A100, NV18 H100) x 25 GB/s
    per link per direction x 2. None without NVLink. Direct-attached meshes (NV1/NV2 to several peers) count
    low: set diagnose_nvlink_peak_gbps there."""
    links = [int(v) for g in (topology or {}).get("gpus") or [] for v in (g.get("nvlink_peers") or {}).values()]
    return max(links) * NVLINK_GBPS_PER_LINK * 2 if links and max(links) > 0 else None


def means_text(signals: dict) -> str:
    """The measured window means on one line: ``memory_bandwidth_util=0.41, ...``."""
    return ", ".join(f"{k}={v:g}" for k, v in signals.items() if v is not None) or "none measured"


def answer_lines(answer: dict) -> list[str]:
    """diagnose.yml's printed answer, one line per item: the job and window, the means, then the causes most
    likely first with their fixes, or HEALTHY, or NO DATA."""
    lines = [f"Is training slow? {answer.get('job')} on {answer.get('where')} ({answer.get('platform')}), "
             f"{answer.get('window')}", f"window means: {means_text(answer.get('signals') or {})}"]
    if answer.get("verdict") == "no data":
        lines.append("NO DATA: none of the job's GPUs was busy in the window (" + " or ".join(answer.get("selectors")
                     or []) + "). Check the window, the job's name or diagnose_gpus")
    for rank, cause in enumerate(answer.get("causes") or [], 1):
        lines += [f"{rank}. {cause['cause']}: {cause['summary']}", f"   fix: {cause['fix']}"]
    if answer.get("verdict") == "healthy":
        missing = answer.get("not_measured") or []
        note = f" (not measured: {', '.join(missing)})" if missing else ""
        lines.append("HEALTHY: no signal past its threshold" + note)
    return lines


def pcie_gbps(generation) -> float:
    """One direction of an x16 link of PCIe ``generation`` (validate.PCIE_X16_GBPS)."""
    try:
        return PCIE_X16_GBPS[int(generation)]
    except (KeyError, TypeError, ValueError) as exc:
        raise SlowdownInputError(f"validate_pcie_gen {generation!r} is not one of {sorted(PCIE_X16_GBPS)}. Fix: the "
                                 "GPUs' PCIe generation, or diagnose_pcie_gbps (GB/s, one direction)") from exc


def utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


ROLE_SETTINGS = {"lookback_s": ("diagnose", "diagnose_lookback_s"), "rate_window": ("diagnose", "diagnose_rate_window"),
                 "pcie_gen": ("validate", "validate_pcie_gen")}
OPTIONS = {"job": "", "window": "", "gpus": None, "members": None, "namespace": "", "hosts": None, "now": 0.0,
           "pcie_gbps": None, "nvlink_peak_gbps": None, "topologies": None, **dict.fromkeys(ROLE_SETTINGS)}


def build(platform: str, options: dict) -> dict:
    """The filter slowdown_queries: the window (``window``, else the last ``lookback_s`` before ``now``), the job's
    selectors, the capacities (``pcie_gbps``, else (0 or None) from ``pcie_gen``; ``nvlink_peak_gbps``, else from
    ``topologies``, else NVLink is not judged) and the queries; a ROLE_SETTINGS option left out: its role's default."""
    o = {**OPTIONS, **options}
    o.update({key: role_defaults(role)[name] for key, (role, name) in ROLE_SETTINGS.items() if o[key] is None})
    now = float(o["now"])
    span = parse_window(o["window"] or f"{now - float(o['lookback_s'])}/{now}", now)
    sels = selectors(platform, str(o["job"] or ""), o["gpus"], o["members"], str(o["namespace"] or ""),
                     list(o["hosts"] or []))
    pcie = float(o["pcie_gbps"]) if o["pcie_gbps"] not in (None, "", 0) else pcie_gbps(o["pcie_gen"])
    peak = o["nvlink_peak_gbps"]
    if peak in (None, "", 0):
        peak = max((p for p in map(nvlink_peak_gbps, o["topologies"] or []) if p), default=None)
    known = peak is not None
    return {**span, "start_utc": utc(span["start"]), "end_utc": utc(span["end"]), "selectors": sels,
            "pcie_gbps": pcie, "nvlink_peak_gbps": float(peak) if known else None, "nvlink_capacity_known": known,
            "queries": queries(sels, pcie, float(peak) if known else 1.0, str(o["rate_window"]))}
