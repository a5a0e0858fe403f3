# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""DCGM diagnostics: ``dcgmi diag -r <level> -j`` where ``dcgmi`` is installed, its JSON read into flat results.

The JSON is the shape DCGM's validation suite writes (NVIDIA/DCGM, nvvs: ``{"DCGM GPU Diagnostic":
{"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids", "status", "warnings", "info"}]}]}],
"version"}}``); ``gpu_ids`` is a GPU id (int or string) or, for the deployment checks, a comma-separated list;
``status`` is PASS, FAIL, WARN or SKIP in any case. Later DCGM releases name the root ``DCGM Diagnostic`` and may put
``tests`` at its top level, and warnings may be ``{"warning": ..., "error_id": ...}`` objects: both are read too.
``dcgmi`` exits non-zero when a test fails and still prints the JSON; text before the first ``{`` (DCGM prints
warnings there) is skipped.
"""

from __future__ import annotations

import json

from ansible_collections.gpuops.cluster.plugins.module_utils.text import cut, one_line

ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
ABSENT = "dcgmi is not installed"  # the reason's start: health_return reads it as "not run", never as failed
STATUS_NAMES = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip"}


def _gpu_ids(value) -> list:
    if isinstance(value, int):
        return [value]
    return [int(part) for part in str(value or "").replace(" ", "").split(",") if part.isdigit()]


def _texts(values) -> list:
    found = []
    for value in values if isinstance(values, list) else []:
        text = value
        if isinstance(value, dict):
            text = value.get("warning") or value.get("message") or json.dumps(value, sort_keys=True)
        if text:
            found.append(str(text))
    return found


def _tests(root: dict) -> list:
    """``[(category, test)]`` from ``test_categories`` and from a top-level ``tests`` list."""
    pairs = []
    for category in root.get("test_categories") or []:
        if isinstance(category, dict):
            pairs.extend((category.get("category"), test) for test in category.get("tests") or [])
    pairs.extend((None, test) for test in root.get("tests") or [])
    return [(category, test) for category, test in pairs if isinstance(test, dict)]


def parse_dcgm_json(text: str) -> dict:
    """``{version, results}`` of ``dcgmi diag -j`` output; each result is ``{category, test, gpus, status,
    warnings, info}`` with ``status`` one of pass|fail|warn|skip (other words kept lower-cased).
    Raises ValueError naming what was found when the text is not that JSON."""
    start = (text or "").find("{")
    if start < 0:
        raise ValueError(f"no JSON object in the output: {one_line(text)}")
    document = json.loads(text[start : text.rfind("}") + 1])
    root = next((document[key] for key in ROOT_KEYS if isinstance(document.get(key), dict)), None)
    if root is None:
        raise ValueError(f"none of {list(ROOT_KEYS)} at the top of the JSON (keys: {sorted(document)})")
    results = []
    for category, test in _tests(root):
        for result in test.get("results") or []:
            if not isinstance(result, dict):
                continue
            status = str(result.get("status") or "").strip().lower()
            ids = result.get("gpu_ids", result.get("gpu_id", result.get("entity_id")))
            results.append(
                {
                    "category": category,
                    "test": test.get("name"),
                    "gpus": _gpu_ids(ids),
                    "status": STATUS_NAMES.get(status, status),
                    "warnings": _texts(result.get("warnings")),
                    "info": _texts(result.get("info")),
                }
            )
    return {"version": root.get("version"), "results": results}


def run_dcgm(level: int, run, which) -> dict:
    """``{ran, level, version, results, reason}``: ran is false (with the reason) when level is 0, ``dcgmi`` is
    absent, or it printed no diagnostic JSON (for example when nv-hostengine is not running)."""
    outcome = {"ran": False, "level": level, "version": None, "results": []}
    if level == 0:
        return {**outcome, "reason": "dcgm_level is 0: diagnostics not asked for"}
    binary = which("dcgmi")
    if not binary:
        return {**outcome, "reason": f"{ABSENT} (package datacenter-gpu-manager): no DCGM diagnostics"}
    rc, out, err = run([binary, "diag", "-r", str(level), "-j"])
    try:
        parsed = parse_dcgm_json(out)
    except ValueError as problem:
        return {**outcome, "reason": f"`dcgmi diag -r {level} -j` exited {rc} without diagnostic JSON ({problem}); "
                f"is nv-hostengine running? Output: {cut(one_line((out or '') + ' ' + (err or '')))}"}
    return {**outcome, "ran": True, **parsed, "reason": f"`dcgmi diag -r {level} -j` exited {rc}"}
