# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Return to service (issue 38 §3): the validation run a node or GPU passes before health.yml gives it back,
whether through health_release or after its reset or reboot (docs/operations.md, "6. Return to service": what it runs
and how each check is judged). Pure, controller-side; roles/health/tasks/step.yml runs the step ``validate`` and
health_steps.step_result hands what ran to ``validation``. Any FAIL keeps the node out; WARN, UNKNOWN (no published
figure) and NOT_RUN are reported, never called PASS, and do not hold the node.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_dcgm import ABSENT as DCGM_ABSENT
from ansible_collections.gpuops.cluster.plugins.plugin_utils import thresholds

NOT_RUN = "NOT_RUN"
ABSENT_RC = 127  # sh: command not found (step.yml runs a benchmark only where its tool is on the PATH)


def settings_problems(overrides: Any) -> list[str]:
    """What is wrong with health_return_thresholds (its level's choices are the argument spec's)."""
    if not isinstance(overrides, dict):
        return [f"health_return_thresholds is {overrides!r}; expected a mapping check -> number. Fix: e.g. "
                "{nccl_busbw_gbps: 150}, or leave it out"]
    problems = []
    for check, value in overrides.items():
        if check not in thresholds.CHECKS:
            problems.append(f"health_return_thresholds names {check!r}, which is no check; expected one of "
                            f"{', '.join(thresholds.CHECKS)} (docs/thresholds.md). Fix: spell it as the table does")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"health_return_thresholds[{check!r}] is {value!r}; expected a number "
                            f"({thresholds.CHECKS[check][1]}). Fix: e.g. {check}: 0")
    return problems


def bench_runs(gpu_count: int) -> list[dict]:
    """The benchmarks of a validate step, [{tool, argv}]; none on a node whose sweep read no GPU (``gpu_count``).
    step.yml runs each one only where the tool is on the node's PATH (rc 127 where it is not), and ends
    all_reduce_perf's -g with the validation sweep's GPU count: the GPUs the node has after its remedy, one the
    plan's sweep lost (Xid 79, no UUID) included."""
    if gpu_count <= 0:
        return []
    # as Azure's NHC checks: all_reduce_perf up to 16G over every GPU; nvbandwidth's three copy-engine testcases
    return [{"tool": "all_reduce_perf", "argv": ["all_reduce_perf", "-b", "8G", "-e", "16G", "-f", "2", "-g"]},
            {"tool": "nvbandwidth", "argv": ["nvbandwidth", "-t", thresholds.H2D, thresholds.D2H, thresholds.P2P]}]


def _check(name: str, status: str, detail: str, **extra: Any) -> dict:
    return {"check": name, "status": status, "detail": detail, **extra}


def _gpu_health(sweep: dict, gpus: list[str]) -> dict:
    """Read, no GPU failed, each GPU going back healthy; DCGM's own findings are the dcgm_diag check's."""
    if not sweep.get("read_ok"):
        why = str(sweep.get("msg") or "read_ok false").strip()[:300]
        return _check("gpu_health", "FAIL", f"the sweep could not read the GPUs ({why})")
    known = {str(g.get("index")) for g in sweep.get("gpus") or []}
    missing = [g for g in gpus if g not in known]
    blocking = [f for f in sweep.get("findings") or [] if f.get("check") != "dcgm_diag" and (
        f.get("severity") == "failed" or (f.get("gpu") is not None and str(f.get("gpu")) in gpus))]
    if missing or blocking:
        said = [f"GPU {g} not found" for g in missing]
        said += [f"GPU {f.get('gpu')}: {f.get('check')} {f.get('severity')} ({str(f.get('evidence'))[:160]})"
                 for f in blocking]
        return _check("gpu_health", "FAIL", "; ".join(said))
    back = f"GPU(s) {', '.join(gpus)} healthy" if gpus else "no GPU failed"
    return _check("gpu_health", "PASS", f"{back}, verdict {sweep.get('verdict')}")


