# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The "is training slow?" rule over a job's window means, controller-side and pure. The signals, the causes with
their thresholds (``THRESHOLDS``, each overridable) and their order when several hold (``order``) are described once,
in docs/operations.md, section "Is training slow?".
"""

from __future__ import annotations

import math
from numbers import Real

THRESHOLDS = {
    "memory_bandwidth_util_min": 0.60,  # input_bound when memory_bandwidth_util < this
    "nvlink_util_min": 0.80,  # topology when gpu_count >= 2 and nvlink_util < this
    "gpu_temp_c_max": 80.0,  # thermal when gpu_temp_c > this ...
    "throttle_thermal_max": 0.10,  # ... or throttle_thermal > this
    "pcie_util_min": 0.70,  # pcie_bound when pcie_util >= this ...
    "pcie_sm_active_max": 0.50,  # ... and sm_active < this
}
SIGNALS = ("memory_bandwidth_util", "nvlink_util", "gpu_temp_c", "pcie_util", "sm_active", "gpu_count",
           "throttle_thermal")
FRACTIONS = ("memory_bandwidth_util", "nvlink_util", "pcie_util", "sm_active", "throttle_thermal")
MULTI_GPU = 2  # NVLink is judged from this many GPUs on

FIXES = {
    "input_bound": (
        "feed the GPUs faster: more data-loader workers (num_workers near the CPU cores per GPU), pin_memory=True "
        "and prefetching, the dataset on local NVMe or in the page cache instead of network storage, decoding and "
        "augmentation off the critical path (DALI or pre-processed shards); check host iowait and disk reads on the "
        "training-health dashboard"),
    "topology": (
        "keep the job's GPUs on one NVLink domain: check `nvidia-smi topo -m` (the job's GPUs should be NV# to each "
        "other, not PHB/SYS), Fabric Manager on NVSwitch hosts, that NCCL_P2P_DISABLE/NCCL_P2P_LEVEL do not force "
        "the PCIe path, and NCCL_DEBUG=INFO shows P2P/NVLS; on Kubernetes use the kubelet's topology manager "
        "(single-numa-node) so a pod gets GPUs that share links"),
    "thermal": (
        "cool the GPUs: check fans, airflow and inlet temperature (DCGM_FI_DEV_GPU_TEMP on the dashboard, "
        "nvidia-smi -q -d PERFORMANCE for the thermal clock-event reasons), blanking panels and the data-centre "
        "cooling; drain the node while it throttles"),
    "pcie_bound": (
        "move fewer bytes over PCIe per step: keep the dataset or its preprocessed tensors on the GPU, larger "
        "batches (more work per byte copied), pin_memory=True with non_blocking copies, fewer host<->device "
        "synchronisations (.item(), .cpu() in the loop); check the link runs at its full generation and width "
        "(nvidia-smi -q -d PCIE)"),
}


class SlowdownInputError(ValueError):
    """A signal or threshold that is not usable; the message names it, the value, what is allowed and the fix."""


def check_signals(signals: dict) -> dict:
    """The window means (slowdown_query.window_means: a number each, None where unmeasured), refused where a
    fraction is above 1."""
    out = {name: signals.get(name) for name in SIGNALS}
    for name in FRACTIONS:
        if out[name] is not None and out[name] > 1.0:
            raise SlowdownInputError(
                f"signal {name} is {out[name]:.3f}, above 1 (100% of capacity): the capacity it was divided by is "
                "too low. Fix: set the link capacity (diagnose_pcie_gbps, diagnose_nvlink_peak_gbps) to the "
                "hardware's real figure")
    return out


def check_thresholds(overrides: dict | None) -> dict:
    """THRESHOLDS with the overrides (diagnose_thresholds, a dict by its spec) applied; unknown names and anything
    but a number >= 0 are refused."""
    unknown = sorted(set(overrides or {}) - set(THRESHOLDS))
    if unknown:
        raise SlowdownInputError(f"training_slowdown: unknown threshold(s) {unknown}; allowed: {sorted(THRESHOLDS)}. "
                                 "Fix: correct the name")
    merged = dict(THRESHOLDS)
    for name, value in (overrides or {}).items():
        if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value) or value < 0:
            raise SlowdownInputError(f"threshold {name} is {value!r}; expected a number >= 0. Fix: set a number, or "
                                     f"remove it for the default ({THRESHOLDS[name]})")
        merged[name] = float(value)
    return merged


def _shortfall(value: float, threshold: float) -> float:
    return round((threshold - value) / threshold, 4) if threshold > 0 else 0.0


def _found(cause: str, evidence: dict, summary: str) -> dict:
    return {"cause": cause, "evidence": evidence, "summary": summary, "fix": FIXES[cause]}


def _causes(s: dict, t: dict) -> dict[str, dict]:
    found: dict[str, dict] = {}
    mem, nvl = s["memory_bandwidth_util"], s["nvlink_util"]
    if mem is not None and mem < t["memory_bandwidth_util_min"]:
        found["input_bound"] = _found("input_bound", {
            "memory_bandwidth_util": mem, "threshold": t["memory_bandwidth_util_min"],
            "shortfall": _shortfall(mem, t["memory_bandwidth_util_min"])},
            f"memory bandwidth {mem:.0%} < {t['memory_bandwidth_util_min']:.0%}: the GPUs wait for data")
    # Multi-GPU: gpu_count >= 2, or, when the count is unknown, an NVLink figure at all (null means single-GPU).
    multi = s["gpu_count"] >= MULTI_GPU if s["gpu_count"] is not None else nvl is not None
    if nvl is not None and multi and nvl < t["nvlink_util_min"]:
        found["topology"] = _found("topology", {
            "nvlink_util": nvl, "threshold": t["nvlink_util_min"], "gpu_count": s["gpu_count"],
            "shortfall": _shortfall(nvl, t["nvlink_util_min"])},
            f"NVLink {nvl:.0%} < {t['nvlink_util_min']:.0%} across {s['gpu_count'] or 'several'} GPUs: "
            "the GPUs talk over a slower path")
    temp, throttle = s["gpu_temp_c"], s["throttle_thermal"]
    hot = temp is not None and temp > t["gpu_temp_c_max"]
    throttled = throttle is not None and throttle > t["throttle_thermal_max"]
    if hot or throttled:
        why = [f"{temp:.0f} C > {t['gpu_temp_c_max']:.0f} C" if hot else "",
               f"thermally throttled {throttle:.0%} of the window" if throttled else ""]
        found["thermal"] = _found("thermal", {
            "gpu_temp_c": temp, "gpu_temp_c_max": t["gpu_temp_c_max"], "throttle_thermal": throttle,
            "throttle_thermal_max": t["throttle_thermal_max"]},
            "the GPUs throttle their clocks: " + ", ".join(w for w in why if w))
    pcie, sm = s["pcie_util"], s["sm_active"]
    if pcie is not None and sm is not None and pcie >= t["pcie_util_min"] and sm < t["pcie_sm_active_max"]:
        found["pcie_bound"] = _found("pcie_bound", {
            "pcie_util": pcie, "pcie_util_min": t["pcie_util_min"], "sm_active": sm,
            "sm_active_max": t["pcie_sm_active_max"]},
            f"PCIe {pcie:.0%} >= {t['pcie_util_min']:.0%} of the link while SMs are active {sm:.0%} "
            f"< {t['pcie_sm_active_max']:.0%}: host<->GPU copies set the pace")
    return found


def order(found: dict[str, dict]) -> list[dict]:
    """The causes found, most likely first (docs/operations.md: the order when several hold)."""
    ranked: list[str] = ["thermal"] if "thermal" in found else []
    rest = [c for c in ("topology", "pcie_bound", "input_bound") if c in found]
    if "pcie_bound" not in found and {"topology", "input_bound"} <= set(found):
        topo, inp = found["topology"]["evidence"]["shortfall"], found["input_bound"]["evidence"]["shortfall"]
        rest = ["input_bound", "topology"] if inp > topo else ["topology", "input_bound"]
    return [found[c] for c in ranked + rest]


def training_slowdown(signals, thresholds=None) -> list[dict]:
    """Causes of a slow job, most likely first; [] when the job looks healthy (or nothing was measured).
    Each: {cause, evidence (numbers), summary, fix}."""
    return order(_causes(check_signals(signals), check_thresholds(thresholds)))
