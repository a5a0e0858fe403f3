"""The one writer of bench/results.json and the ``generator`` fields of its entries (bench/README.md,
docs/performance.md); ``timed``, the one runner of a measured command; the stamp every recorded figure carries
(``commit``, ``utc``, ``load1``), also in ``run_stamp``, that of scripts/test_summary.py's and scripts/gpu_check.py's
records."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results.json"
LOAD_LIMIT_PER_CORE = 1.5
RECORD_FORMAT = 1  # of a recorded test run and gpu-check report (run_stamp); bench/figures.py keeps only this one


def timed(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, str]:
    """``argv`` run in the repository, its output kept in ``log``: (wall seconds, stdout). A failure ends the bench,
    naming the log."""
    t0 = time.perf_counter()
    run = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - t0
    log.write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv[:3])}... failed (rc {run.returncode}); log: {log}")
    return seconds, run.stdout


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def utc(epoch: float | None = None) -> str:
    """``epoch`` (default: now) as YYYY-MM-DDTHH:MM:SSZ."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def commit() -> str | None:
    """HEAD of this checkout, ``-dirty`` when a tracked file differs from it, the recorded figure files (bench/*.json,
    which one bench script writes before the next starts) aside; GPUOPS_COMMIT instead where set (a copy of the
    checkout shipped to an air-gapped host may carry no .git, or a stale one); None outside git."""
    if os.environ.get("GPUOPS_COMMIT"):
        return os.environ["GPUOPS_COMMIT"]
    try:
        head, status = (
            subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=True)
            for argv in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    changed = [line[3:] for line in status.stdout.splitlines()]
    dirty = [path for path in changed if not (path.startswith("bench/") and path.endswith(".json"))]
    return head.stdout.strip() + ("-dirty" if dirty else "")


def command(argv: list[str] | None = None) -> str:
    """The command as run: the script relative to the repository, its arguments."""
    argv = sys.argv if argv is None else argv
    return shlex.join(["python", str(shown(Path(argv[0]).resolve())), *argv[1:]])


def run_stamp(command: str, started: float, ended: float, load_start: float | None) -> dict:
    """A test run's or gpu-check's record begins so: its format, command, commit, cores, UTC start and end, whole
    seconds, the 1-minute load at the start (taken by the caller) and now."""
    return {"format": RECORD_FORMAT, "command": command, "commit": commit(), "cores": os.cpu_count(),
            "started": utc(started), "ended": utc(ended), "seconds": round(ended - started),
            "load_start": load_start, "load_end": load1()}


def load_limit(cores: int) -> float:
    return round(LOAD_LIMIT_PER_CORE * cores, 2)


def over_load(loads: list[float], cores: int) -> bool:
    return max(loads) > load_limit(cores)


def started() -> dict:
    """Call before measuring: the start time, the load then, the commit and the command (so that a checkout
    without git fails before the measurement, not after it)."""
    sha = commit()
    if sha is None:
        raise SystemExit("bench: no commit to record (not a git checkout). Fix: run in a clone, or set GPUOPS_COMMIT")
    return {"measured_at": utc(), "load_1min_before": load1(), "commit": sha, "command": command()}


def generator(start: dict, script: str, targets_gpu: bool | None, loads_during: tuple[float, ...] = ()) -> dict:
    """The generator object of an entry; ``targets_gpu``: whether the measured targets had a GPU, None where the code
    ran in-process (run.py: True when its table 4 measured this host's GPUs); ``loads_during``: other samples taken
    while measuring."""
    cores = os.cpu_count() or 1
    after = load1()
    return {
        "script": script,
        "command": start["command"],
        "commit": start["commit"],
        "measured_at": start["measured_at"],
        "cores": cores,
        "load_1min_before": start["load_1min_before"],
        "load_1min_after": after,
        "load_limit": load_limit(cores),
        "over_load": over_load([start["load_1min_before"], after, *loads_during], cores),
        "targets_gpu": targets_gpu,
    }


def record(key: str, start: dict, script: str, targets_gpu: bool | None, body: dict,
           loads_during: tuple[float, ...] = ()) -> dict:
    """Store ``body`` with its generator object (``generator``'s arguments) as results.json[key], replacing the
    previous one; returns the entry. Every entry gets its generator fields here, so none can lack one."""
    entry = {"generator": generator(start, script, targets_gpu, loads_during), **body}
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = entry
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"  written: {shown(RESULTS)} ({key})")
    return entry


def shown(path: Path) -> Path:
    """``path`` relative to the repository where it is inside it."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path
