#!/usr/bin/env python3
"""make bench, part 2: what preflight costs on a fleet, as RATIOS to ping and setup, measured in one run.

What it runs and records (N target containers; ping, setup and preflight.yml interleaved round by round; the
"fleet" entry of bench/results.json) is described in docs/performance.md. Not a test: nothing passes or fails on a
time.

  bench/fleet.py [--sizes 10,50,100] [--rounds 3] [--forks N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from _meta import REPO, load1, load_limit, over_load, record, started, timed
from figures import fleet_block

sys.path.insert(0, str(REPO / "tests"))
from ansible_env import playbook_env
from container_node import NODE_SETTINGS, docker

WORK = REPO / "build" / "bench"
IMAGE = "gpuops/debian12-systemd"
PREFIX = "gpuops-bench-"
LABEL = "gpuops.bench=true"
# PID 1 of the targets. Ping, setup and preflight need python, not systemd; and each systemd container holds
# inotify instances from a per-user limit (128) that every test container shares, so a fleet of them stops booting.
INIT = "sleep"
SETTLE_TIMEOUT = 240  # seconds to wait for the start-up's load to decay before a size is measured
TARGETS_GPU = False  # start() passes no GPU to the containers (no --gpus, no /dev/nvidia*): gpu_facts finds none
PIPELINING = True  # as a real fleet runs: ansible.cfg pipelines ssh, so one module call is one remote command
PLAN_VARS = {  # the preflight scenario's plan: a team of 3, GPUs counted across the fleet (none here)
    "ansible_connection": "community.docker.docker",
    # The docker connection pipelines only when told (as the demo inventory tells it): one `docker exec` per
    # module call instead of five, the remote protocol of ssh with ansible.cfg's pipelining.
    "ansible_pipelining": PIPELINING,
    "ansible_python_interpreter": "/usr/bin/python3",
    "gpuops_team_size": 3,
    "gpuops_multi_node_training": False,
    "gpuops_cuda_version": "12.2",
    "nvidia_driver_version": "535.261.03",
    # Preflight refuses Debian 12's own docker.io for the Compose platform (it has no Compose v2 plugin).
    "docker_engine_source": "docker",
}


def containers() -> list[str]:
    return sorted(docker("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split())


def remove_all() -> None:
    names = containers()
    if names:
        docker("rm", "-f", *names, check=False, timeout=600)


def start(name: str) -> None:
    """A node from the image and settings playbooks/tasks/node_container.yml uses, with ``sleep infinity`` as PID 1."""
    run = docker("run", "-d", "--name", name, "--hostname", name, "--label", LABEL, *NODE_SETTINGS, IMAGE,
                 INIT, "infinity", check=False)
    if run.returncode != 0:
        raise SystemExit(f"bench: could not start {name}: {run.stderr.strip()}")


def fleet(size: int) -> tuple[list[str], float]:
    """N running nodes (reusing those already up); returns the names and the seconds spent starting."""
    t0 = time.perf_counter()
    wanted = [f"{PREFIX}{index:03d}" for index in range(size)]
    have = set(containers())
    for extra in sorted(have - set(wanted)):
        docker("rm", "-f", extra, check=False)
    for name in wanted:
        if name not in have:
            start(name)
    return wanted, time.perf_counter() - t0


def inventory(names: list[str]) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"inventory-{len(names)}.json"
    hosts = {name: {} for name in names}
    data = {"all": {"children": {"gpu_nodes": {"hosts": hosts, "vars": PLAN_VARS}}}}
    path.write_text(json.dumps(data, indent=1))
    return path


def commands(inv: Path, forks: int) -> dict[str, list[str]]:
    """The three commands, each with the same --forks (the same parallelism for all three keeps the ratios fair)."""
    bin_dir = Path(sys.executable).parent
    common = ["-i", str(inv), "--forks", str(forks)]
    return {
        "ping": [str(bin_dir / "ansible"), "gpu_nodes", *common, "-m", "ansible.builtin.ping"],
        "setup": [str(bin_dir / "ansible"), "gpu_nodes", *common, "-m", "ansible.builtin.setup"],
        "preflight": [str(bin_dir / "ansible-playbook"), *common, str(REPO / "playbooks" / "preflight.yml")],
    }


class _PeakLoad(threading.Thread):
    """The highest 1-minute load average seen while a size is measured (sampled every few seconds)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = load1()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(3):
            self.peak = max(self.peak, load1())

    def stop(self) -> float:
        self._stop_event.set()
        self.join()
        return max(self.peak, load1())


