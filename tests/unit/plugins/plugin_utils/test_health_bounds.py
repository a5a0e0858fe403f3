"""GPU health over time (issue 38 §2, plugin_utils/health_bounds.py through health.build_plan and
health_steps.host_steps/next_state): the circuit breaker, escalation to "service required" and its release, the
opt-out, who cordoned a node (the kubectl argv), the workspaces it stopped, and reset before reboot.

The Xid lines are NVIDIA's formats as in tests/unit/plugins/plugin_utils/test_health_steps.py; each run below goes
through the same functions health.yml calls: plan -> steps -> (results) -> next_state -> the next run's plan."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health as H
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_bounds as B
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_steps as S
from health_settings import HOST_SETTINGS

NODES = ("node-a", "node-b", "node-c")
MEMBERS = {"alice": {"team": None, "gpus": [0]}, "bob": {"team": None, "gpus": [1]}}  # the plan's team.members
DEFAULTS = {"fleet_size": 3, "breaker_fraction": 0.5, "breaker_window": 300, "escalate_after": 1,
            "escalate_window": 7 * 86400, "by": "tester"}


def sweep(code: int | None = None, bucket: str = "RESTART_BM", gpu: int = 0, time: str = "t1") -> dict:
    """A gpu_health result of a 2-GPU host: one Xid on ``gpu`` (none when code is None)."""
    events = [] if code is None else [{"kind": "xid", "code": code, "gpu": gpu, "pci": "0000:3b:00",
                                       "immediate_action": bucket, "time": time,
                                       "line": f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=0"}]
    return {"read_ok": True, "cursor": f"c-{time}", "verdict": "failed" if events else "healthy", "findings": [],
            "events": events, "gpus": [{"index": i, "verdict": "failed" if events and i == gpu else "healthy"}
                                       for i in range(2)]}


def plan(sweeps: dict, state: dict, now: str, **bounds) -> dict:
    return H.build_plan(sweeps, state, 3, {}, bool(bounds.pop("release", False)), {**DEFAULTS, "now": now, **bounds})


def applied(state: dict, fleet: dict, now: str, platform: str = "compose", results: dict | None = None) -> dict:
    """Every acting host's steps run ok (``results``: kind -> result instead), its state written, as act.yml does."""
    breaker = (fleet.get("breaker") or {}).get("record")  # the plan's breaker record, as plan.yml records it
    state = S.next_state(state, None, {}, [], None, now, breaker=breaker)
    for host, hplan in fleet["hosts"].items():
        steps = S.host_steps(host, hplan, platform, MEMBERS, HOST_SETTINGS)
        done = [{**s, "result": (results or {}).get(s["kind"], "healthy" if s["kind"] == "back_if_healthy" else "ok")}
                for s in steps]
        state = S.next_state(state, host, hplan, done, None, now)
    return state


def quiet(*hosts: str) -> dict:
    return {h: sweep() for h in hosts}


def test_the_breaker_trips_on_the_second_node_within_the_window_and_resets_only_when_asked():
    first = plan({**quiet("node-b", "node-c"), "node-a": sweep(79)}, {}, "2026-12-04T10:00:00Z")
    assert first["hosts"]["node-a"]["status"] == "act"
    assert first["breaker"]["tripped"] is False
    state = applied({}, first, "2026-12-04T10:00:00Z")
    assert state["hosts"]["node-a"]["remediations"][0]["action"] == "reboot"
    assert state["schema"] == S.STATE_SCHEMA
    # node-b fails two minutes later: 2 of 3 nodes within 5 minutes passes 0.5 -> held, the breaker trips
    second = plan({**quiet("node-a", "node-c"), "node-b": sweep(79, time="t2")}, state, "2026-12-04T10:02:00Z")
    b = second["hosts"]["node-b"]
    assert (b["status"], second["breaker"]["tripped_now"]) == ("held", True)
    assert [(d["kind"], d["by"], d["detail"]) for d in second["breaker"]["done"]] == [
        ("breaker_tripped", "tester", second["breaker"]["reason"])]  # plan.yml's audit line, none on the first run
    assert first["breaker"]["done"] == []
    assert "circuit breaker: 1 of 3 GPU node(s) (node-a)" in b["reason"]
    assert "health_breaker_reset=true" in b["reason"]
    assert S.host_steps("node-b", b, "compose", MEMBERS, HOST_SETTINGS) == []
    state = applied(state, second, "2026-12-04T10:02:00Z")
    assert state["breaker"]["tripped"] is True
    assert "node-b" not in state["hosts"] or not state["hosts"]["node-b"].get("remediations")
    # an hour later, outside the window, it stays tripped: nothing acts until a person resets it
    later = plan({**quiet("node-a", "node-b"), "node-c": sweep(79, time="t3")}, state, "2026-12-04T11:00:00Z")
    assert later["hosts"]["node-c"]["status"] == "held"
    assert later["breaker"]["tripped"] is True
    # the reset: acts again, and the reset is recorded with its time and who
    reset = plan({**quiet("node-a", "node-b"), "node-c": sweep(79, time="t3")}, state, "2026-12-04T11:05:00Z",
                 breaker_reset=True)
    assert reset["hosts"]["node-c"]["status"] == "act"
    assert [(d["kind"], d["detail"]) for d in reset["breaker"]["done"]] == [
        ("breaker_reset", "health_breaker_reset=true")]
    state = applied(state, reset, "2026-12-04T11:05:00Z")
    assert state["breaker"]["tripped"] is False
    assert state["breaker"]["resets"] == [{"time": "2026-12-04T11:05:00Z", "by": "tester"}]


