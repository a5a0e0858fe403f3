"""scripts/test_summary.py: per-stage counts and skip reasons from JUnit, build/test-summary.json and the closing
lines of scripts/run-tests.sh."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("test_summary", REPO / "scripts" / "test_summary.py")
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="3" tests="7">
<testcase classname="tests.a" name="test_ok"/>
<testcase classname="tests.a" name="test_ok2"/>
<testcase classname="tests.a" name="test_fails"><failure message="assert 1 == 2">...</failure></testcase>
<testcase classname="tests.a" name="test_errors"><error message="failed on setup">...</error></testcase>
<testcase classname="tests.b" name="test_node"><skipped type="pytest.skip" message="docker is not available here">
tests/container_node.py:41: docker is not available here</skipped></testcase>
<testcase classname="tests.b" name="test_data[x]"><skipped message="Skipped: real third-party data not present: /d/x"/>
</testcase>
<testcase classname="tests.b" name="test_data[y]"><skipped message="Skipped: real third-party data not present: /d/x"/>
</testcase>
</testsuite></testsuites>
"""


# JUNIT's skipped test cases alone
ONLY_SKIPS = "".join(line for line in JUNIT.splitlines(keepends=True) if 'classname="tests.a"' not in line)


PROBE = ts.probe  # the real speed probe, timed by its own test below
PROBED = {"wall_seconds": 0.3, "cpu_seconds": 0.29}  # what the other tests' summaries record as the end probe


@pytest.fixture(autouse=True)
def _outside_ci(monkeypatch) -> None:
    """The results do not depend on the CI running this test: the tests that need CI=true set it."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def _end_probe(monkeypatch) -> None:
    """A summary takes the speed probe (its workload three times, about half a CPU second): the tests that do not
    read it record PROBED instead; the probe's own test times the real workload (PROBE)."""
    monkeypatch.setattr(ts, "probe", lambda: PROBED)


