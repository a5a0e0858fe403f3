# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Per-stage results and the closing summary of scripts/run-tests.sh, described in docs/testing.md ("How the stages
run", "build/test-summary.json"):

    python3 scripts/test_summary.py counts JUNIT...      "passed failed skipped" over the JUnit files
    python3 scripts/test_summary.py stage NAME --rc N --seconds S --passed P --failed F --lane L
                                    [--log FILE] [--junit FILE]... [--failure TEXT]...      build/results/NAME.json
    python3 scripts/test_summary.py probe                the speed probe, as JSON
    python3 scripts/test_summary.py summary --command C --started EPOCH --load-start L [--cpu-start "CPU LINE"]
                                    [--probe-start JSON] --out FILE [--lane STAGE,STAGE...]... STAGE...
        FILE (build/test-summary.json), then the closing lines; exits 1 when anything failed or nothing ran.

Standard library only: it runs before and without the virtualenv's packages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _meta import run_stamp  # the run's stamp (commit, time, load, cores), that of every recorded figure

RESULTS = Path("build") / "results"


def junit(paths: list[str]) -> tuple[int, int, list[dict[str, str]]]:
    """(passed, failed, skips) over the test cases of JUnit files: a case with a <failure> or an <error> failed, one
    with <skipped> is a skip, {"test": "classname::name", "reason": its message}. A missing file counts nothing."""
    passed = failed = 0
    skips = []
    for path in paths:
        try:
            cases = ET.parse(path).getroot().iter("testcase")
        except (OSError, ET.ParseError):
            continue
        for case in cases:
            skipped = case.find("skipped")
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif skipped is not None:
                test = "::".join(part for part in (case.get("classname", ""), case.get("name", "")) if part)
                reason = (skipped.get("message") or (skipped.text or "").strip() or "no reason given").strip()
                skips.append({"test": test, "reason": reason.removeprefix("Skipped: ")})
            else:
                passed += 1
    return passed, failed, skips


def stage_record(args: argparse.Namespace) -> dict:
    passed, failed, skips = junit(args.junit)
    failures = list(args.failure)
    if is_ci() and args.junit and passed == 0 and args.rc == 0 and args.failed + failed == 0:
        # A stage skipped whole (every test case skipped, or none ran: a Molecule verify that found no tests writes
        # no JUnit) tested nothing; under CI=true that fails, as a skip does (tests/ci_skips.py).
        failures.append(f"{args.name}: no test case passed ({len(skips)} skipped; JUnit: {', '.join(args.junit)}): "
                        "under CI=true a stage skipped whole fails")
        failed += 1
    return {
        "passed": args.passed + passed,
        "failed": args.failed + failed,
        "skipped": len(skips),
        "skips": skips,
        "seconds": args.seconds,
        "rc": args.rc,
        "lane": args.lane,
        "log": args.log,
        "failures": failures,
    }


def unfinished(name: str) -> dict:
    why = f"{name}: the stage left no result (build/results/{name}.json): it did not finish"
    return {"passed": 0, "failed": 1, "skipped": 0, "skips": [], "seconds": None, "rc": None, "lane": None,
            "log": None, "failures": [why]}


CPU_TICK = 100  # USER_HZ: /proc/stat counts in 1/100 s on Linux
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_line() -> str | None:
    """/proc/stat's first line (the machine's CPU time since boot, in ticks), or None where there is none."""
    try:
        return Path("/proc/stat").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def cpu_use(start: str | None, end: str | None) -> dict | None:
    """The machine's CPU seconds between two /proc/stat first lines: busy (user, nice, system, irq, softirq),
    idle, iowait and steal, and busy as a share of all (1.0: every core busy the whole run); None when either line
    is missing or not a cpu line. A run that leaves cores idle has stages that wait rather than compute."""
    fields = []
    for line in (start, end):
        parts = (line or "").split()
        values = parts[1:len(_CPU_FIELDS) + 1]
        if parts[:1] != ["cpu"] or len(values) < len(_CPU_FIELDS) or not all(x.isdigit() for x in values):
            return None
        fields.append([int(x) for x in values])
    user, nice, system, idle, iowait, irq, softirq, steal = (b - a for a, b in zip(*fields))
    busy = user + nice + system + irq + softirq
    total = busy + idle + iowait + steal
    return {"busy_seconds": round(busy / CPU_TICK), "idle_seconds": round(idle / CPU_TICK),
            "iowait_seconds": round(iowait / CPU_TICK), "steal_seconds": round(steal / CPU_TICK),
            "busy_share": round(busy / total, 3) if total else None}


PROBE_WORKLOAD = "json round trips of a 2000-key mapping, 40 times, and a 300000-step integer loop; best of 3"


def _probe_work() -> int:
    data = {f"k{i}": [i, str(i), {"x": i}] for i in range(2000)}
    total = sum(len(json.loads(json.dumps(data))) for _round in range(40))
    return total + sum(i * i % 7 for i in range(300_000))


