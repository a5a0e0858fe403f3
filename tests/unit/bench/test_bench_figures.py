"""bench/figures.py: the figures blocks of docs/performance.md and README.md, from results.json and the test summary."""

from __future__ import annotations

import json
import re

import figures
import pytest

GEN = {
    "script": "bench/fleet.py",
    "command": "python bench/fleet.py --sizes 10,50",
    "commit": "a" * 40,
    "measured_at": "2026-12-02T08:00:00Z",
    "cores": 2,
    "load_1min_before": 0.3,
    "load_1min_after": 0.7,
    "load_limit": 3.0,
    "over_load": False,
    "targets_gpu": False,
}


def size(hosts, ping, setup, preflight, over=False, load=0.5):
    return {
        "hosts": hosts,
        "init": "sleep",
        "rounds": 3,
        "load_1min_before": load,
        "load_1min_at_start": load,
        "load_1min_peak": load,
        "load_1min_after": load,
        "load_limit": 3.0,
        "over_load": over,
        "median_seconds": {"ping": ping, "setup": setup, "preflight": preflight},
        "preflight_over_ping": round(preflight / ping, 3),
        "preflight_over_setup": round(preflight / setup, 3),
    }


@pytest.mark.parametrize("page", sorted(figures.PAGES))
def test_committed_page_is_what_the_generator_writes(page):
    current = (figures.REPO / page).read_text()
    assert current == figures.expected_page(page, current), f"{page}: stale figures. Fix: make docs, then commit it"


def test_a_size_above_the_load_limit_is_shown_with_its_load_not_its_figures():
    entry = {
        "generator": GEN,
        "sizes_requested": [10, 50, 100],
        "sizes": [size(10, 7.0, 9.0, 8.0), size(50, 167.7, 217.5, 177.4, over=True, load=55.0)],
        "marginal_seconds_per_host": [
            {"from_hosts": 10, "to_hosts": 50, "seconds_per_host": {"ping": 4.0, "setup": 5.2, "preflight": 4.2}}
        ],
    }
    text = "\n".join(figures.fleet_block(entry))
    assert "| 10 | 3 | 0.5 / 0.5 / 0.5 / 0.5 | 7.0 s | 9.0 s | 8.0 s | **1.14** (met) | **0.89** (met) |" in text
    assert ("| 50 | 3 | 55.0 / 55.0 / 55.0 / 55.0 | not quoted: 1-minute load 55.0 / 55.0 / 55.0 / 55.0, above the "
            "limit 3.0 |") in text
    assert "167.7" not in text
    assert "177.4" not in text
    assert "Marginal" not in text  # one end of the slope is not quoted
    assert "| 100 |  |  | not measured: the run ended before this size |" in text
    assert f"commit `{'a' * 10}`" in text
    assert "targets without a GPU" in text
    readme = "\n".join(figures.readme_performance({"fleet": entry}))
    assert "10 hosts: 1.14x ping, 0.89x setup" in readme
    assert "50 hosts" not in readme


def test_a_ratio_over_its_target_says_so():
    entry = {"generator": GEN, "sizes": [size(10, 7.0, 9.0, 10.0)], "marginal_seconds_per_host": []}
    assert "**1.43** (not met) | **1.11** (not met)" in "\n".join(figures.fleet_block(entry))


def test_converge_above_the_load_limit_gives_no_seconds():
    gen = {**GEN, "script": "bench/converge.py", "load_1min_before": 12.0, "over_load": True}
    entry = {
        "generator": gen,
        "first_seconds": 187.4,
        "second_seconds": 121.4,
        "second_over_first": 0.648,
        "first_recap": {"changed": 12},
        "second_recap": {"changed": 0},
        "second_slowest_tasks": [],
        "load_1min_at_start": {"first": 5.9, "second": 10.1},
        "rounds": 1,
        "each_round": [],
    }
    text = "\n".join(figures.converge_block(entry) + figures.readme_performance({"converge": entry}))
    assert "not quoted: 1-minute load 12.0 / 0.7, above the limit 3.0" in text
    assert "187.4" not in text
    assert "0.65" not in text
    quiet = {**entry, "generator": {**gen, "load_1min_before": 0.9, "over_load": False}}
    text = "\n".join(figures.converge_block(quiet))
    assert "| 187.4 s (changed=12) | 121.4 s (changed=0) | **0.65** (not met) | 5.9 / 10.1 |" in text


