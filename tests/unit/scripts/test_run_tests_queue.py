"""scripts/run-tests.sh's queue (scripts/_queue.sh): two lanes take the next item when free, so a long item does
not hold the short ones behind it; `plan` lists every stage once, ops and compose in one item."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FIXED_STAGES = ["lint", "unit", "collection", "report", "ops", "bad_input", "dnf", "site_check"]

# run_stage sleeps as long as the stage's name says (stage "a-0.9" sleeps 0.9 s) and logs what it ran.
_HARNESS = r"""
set -euo pipefail
cd "$1"; shift
mkdir -p build/logs
LANES=2 lane_pids=() lanes=()
stop_lanes() { exit 130; }
run_stage() { sleep "${1#*-}"; echo "ran $1 in lane $2"; }
source "$REPO/scripts/_queue.sh"
run_queue "$@" >/dev/null
printf '%s\n' "${lanes[@]}"
"""


def _run_queue(tmp_path: Path, *items: str) -> list[str]:
    out = subprocess.run(["bash", "-c", _HARNESS, "harness", str(tmp_path), *items], check=True, text=True,
                         capture_output=True, env={"REPO": str(REPO), "PATH": "/usr/bin:/bin"}).stdout
    return out.splitlines()


def test_a_free_lane_takes_the_next_item(tmp_path: Path) -> None:
    # fixed lanes of [long, short] and [short, short] would end together at long + short; the queue gives the
    # three short items to the lane that is free while the long one runs.
    lanes = _run_queue(tmp_path, "long-1.5", "s1-0.1,s2-0.1", "s3-0.1", "s4-0.1")
    # which lane starts first is up to the scheduler: the lanes are compared as a set
    assert sorted(lanes) == ["long-1.5", "s1-0.1,s2-0.1,s3-0.1,s4-0.1"]
    logs = {path.name: path.read_text().split() for path in (tmp_path / "build" / "logs").iterdir()}
    assert logs["stage-long-1.5.log"][-1] != logs["stage-s4-0.1.log"][-1]  # "ran <stage> in lane <N>"
    assert logs["stage-s1-0.1.log"][-1] == logs["stage-s4-0.1.log"][-1]


def test_every_item_runs_once_when_there_are_fewer_items_than_lanes(tmp_path: Path) -> None:
    assert _run_queue(tmp_path, "only-0.1") == ["only-0.1"]


def test_the_plan_queues_every_stage_once_and_ops_with_compose() -> None:
    out = subprocess.run([str(REPO / "scripts" / "run-tests.sh"), "plan"], check=True, text=True,
                         capture_output=True, env={"PATH": "/usr/bin:/bin"}).stdout
    items = [line.removeprefix("item: ").split(",") for line in out.splitlines() if line.startswith("item: ")]
    stages = [stage for item in items for stage in item]
    scenarios = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
    assert sorted(stages) == sorted(FIXED_STAGES + [f"molecule-{name}" for name in scenarios])
    # ops and compose share the host's image cache and the demo's lock; bad_input never runs beside compose
    assert ["ops", "molecule-compose", "bad_input"] in items
    assert re.match(r"queue \(2 lanes", out)
