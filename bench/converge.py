#!/usr/bin/env python3
"""make bench, part 3: a converge and its idempotent re-run on the compose demo node, as a RATIO.

    python bench/converge.py [--rounds 3]

What each round runs and what is recorded (the "converge" entry of bench/results.json; target: re-run / first <=
0.20 with changed=0 in every round, issue 18) is described in docs/performance.md. Runs under
/tmp/gpuops-molecule-demo.lock, like `make demo`; the node stays up afterwards (make demo-clean removes it). Not a
test: nothing passes or fails on a time.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import statistics
import sys
from pathlib import Path

from _meta import REPO, load1, record, started, timed
from figures import converge_block

sys.path.insert(0, str(REPO / "tests"))
from ansible_env import play_recap, playbook_env

LOGS = REPO / "build" / "bench"
LOCK = "/tmp/gpuops-molecule-demo.lock"
INVENTORY = "inventories/demo/hosts.yml"
TASK_TIME = re.compile(r"^(.+?) -+ (\d+\.\d+)s$", re.M)
TARGETS_GPU = False  # the demo node (playbooks/demo_node.yml) is a container given no GPU


def playbook(name: str, *argv: str, env: dict[str, str]) -> tuple[float, str]:
    log = LOGS / f"converge-{name}.log"
    seconds, out = timed([str(Path(sys.executable).parent / "ansible-playbook"), *argv], env, log)
    print(f"  {name:<8} {seconds:7.1f} s  (log: {log.relative_to(REPO)})")
    return seconds, out


def recap(out: str) -> dict[str, int]:
    """The PLAY RECAP's ok, changed and failed, summed over the hosts."""
    hosts = play_recap(out).values()
    return {key: sum(host[key] for host in hosts) for key in ("ok", "changed", "failed")}


def slowest(out: str) -> dict[str, float]:
    """The profile_tasks recap of one run: {task: seconds}, as many tasks as the recap lists."""
    return {name.strip(): float(sec) for name, sec in TASK_TIME.findall(out)}


def median_slowest(runs: list[dict[str, float]], count: int = 10) -> list[list]:
    """Each task's median over the runs (a run whose recap does not list it counts 0 s), slowest first."""
    names = {name for run in runs for name in run}
    med = {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}
    return [[name, round(sec, 2)] for name, sec in sorted(med.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


def one_round(number: int, env: dict[str, str]) -> dict:
    """A fresh demo node, then site.yml twice: the seconds, recaps, load at each start and the re-run's tasks."""
    tag = f"r{number}"
    playbook(f"{tag}-destroy", "playbooks/demo_node.yml", "-e", "demo_state=absent", env=env)
    playbook(f"{tag}-node", "playbooks/demo_node.yml", env=env)
    playbook(f"{tag}-images", "-i", INVENTORY, "--flush-cache", "molecule/resources/local_images.yml", env=env)
    load_first = load1()
    first, first_out = playbook(f"{tag}-first", "-i", INVENTORY, "site.yml", env=env)
    load_second = load1()
    second, second_out = playbook(f"{tag}-second", "-i", INVENTORY, "site.yml", env=env)
    result = {
        "first_seconds": round(first, 1),
        "second_seconds": round(second, 1),
        "second_over_first": round(second / first, 3),
        "first_recap": recap(first_out),
        "second_recap": recap(second_out),
        "load_1min_at_start": {"first": load_first, "second": load_second},
    }
    print(f"  round {number}: second/first = {result['second_over_first']:.2f}, "
          f"re-run changed={result['second_recap']['changed']}")
    return {**result, "_tasks": slowest(second_out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh node + two runs, this many times (median)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}; expected 1 or more")
    LOGS.mkdir(parents=True, exist_ok=True)
    # ansible.cfg's jsonfile fact cache, in the bench's own folder (the second run reads what the first cached);
    # profile_tasks lists every task (its default is the slowest 20), so each task's median sees every round.
    env = playbook_env(REPO, cache_dir=LOGS / "converge-facts", bin_dir=Path(sys.executable).parent,
                       extra={"PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all"})
    start = started()
    with open(LOCK, "w") as lock:
        print(f"bench converge: waiting for {LOCK}")
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(f"bench converge: {args.rounds} round(s): a fresh demo node, site.yml twice ({os.cpu_count()} CPUs)")
        rounds = [one_round(number, env) for number in range(1, args.rounds + 1)]
    tasks = [r.pop("_tasks") for r in rounds]
    first = statistics.median(r["first_seconds"] for r in rounds)
    second = statistics.median(r["second_seconds"] for r in rounds)
    ratio = statistics.median(r["second_over_first"] for r in rounds)
    changed = [r["second_recap"]["changed"] for r in rounds]
    loads = tuple(load for r in rounds for load in r["load_1min_at_start"].values())
    # The round whose ratio is the median (the lower middle one for an even count) stands for the run in the
    # figures' recaps; every round's recap is kept under "each_round".
    middle = sorted(rounds, key=lambda r: r["second_over_first"])[(len(rounds) - 1) // 2]
    entry = record("converge", start, "bench/converge.py", TARGETS_GPU, {
        "rounds": len(rounds),
        "first_seconds": round(first, 1),
        "second_seconds": round(second, 1),
        "second_over_first": round(ratio, 3),
        "first_recap": middle["first_recap"],
        "second_recap": {**middle["second_recap"], "changed": max(changed)},
        "second_slowest_tasks": median_slowest(tasks),
        "load_1min_at_start": middle["load_1min_at_start"],
        "each_round": rounds,
    }, loads)
    print("", *converge_block(entry), sep="\n")  # as docs/performance.md will show it


if __name__ == "__main__":
    main()