def test_no_entry_and_no_summary_say_not_measured_and_not_recorded():
    assert figures.fleet_block(None)[0].startswith("Not measured yet")
    assert "not measured yet" in "\n".join(figures.readme_performance({}))
    assert figures.readme_tests(None)[0].startswith("No full `make test` is recorded yet")


def test_the_readme_test_line_comes_from_the_summary():
    summary = {
        "format": 1,
        "command": "all",
        "commit": "b" * 40,
        "ci": False,
        "cores": 2,
        "started": "2026-12-02T08:00:00Z",
        "ended": "2026-12-02T08:49:12Z",
        "seconds": 2952,
        "load_start": 0.4,
        "load_end": 2.1,
        "passed": 1611,
        "failed": 0,
        "skipped": 3,
        "stages": {"lint": {"seconds": 154}, "unit": {"seconds": 95}, "molecule-driver": {"seconds": None}},
    }
    line = figures.readme_tests(summary)[0]
    assert "**1611 passed, 0 failed, 3 skipped** in 49 min 12 s of stages, on 2 cores" in line
    assert "set-up found: not recorded" in line
    assert "commit `bbbbbbbbbb`" in line
    assert "Stages: lint 154 s, unit 95 s, molecule-driver unfinished." in line
    assert "upper bound" not in line
    loaded = figures.readme_tests({**summary, "load_end": 15.9})[0]
    assert (
        "1-minute load 0.4 at the start, 15.9 at the end; CI: no; the load passed the limit 3.0, so the time" in loaded
    )
    assert figures.readme_tests(summary)[-1].startswith("No cold run")
    assert "CPU busy" not in line, "a summary without cpu (recorded before the field) says nothing of it"
    cpu = {"busy_seconds": 4700, "idle_seconds": 1100, "iowait_seconds": 40, "steal_seconds": 20, "busy_share": 0.802}
    assert ("at the end; the machine's CPU busy 80% of the run (4700 s busy, 1100 s idle, 40 s iowait, 20 s steal, "
            "summed over the cores); CI: no)") in figures.readme_tests({**summary, "cpu": cpu})[0]
    assert "speed probe" not in line, "a summary without speed_probe (recorded before the field) says nothing of it"
    probe = {"workload": "w", "start": {"wall_seconds": 0.21, "cpu_seconds": 0.2},
             "end": {"wall_seconds": 0.27, "cpu_seconds": 0.25}}
    assert ("at the end; the speed probe (a fixed single-thread workload, `scripts/test_summary.py probe`) took 0.21 s "
            "at the start, 0.27 s at the end; CI: no)") in figures.readme_tests({**summary, "speed_probe": probe})[0]
    no_start = figures.readme_tests({**summary, "speed_probe": {**probe, "start": None}})[0]
    assert "`scripts/test_summary.py probe`) took 0.27 s at the end; CI: no)" in no_start


def test_the_cold_run_is_quoted_beside_the_last_one_with_its_setup():
    base = {"format": 1, "command": "all", "commit": "b" * 40, "ci": True, "cores": 2, "load_start": 0.2,
            "load_end": 1.9, "passed": 10, "failed": 0, "skipped": 0, "stages": {"lint": {"seconds": 100}}}
    last = {**base, "started": "2026-12-02T11:00:00Z", "ended": "2026-12-02T11:40:00Z", "seconds": 2400,
            "make_seconds": 2460, "setup_found": "warm"}
    cold = {**base, "started": "2026-12-02T09:00:00Z", "ended": "2026-12-02T09:50:00Z", "seconds": 3000,
            "make_seconds": 3200, "setup_found": "cold"}
    lines = figures.readme_tests(last, cold)
    assert "in 40 min 0 s of stages; 41 min 0 s from `make` to the end, set-up included" in lines[0]
    assert "set-up found: warm;" in lines[0]
    cold_line = next(line for line in lines if line.startswith("The last recorded cold one"))
    assert "53 min 20 s from `make` to the end, set-up included" in cold_line
    assert "set-up found: cold;" in cold_line
    # the same run recorded as both: quoted once
    assert sum(line.startswith("The last recorded") for line in figures.readme_tests(cold, cold)) == 1