def test_a_second_failure_outside_the_window_does_not_trip_the_breaker():
    state = applied({}, plan({**quiet("node-b", "node-c"), "node-a": sweep(79)}, {}, "2026-12-04T10:00:00Z"),
                    "2026-12-04T10:00:00Z")
    second = plan({**quiet("node-a", "node-c"), "node-b": sweep(79, time="t2")}, state, "2026-12-04T10:06:00Z")
    assert second["hosts"]["node-b"]["status"] == "act"
    assert second["breaker"]["tripped"] is False


def test_a_repeat_within_the_window_escalates_to_service_required_until_released():
    t0, t1 = "2026-12-01T10:00:00Z", "2026-12-03T10:00:00Z"
    state = applied({}, plan({"node-a": sweep(79)}, {}, t0, fleet_size=1, breaker_fraction=1), t0)
    again = plan({"node-a": sweep(79, time="t2")}, state, t1, fleet_size=1, breaker_fraction=1)
    a = again["hosts"]["node-a"]
    assert a["action"] == "quarantine"
    assert a["escalated"].startswith("service required: remediated 1 time(s)")
    assert sorted(a["gpus_out"]) == ["0", "1"]  # the node is taken out: every GPU
    assert [s["kind"] for s in S.host_steps("node-a", a, "compose", MEMBERS, HOST_SETTINGS)] == [
        "stop_workspaces", "mark_out", "bug_report"]
    state = applied(state, again, t1)
    entry = state["hosts"]["node-a"]
    assert entry["service_required"]["since"] == t1
    assert entry["remediations"][-1]["escalated"] is True
    # a new event on the held node: reported, never remediated automatically
    held = plan({"node-a": sweep(95, "RESET_GPU", gpu=1, time="t3")}, state, "2026-12-03T12:00:00Z",
                fleet_size=1, breaker_fraction=1)["hosts"]["node-a"]
    assert held["status"] == "service_required"
    assert S.host_steps("node-a", held, "compose", MEMBERS, HOST_SETTINGS) == []
    assert S.next_state(state, "node-a", held, [], "c9", "t") == state
    # health_release: cleared, and the GPUs go back once the sweep finds them healthy
    release = plan({"node-a": sweep()}, state, "2026-12-04T09:00:00Z", fleet_size=1, breaker_fraction=1,
                   release=True)["hosts"]["node-a"]
    assert release["gpus_back"] == ["0", "1"]
    after = S.next_state(state, "node-a", release, [], None, "2026-12-04T09:00:00Z", release=True)
    assert "service_required" not in after["hosts"]["node-a"]


def test_a_repeat_after_the_escalation_window_is_remediated_again():
    t0 = "2026-11-01T10:00:00Z"
    state = applied({}, plan({"node-a": sweep(79)}, {}, t0, fleet_size=1, breaker_fraction=1), t0)
    again = plan({"node-a": sweep(79, time="t2")}, state, "2026-11-09T10:00:00Z", fleet_size=1, breaker_fraction=1)
    assert (again["hosts"]["node-a"]["action"], again["hosts"]["node-a"].get("escalated")) == ("reboot", None)