def settle(target: float) -> tuple[float, float]:
    """Waits (at most SETTLE_TIMEOUT; why: docs/performance.md) until the 1-minute load average is at or below
    ``target``; returns the seconds waited and the load then. Not reaching ``target`` is not fatal: the peak sampled
    during the rounds decides whether the size is quoted."""
    t0 = time.perf_counter()
    while load1() > target and time.perf_counter() - t0 < SETTLE_TIMEOUT:
        time.sleep(5)
    return round(time.perf_counter() - t0, 1), load1()


def measure(size: int, rounds: int, env: dict[str, str], forks: int) -> dict:
    load_before, cores = load1(), os.cpu_count() or 1
    names, startup = fleet(size)
    cmds = commands(inventory(names), forks)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    timed(cmds["ping"], env, WORK / "warmup.log")  # first contact (python bytecode on the nodes) is not timed
    settle_seconds, load_at_start = settle(load_limit(cores) / 2)
    sampler = _PeakLoad()
    sampler.start()
    for round_no in range(rounds):
        for name, argv in cmds.items():  # interleaved: a busy moment hits all three alike
            times[name].append(timed(argv, env, WORK / f"{name}-{size}-{round_no}.log")[0])
        print(f"  N={size} round {round_no + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()))
    med = {name: statistics.median(values) for name, values in times.items()}
    load_peak, load_after = sampler.stop(), load1()
    return {
        "hosts": size,
        "init": INIT,
        "forks": forks,
        "pipelining": PIPELINING,
        "rounds": rounds,
        "load_1min_before": load_before,
        "settle_seconds": settle_seconds,
        "load_1min_at_start": load_at_start,
        "load_1min_after": load_after,
        "load_1min_peak": load_peak,
        "load_limit": load_limit(cores),
        "over_load": over_load([load_before, load_at_start, load_peak, load_after], cores),
        "start_seconds": round(startup, 1),
        "median_seconds": {k: round(v, 2) for k, v in med.items()},
        "all_seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "preflight_over_ping": round(med["preflight"] / med["ping"], 3),
        "preflight_over_setup": round(med["preflight"] / med["setup"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the containers running afterwards")
    parser.add_argument("--forks", type=int, default=0, help="ansible --forks of all three (default: cores / 2)")
    args = parser.parse_args()
    forks = args.forks or default_forks()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    env = playbook_env(REPO, cache_dir=WORK / "facts", bin_dir=Path(sys.executable).parent)  # a cache of its own
    print(
        f"bench fleet: N = {sizes}, {args.rounds} interleaved rounds (median), {os.cpu_count()} CPUs, "
        f"targets' PID 1: {INIT}, forks {forks}"
    )
    start, results, entry = started(), [], None
    try:
        for size in sizes:
            results.append(measure(size, args.rounds, env, forks))
            entry = record_fleet(start, sizes, results)  # kept even if a later size fails
    finally:
        if not args.keep:
            remove_all()
    print("", *fleet_block(entry), sep="\n")


def default_forks() -> int:
    """One fork per two cores. The targets run on the controller's own cores here, and each fork keeps several
    processes runnable (the docker CLI, runc, the module's python on the target): with ansible.cfg's forks, and
    again with one fork per core, the bench alone drove the 1-minute load past the load limit on 2 cores."""
    return max(1, (os.cpu_count() or 1) // 2)


def marginal(results: list[dict]) -> list[dict]:
    """Seconds per extra host between consecutive sizes (the slope of each median)."""
    steps = []
    for lo, hi in zip(results, results[1:]):
        span = hi["hosts"] - lo["hosts"]
        low, high = lo["median_seconds"], hi["median_seconds"]
        per_host = {k: round((high[k] - low[k]) / span, 3) for k in low}
        steps.append({"from_hosts": lo["hosts"], "to_hosts": hi["hosts"], "seconds_per_host": per_host})
    return steps


def record_fleet(start: dict, sizes: list[int], results: list[dict]) -> dict:
    """The fleet entry, recorded in results.json; printed as docs/performance.md will show it."""
    loads = tuple(r[key] for r in results for key in ("load_1min_before", "load_1min_peak", "load_1min_after"))
    body = {"sizes_requested": sizes, "sizes": results, "marginal_seconds_per_host": marginal(results)}
    return record("fleet", start, "bench/fleet.py", TARGETS_GPU, body, loads)


if __name__ == "__main__":
    main()
