"""gpuops-run's pure logic on recorded ansible-runner events: summary counts agree with the PLAY RECAP
the same run printed, JUnit has one testcase per host x play, exit codes, the progress lines."""

from __future__ import annotations

import io
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_env import play_recap

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from gpuops_run import summary as S
from gpuops_run.progress import Progress

RECORDED = Path(__file__).parent / "recorded"
CAPTURES = ["mixed_rescued_ignored_loop", "failed_and_unreachable"]


def events(name: str) -> list[dict]:
    return json.loads((RECORDED / f"{name}.json").read_text())


def summarise(events: list[dict], **kwargs) -> dict:
    """The summary of a run whose events were these, folded one by one as gpuops-run's event handler does."""
    fold = S.RunFold()
    for event in events:
        fold.add(event)
    return S.summarise(fold, **kwargs)


def recap(name: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP lines of the run's own stdout -> host -> counts."""
    return play_recap((RECORDED / f"{name}.stdout").read_text())


@pytest.mark.parametrize("name", CAPTURES)
def test_counts_agree_with_the_play_recap(name):
    summary = summarise(events(name), rc=2, status="failed")
    expected = recap(name)
    assert expected, "the capture has a PLAY RECAP"
    got = {h: {k: t[k] for k in S.COUNTS} for h, t in summary["hosts"].items()}
    want = {h: {"ok": r["ok"], "changed": r["changed"], "failed": r["failed"], "skipped": r["skipped"],
                "unreachable": r["unreachable"], "ignored": r["ignored"], "rescued": r["rescued"]}
            for h, r in expected.items()}
    assert got == want


@pytest.mark.parametrize("name", CAPTURES)
def test_counts_from_events_alone_match_where_the_recap_is_lost(name):
    """A run cut short has no recap: the counts then come from the task events themselves, and for these
    captures they still agree with the recap for failures and unreachable hosts."""
    cut = [e for e in events(name) if e["event"] != "playbook_on_stats"]
    summary = summarise(cut)
    assert summary["recap_seen"] is False
    for host, counts in recap(name).items():
        assert summary["hosts"][host]["unreachable"] == counts["unreachable"]
        assert summary["hosts"][host]["ignored"] == counts["ignored"]


def test_failed_tasks_are_named_with_their_messages_and_rescue_is_not_a_failure():
    summary = summarise(events("mixed_rescued_ignored_loop"), rc=2)
    assert summary["hosts"]["h2"]["failed_tasks"] == [
        {"task": "Loop with a failing item on h2", "msg": "One or more items failed", "unreachable": False,
         "play": "Mixed results"}]
    assert summary["hosts"]["h1"]["failed_tasks"] == []
    assert summary["hosts"]["h1"]["rescued"] == 1
    assert [p["name"] for p in summary["plays"]] == ["Mixed results", "After"]
    assert list(summary["plays"][1]["hosts"]) == ["h1"], "h2 failed in play 1 and never reached play 2"
    assert summary["seconds"] > 0
    assert summary["plays"][0]["slowest_tasks"][0]["seconds"] >= summary["plays"][0]["slowest_tasks"][-1]["seconds"]


def test_junit_one_testcase_per_host_and_play_with_task_and_message():
    root = ET.fromstring(S.junit_xml(summarise(events("mixed_rescued_ignored_loop"), rc=2)))
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert set(cases) == {("h1", "Mixed results [h1]"), ("h2", "Mixed results [h2]"), ("h1", "After [h1]")}
    failure = cases[("h2", "Mixed results [h2]")].find("failure")
    assert failure.get("message") == "Loop with a failing item on h2: One or more items failed"
    assert cases[("h1", "Mixed results [h1]")].find("failure") is None
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")


def test_junit_unreachable_is_an_error_and_failure_names_the_task():
    root = ET.fromstring(S.junit_xml(summarise(events("failed_and_unreachable"), rc=2)))
    cases = {c.get("classname"): c for c in root.iter("testcase")}
    assert cases["h1"].find("failure").get("message") == "Fail on h1: boom here"
    error = cases["h2"].find("error")
    assert error.get("type") == "unreachable"
    assert error.get("message").startswith("Ping: ")
    assert "Failed to connect to the host via ssh" in error.get("message")
    counts = ("tests", "failures", "errors", "skipped")
    suite = root.find("testsuite")
    assert [root.get(key) for key in counts] == [suite.get(key) for key in counts] == ["2", "1", "1", "0"]


def test_junit_a_host_that_skipped_every_task_is_a_skipped_case():
    host = {"ok": 0, "skipped": 3, "failed_tasks": []}
    summary = {"plays": [{"name": "GPU nodes", "seconds": None, "hosts": {"cpu1": host, "gpu1": {**host, "ok": 2}}}]}
    root = ET.fromstring(S.junit_xml(summary))
    assert [c.get("classname") for c in root.iter("testcase") if c.find("skipped") is not None] == ["cpu1"]
    assert [root.get(key) for key in ("tests", "failures", "errors", "skipped")] == ["2", "0", "0", "1"]


def test_exit_codes():
    assert S.exit_code(summarise(events("mixed_rescued_ignored_loop"), rc=2)) == S.EXIT_FAILED
    assert S.exit_code(summarise(events("failed_and_unreachable"), rc=4)) == S.EXIT_FAILED
    only_unreachable = [e for e in events("failed_and_unreachable")
                        if e["event"] != "runner_on_failed"]
    for e in only_unreachable:
        if e["event"] == "playbook_on_stats":
            e["event_data"] = dict(e["event_data"], failures={})
    assert S.exit_code(summarise(only_unreachable, rc=4)) == S.EXIT_UNREACHABLE
    clean = [e for e in events("mixed_rescued_ignored_loop") if e["event"] != "runner_on_failed"
             or e["event_data"].get("ignore_errors")]
    for e in clean:
        if e["event"] == "playbook_on_stats":
            e["event_data"] = dict(e["event_data"], failures={}, rescued={})
    assert S.exit_code(summarise(clean, rc=0)) == S.EXIT_OK
    # ansible-playbook stopped before any play (bad --limit, syntax error): no recap, no hosts.
    assert S.exit_code(summarise([], rc=1, status="failed")) == S.EXIT_USAGE


@pytest.mark.parametrize(("res", "msg"), [
    ({"msg": "boom"}, "boom"),
    ({"stderr": "E: Unable to locate package x\n", "rc": 100}, "E: Unable to locate package x"),
    ({"results": [{"failed": False}, {"failed": True, "msg": "item two"}]}, "item two"),
    ({"rc": 3}, "non-zero return code 3"),
    ({}, "failed (no message)"),
])
def test_result_message(res, msg):
    assert S.result_message(res) == msg


def test_progress_prints_each_play_task_and_failure_as_it_comes():
    out = io.StringIO()
    progress = Progress(S.RunFold(), out)
    for event in events("failed_and_unreachable"):
        assert progress(event) is True
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("PLAY 1: ")
    assert lines[1].startswith("  task 1: ")
    assert lines[1].endswith("| ok=0 changed=0 failed=0 unreachable=0")
    assert any(line.startswith("  UNREACHABLE h2: ") for line in lines)
    assert any(line.startswith("  FAILED h1: ") for line in lines)


def test_recap_line_reads_like_ansible():
    host = dict.fromkeys(S.COUNTS, 0) | {"ok": 3, "failed": 1}
    assert S.recap_line("h1", host) == "h1 : ok=3 changed=0 unreachable=0 failed=1 skipped=0 rescued=0 ignored=0"


def test_a_role_task_is_named_as_the_play_prints_it():
    events = [
        {"event": "playbook_on_play_start", "event_data": {"play": "Preflight"}},
        {"event": "playbook_on_task_start", "event_data": {"task": "Refuse", "task_uuid": "t1"}},
        {"event": "runner_on_failed", "event_data": {"host": "n1", "task": "Refuse", "task_uuid": "t1",
                                                     "role": "gpuops.cluster.preflight", "res": {"msg": "no"}}},
    ]
    [failed] = summarise(events, rc=2)["hosts"]["n1"]["failed_tasks"]
    assert failed["task"] == "gpuops.cluster.preflight : Refuse"