def test_each_recorded_run_names_its_skips_with_their_reasons_per_stage():
    """README and docs/testing.md list the run's skips, grouped as its closing lines printed them (one item per
    stage and reason: the test, or how many), and say so when nothing skipped."""
    base = {"format": 1, "command": "all", "commit": "b" * 40, "ci": True, "cores": 2, "load_start": 0.2,
            "load_end": 1.9, "passed": 10, "failed": 0, "skipped": 3, "seconds": 60,
            "started": "2026-12-02T11:00:00Z", "ended": "2026-12-02T11:01:00Z"}
    chromium = "chromium not installed (scripts/bootstrap.sh installs it)"
    stages = {"report": {"seconds": 5, "skips": [{"test": "tests.report::test_a", "reason": chromium},
                                                 {"test": "tests.report::test_b", "reason": chromium}]},
              "lint": {"seconds": 9, "skips": []},
              "molecule-local_pv": {"seconds": 50, "skips": [
                  {"test": "m.test_local_pv::test_fallback", "reason": "by design: loop devices: checked elsewhere"}]}}
    lines = figures.readme_tests({**base, "stages": stages})
    assert lines[1:] == ["", "Its skips, each with its reason, as that run recorded them:", "",
                         f"- report: {chromium} (`2 tests`)",
                         "- molecule-local_pv: by design: loop devices: checked elsewhere "
                         "(`m.test_local_pv::test_fallback`)",
                         "", "No cold run (a fresh clone on a machine with no venv and no images) is recorded yet."]
    quiet = figures.readme_tests({**base, "skipped": 0, "stages": {"lint": {"seconds": 9, "skips": []}}})
    assert quiet[1:3] == ["", "No test skipped in that run."]


def test_the_committed_runs_skips_are_quoted_on_both_pages():
    summary = figures.load(figures.TEST_SUMMARY)
    skips = [skip for stage in summary["stages"].values() for skip in stage["skips"]]
    assert len(skips) == summary["skipped"], "the summary keeps every skip with its reason"
    for page in ("README.md", "docs/testing.md"):
        text = (figures.REPO / page).read_text()
        for skip in skips:
            assert skip["reason"] in text, f"{page} does not name the skip {skip}"


def test_a_page_without_its_markers_is_refused():
    page = f"# x\n\n{figures.begin('fleet')}\nSTALE-CONTENT\n{figures.end('fleet')}\n"
    with pytest.raises(SystemExit, match="no block figures:converge"):
        figures.render_page(page, ("fleet", "converge"), {}, None, "docs/performance.md")
    out = figures.render_page(page, ("fleet",), {}, None, "docs/performance.md")
    assert "STALE-CONTENT" not in out
    assert out.startswith("# x\n\n")


def test_record_test_keeps_only_a_full_run_that_names_its_commit(tmp_path, monkeypatch, capsys):
    target = tmp_path / "kept.json"
    monkeypatch.setattr(figures, "TEST_SUMMARY", target)
    monkeypatch.setattr(figures, "REPO", tmp_path)
    base = dict.fromkeys(figures.SUMMARY_FIELDS, 0) | {"format": 1, "stages": {}, "commit": "c" * 40}
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({**base, "command": "lint"}))
    assert figures.record("test", partial) == 1
    assert "records command 'lint', not 'all': only a full `make test` is kept" in capsys.readouterr().err
    assert not target.exists()
    assert figures.record("test", tmp_path / "absent.json") == 1
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": 1, "command": "all"}))
    assert figures.record("test", broken) == 1
    anonymous = tmp_path / "anonymous.json"
    anonymous.write_text(json.dumps({**base, "command": "all", "commit": None}))
    assert figures.record("test", anonymous) == 1
    assert "names no commit" in capsys.readouterr().err
    full = tmp_path / "full.json"
    full.write_text(json.dumps({**base, "command": "all"}))
    cold_target = tmp_path / "cold.json"
    monkeypatch.setattr(figures, "COLD_SUMMARY", cold_target)
    assert figures.record("test", full) == 0
    assert json.loads(target.read_text())["command"] == "all"
    assert not cold_target.exists(), "a run whose set-up is not known to be cold is not kept as the cold one"
    cold = tmp_path / "cold-run.json"
    cold.write_text(json.dumps({**base, "command": "all", "setup_found": "cold"}))
    assert figures.record("test", cold) == 0
    assert json.loads(cold_target.read_text())["setup_found"] == "cold"
    assert json.loads(target.read_text())["setup_found"] == "cold"