def _probe_once() -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    _probe_work()
    return time.perf_counter() - wall, time.process_time() - cpu


def probe() -> dict:
    """The speed probe: PROBE_WORKLOAD timed on one core, the fastest of three runs (wall and CPU seconds). Taken
    when a run starts and when it ends, it says how fast this machine was then: the same suite's wall time moves
    with it (a shared host's speed changes by the hour), so two recorded times compare only beside their probes."""
    wall, cpu = min(_probe_once() for _run in range(3))
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3)}


def _probe_arg(text: str | None) -> dict | None:
    """A probe's JSON as `probe` printed it, or None (missing or not that shape)."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return None
    keys = ("wall_seconds", "cpu_seconds")
    return value if isinstance(value, dict) and all(isinstance(value.get(k), (int, float)) for k in keys) else None


def is_ci() -> bool:
    """CI=true (also 1 or yes, any case), as CI services set it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def summary(args: argparse.Namespace) -> dict:
    stages = {}
    for name in args.stages:
        path = RESULTS / f"{name}.json"
        try:
            stages[name] = json.loads(path.read_text())
        except (OSError, ValueError):
            stages[name] = unfinished(name)
    ended = time.time()
    return {
        **run_stamp(args.command, args.started, ended, args.load_start),
        "ci": is_ci(),
        # Set by the Makefile when make began (before its set-up): the wall time including the set-up (venv,
        # images, host packages) and what the set-up found (cold / partial / warm); null when run without make.
        "make_seconds": round(ended - int(os.environ["GPUOPS_MAKE_STARTED"]))
        if os.environ.get("GPUOPS_MAKE_STARTED", "").isdigit() else None,
        "setup_found": os.environ.get("GPUOPS_MAKE_FOUND") or None,
        "cpu": cpu_use(args.cpu_start, cpu_line()),
        "speed_probe": {"workload": PROBE_WORKLOAD, "start": _probe_arg(args.probe_start), "end": probe()},
        "lanes": [lane.split(",") for lane in args.lane],
        "passed": sum(s["passed"] for s in stages.values()),
        "failed": sum(s["failed"] for s in stages.values()),
        "skipped": sum(s["skipped"] for s in stages.values()),
        "stages": stages,
    }


def skip_groups(stages: dict) -> list[tuple[str, str, str]]:
    """(stage, reason, which) per stage and skip reason, in the stages' order: which is the one test skipped for
    that reason, or "N tests" (None for a gpu-check step skipped whole). The closing lines print them;
    bench/figures.py quotes the recorded run's and the recorded gpu-check's."""
    groups = []
    for name, stage in stages.items():
        reasons: dict[str, list[str]] = {}
        for skip in stage.get("skips", []):
            reasons.setdefault(skip["reason"], []).append(skip["test"])
        groups += [(name, reason, tests[0] if len(tests) == 1 else f"{len(tests)} tests")
                   for reason, tests in reasons.items()]
    return groups


def closing_lines(result: dict) -> list[str]:
    """The failures, the skips per stage (one line per reason) and the summary line, as printed."""
    lines = [f"failed: {text}" for stage in result["stages"].values() for text in stage["failures"]]
    lines += [f"skipped: {name}: {reason} ({which})" for name, reason, which in skip_groups(result["stages"])]
    if result["passed"] + result["failed"] == 0:
        lines.append("nothing ran: no test passed or failed")
    lines.append(f"summary: {result['passed']} passed, {result['failed']} failed, {result['skipped']} skipped")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="test_summary.py")
    sub = parser.add_subparsers(dest="what", required=True)
    counts = sub.add_parser("counts")
    counts.add_argument("junit", nargs="*")
    stage = sub.add_parser("stage")
    stage.add_argument("name")
    for option in ("--rc", "--seconds", "--passed", "--failed", "--lane"):
        stage.add_argument(option, type=int, required=True)
    stage.add_argument("--log")
    stage.add_argument("--junit", action="append", default=[])
    stage.add_argument("--failure", action="append", default=[])
    sub.add_parser("probe")
    total = sub.add_parser("summary")
    total.add_argument("--command", required=True)
    total.add_argument("--started", type=float, required=True)
    total.add_argument("--load-start", type=float)
    total.add_argument("--cpu-start", help="/proc/stat's first line when the run began")
    total.add_argument("--probe-start", help="the JSON `probe` printed when the run began")
    total.add_argument("--out", required=True)
    total.add_argument("--lane", action="append", default=[])
    total.add_argument("stages", nargs="+")
    args = parser.parse_args(argv)

    if args.what == "counts":
        passed, failed, skips = junit(args.junit)
        print(passed, failed, len(skips))
        return 0
    if args.what == "probe":
        print(json.dumps(probe()))
        return 0
    if args.what == "stage":
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{args.name}.json").write_text(json.dumps(stage_record(args), indent=2) + "\n")
        return 0
    result = summary(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(closing_lines(result)))
    return 0 if result["failed"] == 0 and result["passed"] + result["failed"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