GET_NODES = {"items": [
    {"metadata": {"name": "node-a", "labels": {"gpuops.io/health-remediation": "disabled"}}, "spec": {}},
    {"metadata": {"name": "node-b", "labels": {}}, "spec": {"unschedulable": True}},
    {"metadata": {"name": "node-c", "annotations": {"gpuops.io/cordoned-by": "gpuops-health"}},
     "spec": {"unschedulable": True}}]}


def test_opt_out_by_host_variable_or_node_label_is_reported_never_acted_on():
    nodes = B.node_facts(GET_NODES)
    fleet = plan({"node-a": sweep(79), "node-b": sweep(79), "node-c": sweep()}, {}, "2026-12-04T10:00:00Z",
                 nodes=nodes, breaker_fraction=1)
    a = fleet["hosts"]["node-a"]
    assert a["status"] == "opted_out"
    assert "gpuops.io/health-remediation=disabled" in a["reason"]
    assert S.host_steps("node-a", a, "kubernetes", MEMBERS, HOST_SETTINGS) == []
    by_var = plan({"node-b": sweep(79)}, {}, "2026-12-04T10:00:00Z", remediation={"node-b": False},
                  breaker_fraction=1)["hosts"]["node-b"]
    assert by_var["status"] == "opted_out"
    assert "health_remediation is false" in by_var["reason"]
    assert S.next_state({}, "node-b", by_var, [], "c1", "t") == {}