@pytest.fixture
def junit(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "stage.xml"
    path.write_text(JUNIT)
    return str(path)


def stage(name: str, *extra: str) -> None:
    assert ts.main(["stage", name, "--rc", "0", "--seconds", "12", "--passed", "0", "--failed", "0", "--lane", "2",
                    *extra]) == 0


def test_counts_take_errors_as_failures_and_skips_apart(junit, tmp_path):
    def counts(*paths):
        passed, failed, skips = ts.junit(list(paths))
        return passed, failed, len(skips)

    assert counts(junit) == (2, 2, 3)
    assert counts(junit, junit) == (4, 4, 6)
    assert counts(str(tmp_path / "absent.xml")) == (0, 0, 0), "a stage that wrote no JUnit counts nothing"
    both = JUNIT.replace('<failure message="assert 1 == 2">...</failure>', '<failure message="1"/><error message="2"/>')
    Path(junit).write_text(both.replace('errors="1"', 'errors="2"'))
    assert counts(junit) == (2, 2, 3), "a test that failed, then errored in its teardown, is one failed case"


def test_every_skip_keeps_its_test_and_reason(junit):
    assert ts.junit([junit])[2] == [
        {"test": "tests.b::test_node", "reason": "docker is not available here"},
        {"test": "tests.b::test_data[x]", "reason": "real third-party data not present: /d/x"},
        {"test": "tests.b::test_data[y]", "reason": "real third-party data not present: /d/x"},
    ]


def test_stage_record_adds_its_own_checks_to_its_junit(junit, tmp_path):
    assert ts.main(["stage", "unit", "--rc", "1", "--seconds", "95", "--passed", "5", "--failed", "1", "--lane", "2",
                    "--junit", junit, "--failure", "unit: unit tests (log: x)"]) == 0
    record = json.loads((tmp_path / "build" / "results" / "unit.json").read_text())
    assert (record["passed"], record["failed"], record["skipped"], record["rc"], record["seconds"], record["lane"]) == (
        7, 3, 3, 1, 95, 2)
    assert record["failures"] == ["unit: unit tests (log: x)"]
    assert [s["test"] for s in record["skips"]] == [
        "tests.b::test_node", "tests.b::test_data[x]", "tests.b::test_data[y]"]


def test_summary_totals_skips_per_stage_and_closing_line(junit, tmp_path, capsys):
    stage("lint", "--passed", "7")
    stage("unit", "--junit", junit)
    rc = ts.main(["summary", "--command", "lanes", "--started", "1800000000", "--load-start", "1.5",
                  "--out", "build/test-summary.json", "--lane", "lint,unit", "lint", "unit"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1, "a failed test fails the run"
    assert lines[-1] == "summary: 9 passed, 2 failed, 3 skipped"
    assert lines[-3:-1] == ["skipped: unit: docker is not available here (tests.b::test_node)",
                            "skipped: unit: real third-party data not present: /d/x (2 tests)"]
    result = json.loads((tmp_path / "build" / "test-summary.json").read_text())
    assert list(result["stages"]) == ["lint", "unit"]
    assert (result["passed"], result["failed"], result["skipped"]) == (9, 2, 3)
    assert result["started"] == "2027-01-15T08:00:00Z"
    assert result["lanes"] == [["lint", "unit"]]
    assert result["load_start"] == pytest.approx(1.5)
    assert isinstance(result["ci"], bool)
    assert {"commit", "ended", "seconds", "load_end", "cores", "format"} <= set(result)


def test_summary_records_the_wall_time_since_make_and_what_its_setup_found(junit, monkeypatch, tmp_path):
    stage("lint", "--passed", "7")
    args = ["summary", "--command", "all", "--started", "1800000000", "--out", "s.json", "lint"]
    monkeypatch.delenv("GPUOPS_MAKE_STARTED", raising=False)
    monkeypatch.delenv("GPUOPS_MAKE_FOUND", raising=False)
    ts.main(args)
    alone = json.loads((tmp_path / "s.json").read_text())
    assert (alone["make_seconds"], alone["setup_found"]) == (None, None), "run-tests.sh without make: not known"
    monkeypatch.setenv("GPUOPS_MAKE_STARTED", "1799999700")
    monkeypatch.setenv("GPUOPS_MAKE_FOUND", "cold")
    ts.main(args)
    made = json.loads((tmp_path / "s.json").read_text())
    assert made["setup_found"] == "cold"
    assert made["make_seconds"] == made["seconds"] + 300, "make began 300 s before the stages"


def test_a_stage_that_left_no_result_fails_the_run(junit, capsys):
    stage("lint", "--passed", "7")
    rc = ts.main(["summary", "--command", "all", "--started", "1800000000", "--out", "s.json", "lint", "unit"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert lines[0].startswith("failed: unit: the stage left no result")
    assert lines[-1] == "summary: 7 passed, 1 failed, 0 skipped"


def test_nothing_ran_fails_the_run_even_with_skips_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.xml").write_text(ONLY_SKIPS)
    stage("bad_input", "--junit", "s.xml")
    rc = ts.main(["summary", "--command", "bad_input", "--started", "1800000000", "--out", "s.json", "bad_input"])
    assert rc == 1
    assert capsys.readouterr().out.splitlines()[-2:] == ["nothing ran: no test passed or failed",
                                                         "summary: 0 passed, 0 failed, 3 skipped"]


def test_a_clean_run_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stage("lint", "--passed", "7")
    assert ts.main(["summary", "--command", "lint", "--started", "1800000000", "--out", "s.json", "lint"]) == 0
    assert capsys.readouterr().out.splitlines() == ["summary: 7 passed, 0 failed, 0 skipped"]


def test_cpu_use_splits_the_machine_time_between_two_proc_stat_lines():
    # /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice (ticks of 1/100 s).
    start = "cpu  1000 0 500 8000 100 0 0 0 0 0"
    end = "cpu  4000 100 1400 9000 300 50 50 100 0 0"
    assert ts.cpu_use(start, end) == {"busy_seconds": 41, "idle_seconds": 10, "iowait_seconds": 2,
                                      "steal_seconds": 1, "busy_share": 0.759}
    assert ts.cpu_use(None, end) is None, "no start line (an older caller): not known"
    assert ts.cpu_use("intr 1 2 3", end) is None


def test_summary_records_the_machine_cpu_since_the_start_line(junit, tmp_path, monkeypatch):
    stage("lint", "--passed", "7")
    monkeypatch.setattr(ts, "cpu_line", lambda: "cpu  3000 0 1000 6000 0 0 0 0 0 0")
    args = ["summary", "--command", "all", "--started", "1800000000", "--out", "s.json", "lint"]
    ts.main([*args, "--cpu-start", "cpu  1000 0 0 5000 0 0 0 0 0 0"])
    cpu = json.loads((tmp_path / "s.json").read_text())["cpu"]
    assert (cpu["busy_seconds"], cpu["idle_seconds"], cpu["busy_share"]) == (30, 10, 0.75)
    ts.main(args)
    assert json.loads((tmp_path / "s.json").read_text())["cpu"] is None


def test_the_speed_probe_times_its_fixed_workload_and_the_summary_records_both_ends(
        junit, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ts, "probe", PROBE)
    taken = ts.probe()
    assert set(taken) == {"wall_seconds", "cpu_seconds"}
    assert 0 < taken["cpu_seconds"] < 60, taken  # noqa: PLR2004 - the workload is a fraction of a second here
    assert ts.main(["probe"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"wall_seconds", "cpu_seconds"}
    stage("lint", "--passed", "7")
    monkeypatch.setattr(ts, "probe", lambda: PROBED)
    args = ["summary", "--command", "all", "--started", "1800000000", "--out", "s.json", "lint"]
    ts.main([*args, "--probe-start", '{"wall_seconds": 0.2, "cpu_seconds": 0.19}'])
    recorded = json.loads((tmp_path / "s.json").read_text())["speed_probe"]
    assert recorded == {"workload": ts.PROBE_WORKLOAD, "start": {"wall_seconds": 0.2, "cpu_seconds": 0.19},
                        "end": {"wall_seconds": 0.3, "cpu_seconds": 0.29}}
    for start in ("", "not json", '{"wall_seconds": "fast"}', "[1, 2]"):
        ts.main([*args, "--probe-start", start])
        assert json.loads((tmp_path / "s.json").read_text())["speed_probe"]["start"] is None, start


@pytest.mark.parametrize("ci", ["true", None])
def test_under_ci_a_stage_skipped_whole_fails_with_its_skips(tmp_path, monkeypatch, ci):
    """The report stage without chromium (every case skipped), a Molecule verify that found no tests (no JUnit):
    under CI=true the stage fails, naming its JUnit; without CI its skips stay skips, listed with their reasons."""
    monkeypatch.chdir(tmp_path)
    if ci:
        monkeypatch.setenv("CI", ci)
    (tmp_path / "report.xml").write_text(ONLY_SKIPS)
    stage("report", "--junit", "report.xml")
    stage("molecule-local_pv", "--passed", "1", "--junit", "absent.xml")
    report = json.loads((tmp_path / "build" / "results" / "report.json").read_text())
    molecule = json.loads((tmp_path / "build" / "results" / "molecule-local_pv.json").read_text())
    assert (report["skipped"], report["skips"][0]["reason"]) == (3, "docker is not available here")
    if ci:
        assert (report["failed"], molecule["failed"]) == (1, 1)
        assert report["failures"] == ["report: no test case passed (3 skipped; JUnit: report.xml): under CI=true a "
                                      "stage skipped whole fails"]
        assert molecule["failures"][0].startswith("molecule-local_pv: no test case passed (0 skipped; JUnit: absent")
    else:
        assert (report["failed"], report["failures"], molecule["failed"]) == (0, [], 0)


def test_under_ci_a_stage_that_failed_already_or_ran_no_junit_gets_no_second_failure(junit, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    (tmp_path / "s.xml").write_text(ONLY_SKIPS)
    stage("bad_input", "--junit", "s.xml", "--rc", "1")  # the later --rc wins: the stage failed on its own
    stage("lint", "--passed", "7")  # no JUnit: its checks are counted by run-tests.sh itself
    assert json.loads((tmp_path / "build" / "results" / "bad_input.json").read_text())["failures"] == []
    assert json.loads((tmp_path / "build" / "results" / "lint.json").read_text())["failed"] == 0


def test_skip_groups_give_one_entry_per_stage_and_reason_in_order():
    stages = {"unit": {"skips": [{"test": "a::x", "reason": "r1"}, {"test": "a::y", "reason": "r2"},
                                 {"test": "a::z", "reason": "r1"}]},
              "lint": {"skips": []}, "molecule-driver": {"skips": [{"test": "m::t", "reason": "by design: r3"}]},
              "old": {}}
    assert ts.skip_groups(stages) == [("unit", "r1", "2 tests"), ("unit", "r2", "a::y"),
                                      ("molecule-driver", "by design: r3", "m::t")]