def test_a_committed_test_summary_is_a_full_run():
    if not figures.TEST_SUMMARY.exists():
        return  # nothing recorded yet: the README says so (test above)
    summary = json.loads(figures.TEST_SUMMARY.read_text())
    assert [f for f in figures.SUMMARY_FIELDS if f not in summary] == []
    assert summary["command"] == "all"


def test_a_peak_above_the_limit_is_not_quoted_even_when_before_and_after_are_under_it():
    # bench/fleet.py samples the load during a size; the peak counts like before and after
    quiet_ends = {**size(100, 40.0, 55.0, 50.0, over=True, load=1.0), "load_1min_peak": 4.2, "forks": 2}
    text = "\n".join(figures.fleet_block({"generator": GEN, "sizes_requested": [100], "sizes": [quiet_ends]}))
    loads = "1.0 / 1.0 / 4.2 / 1.0"
    assert f"| 100 | 3 | {loads} | not quoted: 1-minute load {loads}, above the limit 3.0 |" in text
    assert "forks: 2; pipelining: off." in text, "an entry without the field was measured without pipelining"
    assert "50.0 s" not in text


def test_the_fleet_block_says_whether_the_targets_pipelined():
    def block(*flags):
        sizes = [{**size(n, 4.0, 5.0, 5.0), "pipelining": flag} for n, flag in zip((10, 50), flags)]
        return "\n".join(figures.fleet_block({"generator": GEN, "sizes_requested": [10, 50], "sizes": sizes}))

    assert "pipelining: on." in block(True, True)
    assert "pipelining: mixed." in block(True, False)
    assert "pipelining: off." in block(False, False)


def test_fleet_measure_counts_the_peak_in_over_load(monkeypatch):
    import fleet  # noqa: PLC0415  (imports ansible_env from tests/, on pytest's pythonpath)

    peak, forks = 4.5, 2
    loads = iter([0.5, 0.6, peak, peak, 0.7])  # before, sampler start, ..., after: one sample over the limit
    monkeypatch.setattr(fleet, "load1", lambda: next(loads, 0.7))
    monkeypatch.setattr(fleet, "fleet", lambda size: ([f"n{i}" for i in range(size)], 0.1))
    monkeypatch.setattr(fleet, "inventory", lambda names: figures.REPO / "build" / "unused.json")
    monkeypatch.setattr(fleet, "timed",
                        lambda argv, env, log: ({"ansible": 1.0}.get(argv[0].rsplit("/", 1)[-1], 2.0), ""))
    result = fleet.measure(3, 1, {}, forks)
    assert result["forks"] == forks
    assert result["load_1min_peak"] == peak
    assert result["over_load"] is True
    # ping and setup run `ansible` (1.0 s in this stub), preflight `ansible-playbook` (2.0 s)
    assert result["median_seconds"] == {"ping": 1.0, "setup": 1.0, "preflight": 2.0}