def test_an_operators_cordon_is_left_alone_and_the_collections_own_is_undone():
    nodes = B.node_facts(GET_NODES)
    fleet = plan({"node-b": sweep(79), "node-c": sweep(79)}, {}, "2026-12-04T10:00:00Z", nodes=nodes,
                 breaker_fraction=1)
    operator = S.host_steps("node-b", fleet["hosts"]["node-b"], "kubernetes", MEMBERS, HOST_SETTINGS)
    assert [s["argv"] for s in operator if s["kind"] == "kubectl"] == [
        ["kubectl", "drain", "node-b", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"]]
    assert "stays cordoned" in operator[0]["message"]
    assert [s["kind"] for s in operator[-3:]] == ["validate", "back_if_healthy", "clear_held"]  # no uncordon
    ours = S.host_steps("node-c", fleet["hosts"]["node-c"], "kubernetes", MEMBERS, HOST_SETTINGS)
    assert [s["argv"] for s in ours if s["kind"] == "kubectl"][:2] == [
        ["kubectl", "cordon", "node-c"],
        ["kubectl", "annotate", "nodes", "node-c", "gpuops.io/cordoned-by=gpuops-health", "--overwrite"]]
    assert [s["argv"] for s in ours[-3:-1]] == [["kubectl", "uncordon", "node-c"],
                                                ["kubectl", "annotate", "nodes", "node-c", "gpuops.io/cordoned-by-"]]
    # the operator's node, given back later: untainted and unlabelled, never uncordoned
    state = applied({}, {"hosts": {"node-b": fleet["hosts"]["node-b"]}}, "2026-12-04T10:00:00Z", "kubernetes",
                    {"back_if_healthy": "unhealthy"})
    assert state["hosts"]["node-b"]["cordoned_by"] == "operator"  # who took it out, recorded; never undone here
    back = plan({"node-b": sweep()}, state, "2026-12-04T12:00:00Z", nodes=nodes, release=True)["hosts"]["node-b"]
    steps = S.host_steps("node-b", back, "kubernetes", MEMBERS, HOST_SETTINGS)
    argv = [s["argv"] for s in steps if s["kind"] == "kubectl"]
    assert argv == [["kubectl", "taint", "nodes", "node-b", "gpuops.io/unhealthy:NoSchedule-"],
                    ["kubectl", "label", "nodes", "node-b", "gpuops.io/health-"]]
    # once the operator has uncordoned it, a new failure is the collection's to cordon (and to undo)
    nodes["node-b"]["unschedulable"] = False
    again = plan({"node-b": sweep(79, time="t9")}, state, "2026-12-20T10:00:00Z", nodes=nodes)["hosts"]["node-b"]
    first = S.host_steps("node-b", again, "kubernetes", MEMBERS, HOST_SETTINGS)[0]
    assert first["argv"] == ["kubectl", "cordon", "node-b"]


def test_compose_starts_again_only_the_workspaces_it_stopped():
    hplan = plan({"node-a": sweep(61, "CONTACT_SUPPORT")}, {}, "2026-12-04T10:00:00Z")["hosts"]["node-a"]
    steps = S.host_steps("node-a", hplan, "compose", MEMBERS, HOST_SETTINGS)
    registered = {"workspaces": {"rc": 0, "stdout_lines": ["3f2a9c"]}, "stop": {"rc": 0}}
    stop = {**steps[0], **S.step_result(steps[0], registered)}
    assert stop["containers"] == ["3f2a9c"]  # docker ps -q: the running ones; one an operator stopped is not there
    done = [stop, *({**s, "result": "ok"} for s in steps[1:])]
    state = S.next_state({}, "node-a", hplan, done, "c1", "2026-12-04T10:00:00Z")
    assert state["hosts"]["node-a"]["stopped_containers"] == ["3f2a9c"]
    back = plan({"node-a": sweep()}, state, "2026-12-05T10:00:00Z", release=True)["hosts"]["node-a"]
    give = S.host_steps("node-a", back, "compose", MEMBERS, HOST_SETTINGS)
    assert give == [{"kind": "validate", "gpus": ["0"], "bench": []},
                    {"kind": "give_back", "gpus": ["0"], "members": ["alice"], "containers": ["3f2a9c"]},
                    {"kind": "clear_held", "gpus": ["0"], "uuids": [],
                     "why": "back in service after a passed validation (health_release)"}]
    after = S.next_state(state, "node-a", back, [{**s, "result": "ok"} for s in give], None, "t")["hosts"]["node-a"]
    assert "stopped_containers" not in after


def test_a_reset_is_tried_before_a_reboot_and_the_reboot_reason_goes_to_the_hosts_syslog():
    hplan = plan({"node-a": sweep(95, "RESET_GPU", gpu=1)}, {}, "2026-12-04T10:00:00Z")["hosts"]["node-a"]
    steps = S.host_steps("node-a", hplan, "compose", MEMBERS, HOST_SETTINGS)
    assert [(s["kind"], s.get("only_if_unhealthy")) for s in steps] == [
        ("stop_workspaces", None), ("mark_out", None), ("gpu_idle", None), ("command", None), ("sweep", None),
        ("command", ["1"]), ("reboot", ["1"]), ("validate", None), ("back_if_healthy", None), ("clear_held", None)]
    assert steps[3]["argv"] == ["nvidia-smi", "-r", "-i", "1"]
    logger = steps[5]["argv"]
    assert logger[:3] == ["logger", "-t", "gpuops-health"]
    assert "Xid 95 on GPU 1: RESET_GPU" in logger[3]
    assert steps[6]["reason"] == logger[3]
    without = S.host_steps("node-a", hplan, "compose", MEMBERS, {**HOST_SETTINGS, "reboot": False})
    assert "reboot" not in [s["kind"] for s in without]  # health_reboot false: a reset, never a reboot


def test_a_schema_1_state_plans_as_before():
    old = {"schema": 1, "hosts": {"node-a": {"cursor": "c1", "cordoned": True, "stopped": ["alice"],
                                             "out_of_service": {"0": {"event": "Xid 79", "pending": None}}}}}
    fleet = plan({"node-a": sweep()}, old, "2026-12-04T10:00:00Z")
    a = fleet["hosts"]["node-a"]
    assert (a["gpus_back"], a["cordoned_by"], "containers" in a) == (["0"], "gpuops", False)
    assert fleet["breaker"]["tripped"] is False


@pytest.mark.parametrize(("args", "fragment"), [
    ((0, "5m", 1, "7d"), "health_breaker_fraction is 0"),
    ((0.5, "five", 1, "7d"), "health_breaker_window is 'five'"),
    ((0.5, "5m", -1, "7d"), "health_escalate_after is -1"),
    ((0.5, "5m", 1, "0d"), "health_escalate_window is '0d'"),
])
def test_bad_bounds_are_named_with_the_fix(args, fragment):
    problems = B.settings_problems(*args)
    assert len(problems) == 1
    assert fragment in problems[0]
    assert "Fix:" in problems[0]


def test_good_bounds_pass_and_durations_read():
    assert B.settings_problems(0.5, "5m", 1, "7d") == []
    assert [B.seconds(v) for v in (300, "5m", "12h", "7d", "30s", "x", True)] == [300, 300, 43200, 604800, 30, None,
                                                                                  None]
