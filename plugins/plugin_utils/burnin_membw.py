# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""burnin.yml's GPU memory-bandwidth test: NVIDIA nvbandwidth's ``device_local_copy`` judged against the HBM
bandwidth of the GPU model (pure functions; the role runs the binary, roles/burnin/tasks/node.yml).

``device_local_copy`` (nvbandwidth ``testcases_ce.cpp``, ``DeviceLocalCopy``) copies one buffer to another on the
same GPU with ``cuMemcpyAsync`` and prints, per GPU, bytes copied / time in a one-row matrix::

    Running device_local_copy.
    memcpy local GPU(column) bandwidth (GB/s)
               0         1
     0   1116.30   1116.30

    SUM device_local_copy 2232.60

Each byte copied is read once and written once, so the memory traffic is **twice** the printed figure (the
nvbandwidth maintainers, issue 48: "1.1 TB/s represents the combined read+write bandwidth ... effective memory
bandwidth usage ~2.2 TB/s"). The judge compares that traffic with the model's HBM peak: a GPU below
``floor`` (0.7 by default) of it fails the node. No nvbandwidth on the node is ``skipped``, never ``ok``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils.diagnose import ran

TESTCASE = "device_local_copy"
# A GPU whose copy traffic is below this share of its HBM peak fails (a healthy H100 SXM reaches ~0.9:
# 2 x 1519 GB/s of 3350, fixtures/membw; the CUDA samples' bandwidthTest D2D reaches ~0.74 on A100 40GB).
MEMBW_FLOOR = 0.7

# The GPU models, one home for the collection (gpu_models.yml: NVML name pattern, HBM peak and its vendor source, the
# acceptance thresholds of thresholds.py), first match wins. Models not there (H20, H800, GH200, L40S, ...): the
# report says so; set burnin_membw_expected_gbps.
GPU_MODELS_FILE = Path(__file__).resolve().with_name("gpu_models.yml")
GPU_MODELS: dict = yaml.safe_load(GPU_MODELS_FILE.read_text(encoding="utf-8"))

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_DEVICE = re.compile(r"^Device (\d+): (.+?) \(([0-9A-Fa-f:.]+)\)\s*$")
_RUNNING = re.compile(r"^Running (\S+?)\.\s*$")
_TITLE = re.compile(r"^\S.*\((?:GB/s|ns)\)\s*$")
_HEADER = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
_ROW = re.compile(r"^\s*(\d+)((?:\s+(?:-?\d+(?:\.\d+)?|N/A))+)\s*$")
_SUM = re.compile(r"^SUM (\S+) (-?\d+(?:\.\d+)?)\s*$")
_ERROR = re.compile(r"ASSERT|ERROR|[Ee]rror|Invalid value|[Ff]ailed|[Aa]bort")


def gpu_model(name: str) -> dict | None:
    """The row of gpu_models.yml for a GPU by its NVML / nvidia-smi name (first match); None for a model not there."""
    return next((row for row in GPU_MODELS["models"] if re.search(row["match"], name or "")), None)


def expected_membw(name: str) -> dict | None:
    """{"model", "peak_gbps"} of a GPU by its NVML / nvidia-smi name, or None for a model not in the table."""
    row = gpu_model(name)
    return {"model": row["model"], "peak_gbps": float(row["hbm_peak_gbps"])} if row else None


def parse_nvbandwidth(text: str) -> dict:
    """nvbandwidth's text output: {"version", "devices": {index: name}, "results": {testcase: {"title",
    "values": [row-major, None for N/A], "sum"}}, "errors": [lines]}. A matrix printed without its ``Running``
    line (an excerpt) is ``device_local_copy`` when its title is the local-copy one."""
    out: dict = {"version": None, "devices": {}, "results": {}, "errors": []}
    current, block, expect_header = None, None, False
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if m := _VERSION.match(line):
            out["version"] = m.group(1)
        elif m := _DEVICE.match(line):
            out["devices"][int(m.group(1))] = m.group(2).strip()
        elif m := _RUNNING.match(line):
            current, block = m.group(1), None
        elif m := _SUM.match(line):
            out["results"].setdefault(m.group(1), {"title": "", "values": [], "sum": None})["sum"] = float(m.group(2))
            current, block = None, None
        elif _TITLE.match(line):
            name = current or (TESTCASE if line.startswith("memcpy local") else "unknown")
            block = out["results"].setdefault(name, {"title": line.strip(), "values": [], "sum": None})
            block["title"], expect_header = line.strip(), True
        elif block is not None and expect_header and _HEADER.match(line):
            expect_header = False
        elif block is not None and (m := _ROW.match(line)):
            block["values"] += [None if v == "N/A" else float(v) for v in m.group(2).split()]
        elif _ERROR.search(line):
            out["errors"].append(line.strip())
    return out


def judge_membw(node: str, result: dict | None, gpu_names: list[str], options: dict | None = None) -> dict:
    """One node's nvbandwidth ``device_local_copy`` run against its GPUs' HBM peak.

    result: the registered command result ({rc, stdout, stderr}), or one with ``skipped`` when no nvbandwidth was
    found. gpu_names: the node's GPUs by index (gpu_facts), nvbandwidth run with CUDA_DEVICE_ORDER=PCI_BUS_ID so
    that its device numbers are these indexes. options: floor (share of the peak, default MEMBW_FLOOR),
    expected_gbps (one HBM peak for every GPU, GB/s; 0 = the model table), binary (where it was looked for).
    """
    options = options or {}
    result = result or {"skipped": True}
    floor = float(options.get("floor") or MEMBW_FLOOR)
    override = float(options.get("expected_gbps") or 0)
    row = {"node": node, "status": "skipped", "detail": "", "tool": "nvbandwidth", "testcase": TESTCASE,
           "floor": floor, "measured_gbps": None, "expected_gbps": None, "gpus": []}
    if result.get("skipped"):
        where = options.get("binary") or "nvbandwidth in PATH"
        row["detail"] = f"skipped: nvbandwidth not found ({where}; set burnin_nvbandwidth to its path)"
        return row
    rc, text = ran(result)
    parsed = parse_nvbandwidth(text)
    copies = (parsed["results"].get(TESTCASE) or {}).get("values") or []
    if rc not in (0, None) or not copies:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = (parsed["errors"] or lines or ["no output"])[-1]
        row.update(status="failed", detail=f"nvbandwidth -t {TESTCASE} gave no result (exit {rc}): {why[:200]}")
        return row
    judged = []
    for index, copy in enumerate(copies):
        name = gpu_names[index] if index < len(gpu_names) else parsed["devices"].get(index, "")
        known = expected_membw(name)
        peak = override or (known["peak_gbps"] if known else None)
        hbm = None if copy is None else round(2 * copy, 1)
        share = round(hbm / peak, 3) if peak and hbm is not None else None
        status = ("unjudged" if share is None and hbm is not None else "failed" if hbm is None
                  else "slow" if share < floor else "ok")
        judged.append({"gpu": index, "name": name, "model": known["model"] if known else None,
                       "copy_gbps": copy, "hbm_gbps": hbm, "expected_gbps": peak, "share": share, "status": status})
    row["gpus"] = judged
    measured = [g["hbm_gbps"] for g in judged if g["hbm_gbps"] is not None]
    peaks = [g["expected_gbps"] for g in judged if g["expected_gbps"]]
    row["measured_gbps"] = min(measured) if measured else None
    row["expected_gbps"] = min(peaks) if peaks else None
    source = "burnin_membw_expected_gbps" if override else "the model's HBM peak"
    bad = [g for g in judged if g["status"] in ("slow", "failed")]
    if len(copies) < len(gpu_names):
        row.update(status="failed", detail=f"nvbandwidth measured {len(copies)} of the node's {len(gpu_names)} GPUs")
    elif bad:
        listed = "; ".join(f"GPU {g['gpu']} {_gbps(g['hbm_gbps'])} of {_gbps(g['expected_gbps'])}"
                           + (f" ({g['share']:.0%})" if g["share"] is not None else "") for g in bad)
        row.update(status="failed", detail=f"memory bandwidth below {floor:.0%} of {source} (read+write = 2 x the "
                                           f"copy figure): {listed}")
    elif any(g["status"] == "unjudged" for g in judged):
        models = sorted({g["name"] or "unknown" for g in judged if g["status"] == "unjudged"})
        row.update(status="skipped", detail=f"skipped: no expected memory bandwidth for {', '.join(models)} "
                                            f"(measured {_gbps(row['measured_gbps'])} read+write); set "
                                            "burnin_membw_expected_gbps to the GPU's HBM peak")
    else:
        low = min(judged, key=lambda g: g["hbm_gbps"] / g["expected_gbps"])
        row.update(status="ok", detail=f"every GPU at {low['share']:.0%} or more of {source} "
                                       f"(lowest GPU {low['gpu']}: {_gbps(low['hbm_gbps'])} of "
                                       f"{_gbps(low['expected_gbps'])})")
    return row


def _gbps(value) -> str:
    return "?" if value is None else f"{float(value):.1f} GB/s"