def _dcgm(sweep: dict, level: int) -> dict:
    """The DCGM diag at ``level``: FAIL on any failed test, WARN on a warning, NOT_RUN where dcgmi is absent."""
    dcgm = sweep.get("dcgm") or {}
    if level == 0:
        return _check("dcgm_diag", NOT_RUN, "health_return_dcgm_level is 0: no DCGM diag asked for")
    if not dcgm.get("ran"):
        reason = str(dcgm.get("reason") or "no result")
        if reason.startswith(DCGM_ABSENT):
            return _check("dcgm_diag", NOT_RUN, f"dcgmi is not installed on this node: DCGM diag level {level} was "
                          "not run (not counted as passed)")
        return _check("dcgm_diag", "FAIL", f"DCGM diag level {level} gave no result: {reason[:300]}")
    results = dcgm.get("results") or []
    worst = [r for r in results if r.get("status") == "fail"] or [r for r in results if r.get("status") == "warn"]
    if not worst:
        return _check("dcgm_diag", "PASS", f"DCGM {dcgm.get('version')} diag level {level}: {len(results)} results, "
                      "none failed")
    status = "FAIL" if worst[0]["status"] == "fail" else "WARN"
    said = "; ".join(f"{r.get('test')} on GPU(s) {','.join(str(g) for g in r.get('gpus') or []) or '?'}"
                     + (f" ({'; '.join(r.get('warnings') or [])[:160]})" if r.get("warnings") else "") for r in worst)
    return _check("dcgm_diag", status, f"DCGM diag level {level} {status}: {said}")


def _output(run: Any) -> str | None:
    """A benchmark's output, None where it did not run (the task was skipped, or rc 127: the tool is absent)."""
    if not isinstance(run, dict) or run.get("skipped") or run.get("rc", ABSENT_RC) == ABSENT_RC:
        return None
    return str(run.get("stdout") or "")


def _thresholds(sweep: dict, nccl: Any, nvbandwidth: Any, overrides: dict) -> dict:
    gpus = [g for g in sweep.get("gpus") or [] if isinstance(g, dict)]
    texts = {"all_reduce_perf": _output(nccl), "nvbandwidth": _output(nvbandwidth)}
    measured = thresholds.measure(nccl=texts["all_reduce_perf"], nvbandwidth=texts["nvbandwidth"], health=gpus)
    name = next((g.get("name") for g in gpus if g.get("name")), "unknown GPU")
    verdict = thresholds.judge(name, measured, overrides=overrides, gpu_count=len(gpus))
    absent = [tool for tool, text in texts.items() if text is None]
    said = [f"{c['check']} {c['status']}: {c['detail']}" for c in verdict["checks"]]
    said += [f"{', '.join(absent)} not on the node: not run"] if absent else []
    return _check("thresholds", verdict["status"], f"{verdict['model'] or name}: " + "; ".join(said),
                  checks=verdict["checks"])


def validation(sweep: dict, gpus: Any = None, dcgm_level: int = 2, nccl: Any = None, nvbandwidth: Any = None,
               overrides: dict | None = None) -> dict:
    """The validation of one node: {ok, checks: [{check, status, detail}], failed: [check], summary}.

    ``sweep``: the gpu_health result run with dcgm_level; ``gpus``: the GPU indexes going back; ``nccl`` and
    ``nvbandwidth``: the registered results of all_reduce_perf and nvbandwidth (skipped where absent)."""
    back = [str(g) for g in gpus or []]
    checks = [_gpu_health(sweep, back), _dcgm(sweep, int(dcgm_level))]
    checks.append(_thresholds(sweep, nccl, nvbandwidth, overrides or {}) if sweep.get("read_ok") else
                  _check("thresholds", NOT_RUN, "the sweep could not read the GPUs: nothing to judge"))
    failed = [c["check"] for c in checks if c["status"] == "FAIL"]
    said = "; ".join(f"{c['check']} {c['status']}" + ("" if c["status"] == "PASS" else f" ({c['detail'][:300]})")
                     for c in checks if c["check"] in failed or not failed)
    summary = (f"validation failed at {', '.join(failed)}: {said}; it stays out of service" if failed else
               f"validation: no check failed ({said})")
    return {"ok": not failed, "checks": checks, "failed": failed, "summary": summary}
