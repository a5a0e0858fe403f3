"""scripts/run-tests.sh's queue (scripts/_queue.sh): two lanes take the next item when free, so a long item does
not hold the short ones behind it; `plan` lists every stage once, ops and compose in one item."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

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


def _runner_with_failing_images(tmp_path: Path) -> Path:
    """A copy of the runner whose scripts/build-images.sh is a LABELLED TEST STAND-IN that records its call (in
    calls.log) and fails as debootstrap would."""
    for folder in ("scripts", "bench", "molecule"):
        (tmp_path / folder).mkdir()
    for name in ("scripts/run-tests.sh", "scripts/_queue.sh", "scripts/test_summary.py", "bench/_meta.py"):
        shutil.copy(REPO / name, tmp_path / name)
    stub = tmp_path / "scripts" / "build-images.sh"
    stub.write_text("#!/bin/sh\n# LABELLED TEST STAND-IN for scripts/build-images.sh\n"
                    'echo "$*" >> calls.log\necho "E: debootstrap failed"\nexit 1\n')
    stub.chmod(0o755)
    return tmp_path / "scripts" / "run-tests.sh"


def _stage(runner: Path, stage: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(runner), stage], cwd=runner.parents[1], text=True, capture_output=True, check=False,
                          env={"PATH": "/usr/bin:/bin"})


def test_a_container_stage_builds_the_images_first_and_fails_without_them(tmp_path: Path) -> None:
    run = _stage(_runner_with_failing_images(tmp_path), "dnf")
    assert run.returncode != 0
    assert (tmp_path / "calls.log").read_text() == "all\n"
    assert "FAIL  the node images (scripts/build-images.sh; log: build/logs/images-dnf.log)" in run.stdout
    assert "E: debootstrap failed" in run.stdout
    assert "dnf tests" not in run.stdout  # the stage's pytest never started
    result = json.loads((tmp_path / "build" / "results" / "dnf.json").read_text())
    assert (result["failed"], result["rc"]) == (1, 1)


@pytest.mark.parametrize("stage", ["unit", "report"])
def test_the_stages_without_containers_never_build_the_images(tmp_path: Path, stage: str) -> None:
    # `make test` starts them before the images exist (on a fresh machine they build in the other lane); here
    # they fail for want of pytest on PATH, after the point where a container stage builds the images
    run = _stage(_runner_with_failing_images(tmp_path), stage)
    assert f"== {stage}" in run.stdout
    assert not (tmp_path / "calls.log").exists()
    assert "the node images" not in run.stdout