def test_converge_rounds_are_shown_each_with_the_median_and_the_largest_changed():
    gen = {**GEN, "script": "bench/converge.py", "command": "python bench/converge.py --rounds 3"}

    def one(first, second, changed, loads):
        return {"first_seconds": first, "second_seconds": second, "second_over_first": round(second / first, 3),
                "first_recap": {"ok": 120, "changed": 12, "failed": 0},
                "second_recap": {"ok": 110, "changed": changed, "failed": 0},
                "load_1min_at_start": {"first": loads[0], "second": loads[1]}}

    rounds = [one(80.0, 16.0, 0, (1.0, 1.5)), one(90.0, 15.3, 0, (1.1, 1.6)), one(85.0, 17.0, 2, (1.2, 1.7))]
    entry = {"generator": gen, "rounds": 3, "first_seconds": 85.0, "second_seconds": 16.0, "second_over_first": 0.2,
             "first_recap": rounds[0]["first_recap"], "second_recap": {**rounds[0]["second_recap"], "changed": 2},
             "second_slowest_tasks": [["a task", 1.25]],
             "load_1min_at_start": rounds[0]["load_1min_at_start"], "each_round": rounds}
    text = "\n".join(figures.converge_block(entry))
    assert "The median of 3 rounds" in text
    assert "| 85.0 s (changed=12) | 16.0 s (changed=2) | **0.20** (met) | 1.0 / 1.5 |" in text
    assert "| 3 | 85.0 s (changed=12) | 17.0 s (changed=2) | 0.20 | 1.2 / 1.7 |" in text
    assert "| 2 | 90.0 s (changed=12) | 15.3 s (changed=0) | 0.17 | 1.1 / 1.6 |" in text
    assert "| a task | 1.25 |" in text
    readme = "\n".join(figures.readme_performance({"converge": entry}))
    assert "median of 3 rounds, **0.20** (target <= 0.20), re-run changed=2." in readme
    over = {**entry, "second_over_first": 0.201}
    assert "**0.20** (not met)" in "\n".join(figures.converge_block(over))


def test_fleet_waits_for_the_start_up_load_to_settle_before_the_rounds(monkeypatch):
    import fleet  # noqa: PLC0415  (imports ansible_env from tests/, on pytest's pythonpath)

    settled, stuck, target = 1.4, 2.9, 1.5
    loads = iter([2.8, 2.1, settled, settled])  # the start-up's tail, decaying
    naps = []
    monkeypatch.setattr(fleet, "load1", lambda: next(loads))
    monkeypatch.setattr(fleet.time, "sleep", naps.append)
    _seconds, load = fleet.settle(target)
    assert load == settled
    assert naps == [5, 5], "it slept while the load was over the target, and not once it fell under"

    monkeypatch.setattr(fleet, "SETTLE_TIMEOUT", 0)
    monkeypatch.setattr(fleet, "load1", lambda: stuck)
    assert fleet.settle(target)[1] == stuck, "a load that does not fall is reported, not waited for forever"


def test_the_fleet_block_shows_the_load_when_the_rounds_began():
    settled = {**size(100, 40.0, 55.0, 50.0, load=1.0), "load_1min_at_start": 1.3, "load_1min_peak": 2.2}
    text = "\n".join(figures.fleet_block({"generator": GEN, "sizes_requested": [100], "sizes": [settled]}))
    assert "| hosts | rounds | load before / at start / peak / after |" in text
    assert "| 100 | 3 | 1.0 / 1.3 / 2.2 / 1.0 | 40.0 s |" in text


# A setting the page names, not a measurement: the value -> where it is set.
SETTINGS_ON_THE_PAGE = {"240 s": "MLflow's health check start period (roles/compose_stack's compose file)"}
TYPED_FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|min|seconds|%|x|\N{MULTIPLICATION SIGN})(?![\w-])"
                          r"|\bload (?:of )?\d")


def test_the_performance_page_types_no_figure_outside_its_generated_blocks():
    """Every measured figure on docs/performance.md comes from bench/results.json through a block; the prose around
    the blocks explains and quotes none (a time, a share, a ratio or a load typed by hand goes stale unseen)."""
    text = (figures.REPO / "docs" / "performance.md").read_text()
    prose = re.sub(r"<!-- BEGIN figures:(\w+) .*?<!-- END figures:\1 -->", "", text, flags=re.S)
    assert "<!-- BEGIN figures:" not in prose, "the blocks were cut out"
    assert "<!-- BEGIN figures:" in text
    typed = [m.group(0) for m in TYPED_FIGURE.finditer(prose) if m.group(0) not in SETTINGS_ON_THE_PAGE]
    assert typed == [], f"figures typed by hand on docs/performance.md: {typed}"
    assert TYPED_FIGURE.findall("(33.6 s against 14.3 s, load 5 to 8, 0.25x, 95%)") == [
        "33.6 s", "14.3 s", "load 5", "0.25x", "95%"], "the check finds what it looks for"
