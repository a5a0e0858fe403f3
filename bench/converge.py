#!/usr/bin/env python3
"""make bench, part 3: a converge and its idempotent re-run on the compose demo node, as a RATIO.

On a fresh demo node (playbooks/demo_node.yml, then molecule/resources/local_images.yml, as `make demo`
does), times the first ``ansible-playbook -i inventories/demo/hosts.yml site.yml`` and a second, identical one,
and prints second/first and the second run's changed count (target: <= 0.25 with changed=0). Runs under
/tmp/gpuops-molecule-demo.lock, like `make demo`; the node stays up afterwards (make demo-clean removes it).
Not a test: nothing passes or fails on a time. Figures go to bench/results.json ("converge"), with the load
average before, at each run's start and after (bench/_meta.py).
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _meta import generator, load1, record, started  # noqa: E402
from ansible_env import playbook_env  # noqa: E402  (the one builder of ansible-playbook's environment)

LOGS = REPO / "build" / "bench"
LOCK = "/tmp/gpuops-molecule-demo.lock"
INVENTORY = "inventories/demo/hosts.yml"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
TASK_TIME = re.compile(r"^(.+?) -+ (\d+\.\d+)s$", re.M)
TARGETS_GPU = False  # the demo node (playbooks/demo_node.yml) is a container given no GPU


def environment() -> dict[str, str]:
    """ansible.cfg's jsonfile fact cache, in the bench's own folder (the second run reads what the first cached)."""
    return playbook_env(REPO, cache_dir=LOGS / "converge-facts", bin_dir=Path(sys.executable).parent)


def playbook(name: str, *argv: str, env: dict[str, str]) -> tuple[float, str]:
    log = LOGS / f"converge-{name}.log"
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), *argv]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - t0
    log.write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"bench converge: step {name} failed (rc {run.returncode}); log: {log}")
    print(f"  {name:<8} {seconds:7.1f} s  (log: {log.relative_to(REPO)})")
    return seconds, run.stdout


def recap(out: str) -> dict[str, int]:
    hosts = RECAP.findall(out)
    return {
        "ok": sum(int(h[1]) for h in hosts),
        "changed": sum(int(h[2]) for h in hosts),
        "failed": sum(int(h[4]) for h in hosts),
    }


def slowest(out: str, count: int = 8) -> list[list]:
    """The profile_tasks recap's slowest tasks: [[task, seconds], ...]."""
    return [[name.strip(), float(sec)] for name, sec in TASK_TIME.findall(out)][:count]


def main() -> None:
    LOGS.mkdir(parents=True, exist_ok=True)
    env = environment()
    start = started()
    with open(LOCK, "w") as lock:
        print(f"bench converge: waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"bench converge: fresh demo node, then site.yml twice ({os.cpu_count()} CPUs)")
        playbook("destroy", "playbooks/demo_node.yml", "-e", "demo_state=absent", env=env)
        playbook("node", "playbooks/demo_node.yml", env=env)
        playbook("images", "-i", INVENTORY, "--flush-cache", "molecule/resources/local_images.yml", env=env)
        load_first = load1()
        first, first_out = playbook("first", "-i", INVENTORY, "site.yml", env=env)
        load_second = load1()
        second, second_out = playbook("second", "-i", INVENTORY, "site.yml", env=env)
    ratio = second / first
    first_recap, second_recap = recap(first_out), recap(second_out)
    print(
        f"\n  first converge {first:.1f} s (changed={first_recap['changed']}), re-run {second:.1f} s "
        f"(changed={second_recap['changed']}): second/first = {ratio:.2f} (target <= 0.25, changed=0)"
    )
    print("  re-run's slowest tasks: " + "; ".join(f"{n} {s:.1f} s" for n, s in slowest(second_out, 5)))
    record(
        "converge",
        {
            "generator": generator(start, "bench/converge.py", TARGETS_GPU, (load_first, load_second)),
            "first_seconds": round(first, 1),
            "second_seconds": round(second, 1),
            "second_over_first": round(ratio, 3),
            "first_recap": first_recap,
            "second_recap": second_recap,
            "second_slowest_tasks": slowest(second_out),
            "load_1min_at_start": {"first": load_first, "second": load_second},
        },
    )


if __name__ == "__main__":
    main()
