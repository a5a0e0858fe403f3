"""GPU health steps (plugin_utils/health_steps.py): the kubectl argv and objects per bucket and platform, the
Compose take-out-of-service, the controller state after a run, the audit lines; and the plan/preflight side
(plan.with_out_of_service, team.out_of_service_problems, preflight's gpu_health_assignment check)."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.health import health_plan, health_record
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health as H
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_steps as S
from ansible_collections.gpuops.cluster.plugins.plugin_utils.fleet_report import host_row, render_fleet_report
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import with_out_of_service
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import gpu_health_assignment
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import out_of_service_problems
from health_settings import HOST_SETTINGS

# the plan's team.members
MEMBERS = {"alice": {"team": None, "gpus": [0, 1]}, "bob": {"team": None, "gpus": [2]},
           "carol": {"team": None, "gpus": []}}
# A label value (and taint value) as the Kubernetes API validates it.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def plan_of(code: int, bucket: str, gpu: int = 0) -> dict:
    sweep = {"read_ok": True, "cursor": "c2", "verdict": "failed", "findings": [],
             "events": [{"kind": "xid", "code": code, "gpu": gpu, "pci": "0000:3b:00", "immediate_action": bucket,
                         "line": f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=0", "time": "t1"}],
             "gpus": [{"index": i, "verdict": "failed" if i == gpu else "healthy"} for i in range(4)]}
    return H.build_plan({"node-a": sweep}, {}, 1)["hosts"]["node-a"]


def kinds(steps: list[dict]) -> list[str]:
    return [s["kind"] if s["kind"] != "kubectl" else " ".join(s["argv"][1:3]) for s in steps]


def test_kubernetes_quarantine_cordons_taints_labels_and_collects_a_bug_report():
    steps = S.host_steps("node-a", plan_of(61, "CONTACT_SUPPORT"), "kubernetes", MEMBERS, HOST_SETTINGS)
    argv = [s["argv"] for s in steps if s["kind"] == "kubectl"]
    assert argv == [["kubectl", "cordon", "node-a"],
                    ["kubectl", "annotate", "nodes", "node-a", "gpuops.io/cordoned-by=gpuops-health", "--overwrite"],
                    ["kubectl", "taint", "nodes", "node-a", "gpuops.io/unhealthy=Xid-61:NoSchedule", "--overwrite"],
                    ["kubectl", "label", "nodes", "node-a", "gpuops.io/health=quarantined", "--overwrite"]]
    taint = next(s["object"] for s in steps if "object" in s)
    assert taint == {"key": "gpuops.io/unhealthy", "value": "Xid-61", "effect": "NoSchedule"}
    assert kinds(steps) == ["cordon node-a", "annotate nodes", "mark_out", "taint nodes", "label nodes", "bug_report"]
    assert steps[-1]["argv"][-2:] == ["sh", "/var/log/gpuops/nvidia-bug-report"]  # -<UTC time> appended on the node
    assert next(s for s in steps if s["kind"] == "mark_out")["pending"] == "support"
    assert "reboot" not in kinds(steps)


def test_kubernetes_reboot_cordons_drains_reboots_sweeps_then_uncordons_only_if_healthy():
    steps = S.host_steps("node-a", plan_of(79, "RESTART_BM"), "kubernetes", MEMBERS, HOST_SETTINGS)
    assert kinds(steps) == ["cordon node-a", "annotate nodes", "mark_out", "drain node-a", "command", "reboot",
                            "validate", "back_if_healthy", "uncordon node-a", "annotate nodes", "clear_held"]
    drain = next(s["argv"] for s in steps if s["kind"] == "kubectl" and s["argv"][1] == "drain")
    assert drain == ["kubectl", "drain", "node-a", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"]
    assert [s["argv"] for s in steps[-3:-1]] == [["kubectl", "uncordon", "node-a"],
                                                 ["kubectl", "annotate", "nodes", "node-a", "gpuops.io/cordoned-by-"]]
    assert steps[-1]["gpus"] == "all"  # the whole node was rebooted and validated: every held finding ends


def test_kubernetes_reset_drains_the_gpu_pods_and_resets_only_an_idle_gpu():
    hplan = plan_of(95, "RESET_GPU", gpu=2)
    steps = S.host_steps("node-a", hplan, "kubernetes", MEMBERS, {**HOST_SETTINGS, "timeout": 120})
    assert kinds(steps)[:7] == ["cordon node-a", "annotate nodes", "mark_out", "drain_gpu_pods", "gpu_idle", "command",
                                "sweep"]
    assert steps[4] == {"kind": "gpu_idle", "gpu": "2", "argv": [
        "nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", "2"]}
    assert steps[5]["argv"] == ["nvidia-smi", "-r", "-i", "2"]


def test_compose_reboot_stops_the_workspaces_and_takes_the_gpu_out():
    steps = S.host_steps("node-a", plan_of(79, "RESTART_BM"), "compose", MEMBERS, HOST_SETTINGS)
    assert kinds(steps) == ["stop_workspaces", "mark_out", "command", "reboot", "validate", "back_if_healthy",
                            "clear_held"]
    assert steps[0]["members"] == ["alice", "bob", "carol"]  # a reboot stops every workspace of the node
    assert steps[1]["gpus"]["0"]["event"] == "Xid 79"


def test_compose_reboot_left_to_the_operator_stops_after_taking_the_gpu_out():
    steps = S.host_steps("node-a", plan_of(79, "RESTART_BM"), "compose", MEMBERS, {**HOST_SETTINGS, "reboot": False})
    assert kinds(steps) == ["stop_workspaces", "mark_out", "reboot"]
    assert steps[-1]["enabled"] is False


def test_compose_quarantine_stops_only_the_workspace_holding_the_gpu():
    steps = S.host_steps("node-a", plan_of(61, "CONTACT_SUPPORT", gpu=2), "compose", MEMBERS, HOST_SETTINGS)
    assert kinds(steps) == ["stop_workspaces", "mark_out", "bug_report"]
    assert steps[0]["members"] == ["bob"]


def test_restart_app_tells_the_owner_and_changes_nothing():
    steps = S.host_steps("node-a", plan_of(13, "RESTART_APP", gpu=1), "compose", MEMBERS, HOST_SETTINGS)
    assert kinds(steps) == ["notify"]
    assert "owner(s) alice" in steps[0]["message"]
    assert S.host_steps("node-a", plan_of(43, "IGNORE"), "kubernetes", MEMBERS, HOST_SETTINGS) == []


def test_a_deferred_host_has_no_step_not_even_a_notify():
    """playbooks/health.yml runs every host's steps: a host planned again next run (deferred, unreadable) has none."""
    xid = {"kind": "xid", "pci": "0000:3b:00", "time": "t1", "line": "NVRM: Xid"}
    sweep = {"read_ok": True, "cursor": "c2", "verdict": "failed", "findings": [],
             "events": [{**xid, "code": 79, "gpu": 0, "immediate_action": "RESTART_BM"},
                        {**xid, "code": 13, "gpu": 1, "immediate_action": "RESTART_APP"}],
             "gpus": [{"index": i, "verdict": "failed" if i == 0 else "healthy"} for i in range(2)]}
    node = {"sweep": sweep, "report_dir": "/a"}
    hosts = health_plan({"n1": node, "n2": node}, max_unavailable=1, platform="compose", members=MEMBERS)["hosts"]
    assert kinds(hosts["n1"]["steps"])[:2] == ["notify", "stop_workspaces"]
    assert (hosts["n2"]["status"], hosts["n2"]["steps"]) == ("deferred", [])
    assert kinds(S.host_steps("n2", hosts["n2"], "compose", MEMBERS, HOST_SETTINGS)) == ["notify"]


def test_giving_back_on_kubernetes_untaints_unlabels_uncordons():
    hplan = {"status": "clear", "action": "none", "items": [], "gpus_back": ["1"], "gpus_out": {},
             "cordoned_by": "gpuops"}
    steps = S.host_steps("node-a", hplan, "kubernetes", MEMBERS, HOST_SETTINGS)
    assert [s.get("argv") for s in steps[3:]] == [
        ["kubectl", "taint", "nodes", "node-a", "gpuops.io/unhealthy:NoSchedule-"],
        ["kubectl", "label", "nodes", "node-a", "gpuops.io/health-"],
        ["kubectl", "uncordon", "node-a"],
        ["kubectl", "annotate", "nodes", "node-a", "gpuops.io/cordoned-by-"]]
    assert steps[:3] == [
        {"kind": "validate", "gpus": ["1"], "bench": []},
        {"kind": "give_back", "gpus": ["1"], "members": ["alice"]},
        {"kind": "clear_held", "gpus": ["1"], "uuids": [],  # this hand-made plan read no UUID
         "why": "back in service after a passed validation (health_release)"},
    ]


def test_a_reset_gpu_back_in_service_clears_only_the_gpus_it_reset():
    steps = S.host_steps("node-a", plan_of(95, "RESET_GPU", gpu=2), "compose", MEMBERS, HOST_SETTINGS)
    assert kinds(steps)[-3:] == ["validate", "back_if_healthy", "clear_held"]
    assert steps[-1]["gpus"] == ["2"]
    assert steps[-1]["why"].startswith("back in service after a passed validation (reset_gpu: ")
    # a quarantine never goes back in this run (health_release later), a reboot left to the operator neither
    for hplan, settings in ((plan_of(61, "CONTACT_SUPPORT", gpu=2), HOST_SETTINGS),
                            (plan_of(79, "RESTART_BM"), {**HOST_SETTINGS, "reboot": False})):
        assert "clear_held" not in kinds(S.host_steps("node-a", hplan, "compose", MEMBERS, settings))


# clear_held's argument for gpu_health's release (UUIDs): each GPU going back, as the run's sweep read it
SWEPT = {"read_ok": True, "events": [], "findings": [], "gpus": [
    {"index": 0, "uuid": "GPU-5e2c", "verdict": "healthy"}, {"index": 1, "uuid": "GPU-77aa", "verdict": "healthy"},
    {"index": 2, "verdict": "healthy"}]}


@pytest.mark.parametrize(("back", "expected"), [
    (["1"], ["GPU-77aa"]),
    (["0", "1"], ["GPU-5e2c", "GPU-77aa"]),
    (["2"], []),  # the sweep read no UUID for it: no UUID to release
])
def test_clear_held_names_the_uuids_the_sweep_read(back, expected):
    previous = {"out_of_service": {gpu: {"event": "Xid 95", "pending": None} for gpu in back}}
    steps = S.host_steps("node-a", H.host_plan(SWEPT, previous, release=True), "compose", {}, HOST_SETTINGS)
    assert (steps[-1]["kind"], steps[-1]["gpus"], steps[-1]["uuids"]) == ("clear_held", back, expected)


def test_a_whole_node_remedy_releases_all():
    assert S.host_steps("node-a", plan_of(79, "RESTART_BM"), "compose", MEMBERS, HOST_SETTINGS)[-1]["uuids"] == ["all"]


CLEAR = {"kind": "clear_held", "gpus": ["0"], "why": "back in service after a passed validation (health_release)"}
RELEASED_LINE = ("gpu_health released: GPU 0 (GPU-5e2c) xid RESTART_BM, held since 1764900000: cleared (release): "
                 "health.yml by ops at 2026-12-05T01:00:00Z: GPU(s) 0 back in service after a passed validation")
PENDING = ("kube_monitoring's DaemonSet applies the request /var/lib/gpuops/gpu_health/clear.json at its next sweep "
           "(kube_monitoring_gpu_health_sweep_interval); until then GpuHealthGpuFailed keeps firing")


@pytest.mark.parametrize(("release", "expected"), [
    ({"held": [{"uuid": "GPU-5e2c"}], "cleared": [RELEASED_LINE], "skipped": ""},
     ("ok", "held finding cleared on the scheduled sweep: " + RELEASED_LINE.removeprefix("gpu_health released: "))),
    ({"held": [], "cleared": [], "skipped": ""},
     ("ok", "no held finding of GPU(s) 0 on the scheduled sweep: nothing to clear")),
    ({"held": [], "cleared": [], "skipped": "no scheduled sweep on this host (none)"},
     ("skipped", "held findings of GPU(s) 0 not cleared: no scheduled sweep on this host (none)")),
    ({"held": [{"uuid": "GPU-5e2c"}], "cleared": [], "skipped": "", "pending": PENDING},
     ("ok", f"held findings of GPU(s) 0 to be cleared: {PENDING}")),
    ({"held": [{"uuid": "GPU-5e2c"}], "cleared": [], "skipped": "", "pending": ""},
     ("failed", "the held findings of GPU(s) 0 on the scheduled sweep were not cleared by its run "
                "(GpuHealthGpuFailed keeps firing): see journalctl -u gpuops-gpu-health-sweep")),
    ({"failed": True, "msg": "Permission denied"},
     ("failed", "the held findings of GPU(s) 0 on the scheduled sweep were not cleared (GpuHealthGpuFailed keeps "
                "firing): Permission denied")),
])
def test_clear_held_results(release, expected):
    result = S.step_result(CLEAR, {"release": release})
    assert (result["result"], result["detail"]) == expected


def test_a_failed_clear_fails_the_step_but_the_gpus_stay_back_and_the_event_handled():
    """The validation passed and the GPU went back; the sweep could not clear its held finding: the run fails (the
    audit says why) but the state keeps the GPU in service and the event handled, so the next run does not act on
    it again."""
    previous = {"out_of_service": {"0": {"event": "Xid 79", "pending": None}}, "cursor": "c1"}
    hplan = H.host_plan({"read_ok": True, "cursor": "c2", "events": [], "findings": [],
                         "gpus": [{"index": 0, "verdict": "healthy"}]}, previous, release=True)
    steps = S.host_steps("node-a", hplan, "compose", {}, HOST_SETTINGS)
    assert [s["kind"] for s in steps] == ["validate", "give_back", "clear_held"]
    done = [{**steps[0], "result": "ok"}, {**steps[1], "result": "ok"}, {**steps[2], "result": "failed"}]
    entry = S.next_state({"hosts": {"node-a": previous}}, "node-a", hplan, done, "c2", "t")["hosts"]["node-a"]
    assert (entry["out_of_service"], entry["cursor"]) == ({}, "c2")


@pytest.mark.parametrize("reason", ["Xid 79", "row_remap_failure: remapping failed on bank 3", "x" * 80, "--", "é"])
def test_taint_values_are_valid_label_values(reason):
    value = S.taint(reason)["value"]
    assert LABEL_VALUE.match(value)
    assert 0 < len(value) <= 63  # noqa: PLR2004


def test_gpu_pods_are_the_running_pods_on_the_node_that_ask_for_gpus():
    pods = {"items": [
        {"metadata": {"namespace": "team-a", "name": "train-0"}, "status": {"phase": "Running"},
         "spec": {"nodeName": "node-a", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        {"metadata": {"namespace": "team-a", "name": "cpu"}, "status": {"phase": "Running"},
         "spec": {"nodeName": "node-a", "containers": [{"resources": {"limits": {"cpu": "1"}}}]}},
        {"metadata": {"namespace": "team-b", "name": "done"}, "status": {"phase": "Succeeded"},
         "spec": {"nodeName": "node-a", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}},
        {"metadata": {"namespace": "team-b", "name": "elsewhere"}, "status": {"phase": "Running"},
         "spec": {"nodeName": "node-b", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}]}
    assert S.gpu_pods(pods, "node-a", 60) == [{"namespace": "team-a", "name": "train-0", "argv": [
        "kubectl", "delete", "pod", "-n", "team-a", "train-0", "--wait=true", "--timeout=60s"]}]


def test_next_state_records_the_gpu_out_and_moves_the_cursor():
    hplan = plan_of(79, "RESTART_BM")
    steps = S.host_steps("node-a", hplan, "compose", MEMBERS, {**HOST_SETTINGS, "reboot": False})
    done = [{**s, "result": "skipped" if s["kind"] == "reboot" else "ok"} for s in steps]
    state = S.next_state({}, "node-a", hplan, done, "c2", "2026-12-02T05:00:00Z")
    entry = state["hosts"]["node-a"]
    assert entry["cursor"] == "c2"
    assert entry["out_of_service"]["0"]["event"] == "Xid 79"
    assert entry["out_of_service"]["0"]["pending"] == "reboot"  # the reboot was not done: not given back yet
    assert entry["handled"] == [hplan["items"][0]["key"]]
    # the next run with nothing new: nothing planned, nothing done, the state unchanged but for the time
    again = H.build_plan({"node-a": {"read_ok": True, "events": [], "findings": [], "cursor": "c2",
                                     "gpus": [{"index": 0, "verdict": "healthy"}]}}, state, 1)
    assert (again["hosts"]["node-a"]["status"], again["hosts"]["node-a"]["gpus_back"]) == ("clear", [])
    # released by the operator after the repair, then healthy: given back
    released = S.next_state(state, "node-a", again["hosts"]["node-a"], [], "c2", "t3", release=True)
    back = H.build_plan({"node-a": {"read_ok": True, "events": [], "findings": [], "cursor": "c2",
                                    "gpus": [{"index": 0, "verdict": "healthy"}]}}, released, 1)
    assert back["hosts"]["node-a"]["gpus_back"] == ["0"]
    assert entry["stopped"] == ["alice", "bob", "carol"]  # the reboot stopped every workspace of the node
    steps = S.host_steps("node-a", back["hosts"]["node-a"], "compose", MEMBERS, HOST_SETTINGS)
    give = [{**s, "result": "ok"} for s in steps]
    assert give[0] == {"kind": "validate", "gpus": ["0"], "bench": [], "result": "ok"}  # back: a validation run
    assert give[1]["members"] == ["alice", "bob", "carol"]  # every workspace it stopped starts again
    after = S.next_state(released, "node-a", back["hosts"]["node-a"], give, "c2", "t4")["hosts"]["node-a"]
    assert after["out_of_service"] == {}
    assert "stopped" not in after


def test_a_reboot_done_and_a_healthy_sweep_give_the_gpu_back_at_once():
    hplan = plan_of(79, "RESTART_BM")
    steps = S.host_steps("node-a", hplan, "kubernetes", MEMBERS, HOST_SETTINGS)
    done = [{**s, "result": "healthy" if s["kind"] == "back_if_healthy" else "ok"} for s in steps]
    entry = S.next_state({}, "node-a", hplan, done, "c3", "t")["hosts"]["node-a"]
    assert entry["out_of_service"] == {}
    assert entry["cordoned"] is False


def test_a_deferred_or_unreadable_host_keeps_its_state_and_cursor():
    state = {"hosts": {"node-a": {"cursor": "c1"}}}
    for status in ("deferred", "unreadable"):
        after = S.next_state(state, "node-a", {"status": status, "items": []}, [], "c9", "t")
        assert after["hosts"] == state["hosts"]


def test_a_failed_step_keeps_the_items_unhandled_and_the_cursor_where_it_was():
    hplan = plan_of(79, "RESTART_BM")
    done = [{"kind": "stop_workspaces", "members": ["alice"], "result": "failed", "detail": "docker: not found"}]
    entry = S.next_state({"hosts": {"node-a": {"cursor": "c1"}}}, "node-a", hplan, done, "c2", "t")["hosts"]["node-a"]
    assert entry["cursor"] == "c1"
    assert entry.get("handled", []) == []


def test_audit_lines_carry_time_host_gpu_event_action_result():
    hplan = plan_of(79, "RESTART_BM")
    done = [{"kind": "mark_out", "gpus": {"0": {}}, "pending": "reboot", "result": "ok"},
            {"kind": "reboot", "enabled": False, "result": "skipped", "detail": "health_reboot is false"}]
    lines = [json.loads(line) for line in S.audit_records("node-a", done, hplan, "2026-12-02T05:00:00Z")]
    assert [(r["host"], r["gpu"], r["event"], r["action"], r["step"], r["result"]) for r in lines] == [
        ("node-a", ["0"], "Xid 79", "reboot", "mark_out", "ok"),
        ("node-a", None, "Xid 79", "reboot", "reboot", "skipped")]
    assert all(r["time"] == "2026-12-02T05:00:00Z" for r in lines)
    assert all("by" not in r for r in lines)


def test_the_breaker_is_audited_by_the_same_records_with_who_and_no_host():
    """plan.yml's breaker line (tripped now, or reset) is one of these records: host None, and who ran it."""
    done = [{"kind": "breaker_reset", "result": "ok", "by": "alice", "detail": "health_breaker_reset=true"}]
    [line] = [json.loads(line) for line in S.audit_records(None, done, {}, "2026-12-02T05:00:00Z")]
    assert (line["host"], line["step"], line["by"], line["result"], line["detail"]) == (
        None, "breaker_reset", "alice", "ok", "health_breaker_reset=true")
    # record.yml's one filter: these lines, and the state where the plan's breaker record alone changes (no host
    # entry, no schema); a record equal to the state's changes nothing
    state = {"hosts": {"node-a": {"cursor": "c1"}}, "breaker": {"tripped": True}}
    record = {"tripped": False, "resets": [{"time": "2026-12-02T05:00:00Z", "by": "alice"}]}
    out = health_record(state, host=None, host_plan={}, done=done, now="2026-12-02T05:00:00Z", breaker=record)
    assert (out["state"], out["differs"]) == ({"hosts": {"node-a": {"cursor": "c1"}}, "breaker": record}, True)
    assert [json.loads(line)["step"] for line in out["lines"]] == ["breaker_reset"]
    assert health_record(state, host=None, breaker=state["breaker"]) == {"lines": [], "state": state, "differs": False}


def test_preflight_refuses_a_member_given_a_gpu_out_of_service(tmp_path):
    (tmp_path / "health").mkdir()
    gpu1 = {"event": "Xid 79", "action": "reboot", "since": "2026-12-02T05:00:00Z"}
    state = {"hosts": {"node-a": {"out_of_service": {"1": gpu1}}}}
    (tmp_path / "health" / "state.json").write_text(json.dumps(state))
    plan = with_out_of_service({"hosts": {"node-a": {}, "node-b": {}}}, str(tmp_path))
    assert plan["hosts"]["node-a"]["out_of_service"]["1"]["event"] == "Xid 79"
    assert plan["hosts"]["node-b"]["out_of_service"] == {}
    members = [{"name": name, **member} for name, member in MEMBERS.items()]  # preflight reads gpuops_members
    problems = out_of_service_problems(members, plan["hosts"]["node-a"]["out_of_service"], "node-a")
    assert len(problems) == 1
    assert "member alice is given GPU 1 of node-a, which is out of service since 2026-12-02T05:00:00Z: Xid 79" in \
        problems[0]
    check = gpu_health_assignment(members, plan["hosts"]["node-a"]["out_of_service"], "node-a")
    assert check["ok"] is False
    assert check["name"] == "gpu_health_assignment"
    # nobody on GPU 3: the check passes and says which GPUs are out
    fine = gpu_health_assignment(members, {"3": {"event": "Xid 48"}}, "node-a")
    assert (fine["ok"], fine["msg"]) == (True, "GPU(s) 3 out of service; no member is given one")


def test_no_state_file_means_no_gpu_out_of_service(tmp_path):
    assert with_out_of_service({"hosts": {"a": {}}}, str(tmp_path))["hosts"]["a"]["out_of_service"] == {}
    (tmp_path / "health").mkdir()
    (tmp_path / "health" / "state.json").write_text("{not json")
    assert with_out_of_service({"hosts": {"a": {}}}, str(tmp_path))["hosts"]["a"]["out_of_service"] == {}


@pytest.mark.parametrize(("step", "runs", "kwargs", "expected"), [
    ({"kind": "gpu_idle", "gpu": "2"}, {"command": {"rc": 0, "stdout": "1843, /usr/bin/python3\n"}}, {}, "failed"),
    ({"kind": "gpu_idle", "gpu": "2"}, {"command": {"rc": 0, "stdout": ""}}, {}, "ok"),
    ({"kind": "gpu_idle", "gpu": "2"}, {"command": {"rc": 9, "stderr": "No devices were found"}}, {}, "failed"),
    ({"kind": "reboot", "enabled": False, "host": "node-a"}, {"reboot": {"skipped": True}}, {}, "skipped"),
    ({"kind": "kubectl", "argv": ["kubectl", "cordon", "a"]}, {"command": {"rc": 1, "stderr": "forbidden"}}, {},
     "failed"),
    ({"kind": "kubectl", "argv": ["kubectl", "cordon", "a"]}, {"command": {"rc": 0}}, {}, "ok"),
    ({"kind": "kubectl", "argv": ["kubectl", "cordon", "a"]}, {"command": {"skipped": True}}, {"check_mode": True},
     "skipped"),
    ({"kind": "drain_gpu_pods"}, {"pods": {"rc": 0}, "delete": {"results": [{"rc": 0}, {"rc": 1, "stderr": "x"}]}},
     {}, "failed"),
    ({"kind": "sweep"}, {"resweep": {"read_ok": False}}, {}, "failed"),
    # back_if_healthy runs only after a passed validate (a failed one stops the host's steps, step.yml)
    ({"kind": "back_if_healthy", "gpus": ["0"]}, {"start": {"rc": 0}}, {}, "healthy"),
    ({"kind": "back_if_healthy", "gpus": ["0"]}, {"start": {"skipped": True}}, {}, "healthy"),  # no workspace
    ({"kind": "back_if_healthy", "gpus": ["0"]}, {"start": {"rc": 1, "stderr": "x"}}, {}, "failed"),
])
def test_step_results(step, runs, kwargs, expected):
    assert S.step_result(step, runs, **kwargs)["result"] == expected


def test_a_busy_gpu_is_not_reset_and_says_who_holds_it():
    found = S.step_result({"kind": "gpu_idle", "gpu": "2"}, {"command": {"rc": 0, "stdout": "1843, /usr/bin/python3"}})
    assert found["detail"].startswith("GPU 2 is held by 1843, /usr/bin/python3: not reset")


def test_healthy_again_needs_a_read_and_every_gpu_taken_out_healthy():
    sweep = {"read_ok": True, "verdict": "degraded", "gpus": [{"index": 0, "verdict": "healthy"},
                                                              {"index": 1, "verdict": "degraded"}]}
    assert S.healthy_again(sweep, ["0"]) is True
    assert S.healthy_again(sweep, ["0", "1"]) is False
    assert S.healthy_again({**sweep, "read_ok": False}, ["0"]) is False
    assert S.healthy_again({**sweep, "verdict": "failed"}, ["0"]) is False


def test_the_sweep_after_a_reset_says_whether_the_reboot_after_it_is_needed():
    """step.yml skips a step with only_if_unhealthy (the reboot after a reset) when the sweep step's result says
    healthy: the sweep step carries the GPUs taken out, and its result judges them (in check mode too: the sweep is
    read-only and runs)."""
    hplan = {**plan_of(109, "RESET_GPU"), "gpus_out": {"0": {}}}
    steps = S.host_steps("node-a", hplan, "compose", MEMBERS, HOST_SETTINGS)
    sweep = next(step for step in steps if step["kind"] == "sweep")
    assert [step["only_if_unhealthy"] for step in steps if "only_if_unhealthy" in step] == [sweep["gpus"]] * 2
    read = {"read_ok": True, "verdict": "degraded", "gpus": [{"index": 0, "verdict": "healthy"}]}
    assert S.step_result(sweep, {"resweep": read})["healthy"] is True
    assert S.step_result(sweep, {"resweep": read}, check_mode=True)["healthy"] is True
    bad = {**read, "gpus": [{"index": 0, "verdict": "failed"}]}
    assert S.step_result(sweep, {"resweep": bad})["healthy"] is False


def test_a_state_finding_no_longer_seen_is_forgotten_so_a_recurrence_is_acted_on_again():
    finding, event = "finding:row_remap_pending:0", "xid:79:0:t1"
    state = {"hosts": {"a": {"handled": [finding, event]}}}
    gone = {"status": "clear", "action": "none", "items": []}
    assert S.next_state(state, "a", gone, [], "c3", "t2")["hosts"]["a"]["handled"] == [event]
    seen = {**gone, "items": [{"key": finding}]}
    assert S.next_state(state, "a", seen, [], "c3", "t2")["hosts"]["a"]["handled"] == [finding, event]


def test_a_run_with_nothing_new_leaves_the_state_byte_for_byte():
    hplan = plan_of(79, "RESTART_BM")
    steps = S.host_steps("node-a", hplan, "compose", MEMBERS, {**HOST_SETTINGS, "reboot": False})
    done = [{**s, "result": "ok"} for s in steps]
    state = S.next_state({}, "node-a", hplan, done, "c2", "t1")
    again = H.build_plan({"node-a": {"read_ok": True, "events": [], "findings": [], "cursor": "c2",
                                     "gpus": [{"index": 0, "verdict": "healthy"}]}}, state, 1)["hosts"]["node-a"]
    assert S.next_state(state, "node-a", again, [], "c2", "t2") == state


def test_the_fleet_report_shows_each_hosts_health():
    hplan = plan_of(79, "RESTART_BM")
    state = {"hosts": {"node-a": {"out_of_service": {"0": {"event": "Xid 79"}}}}}
    sweep = {"gpus": [{"index": 0, "name": "NVIDIA H100 NVL"}, {"index": 1, "name": "NVIDIA H100 NVL"}]}
    entry = S.fleet_entry("node-a", hplan, state, sweep)
    clear = S.fleet_entry("node-b", {"status": "clear", "action": "none", "items": [], "verdict": "healthy"}, {}, sweep)
    row = host_row(entry)
    assert (row["gpus"], row["health"], row["ok"]) == ("2 x NVIDIA H100 NVL", "reboot (act); GPU 0 out of service",
                                                       False)
    assert (host_row(clear)["health"], host_row(clear)["ok"]) == ("healthy", True)
    page = render_fleet_report([entry, clear], "20261202T050000Z")
    assert "<th>Health</th>" in page
    assert "RESTART_BM: restart the bare-metal node" in page
    assert "health: not run" not in page
    assert "<th>Health</th>" not in render_fleet_report([{"host": "x"}], "t")  # validate's page is unchanged


def test_the_filter_gives_each_host_its_own_reboot_timeout_and_report_dir():
    """health.yml passes health_reboot, health_timeout and health_node_report_dir per host (group_vars differ):
    a host whose reboot is left to the operator stops before the reboot, its neighbour reboots."""
    sweep = {"read_ok": True, "cursor": "c2", "verdict": "failed", "findings": [],
             "events": [{"kind": "xid", "code": 79, "gpu": 0, "pci": "0000:3b:00", "immediate_action": "RESTART_BM",
                         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid=0", "time": "t1"}],
             "gpus": [{"index": i, "verdict": "failed" if i == 0 else "healthy"} for i in range(4)]}
    nodes = {"node-a": {"sweep": sweep, "reboot": True, "timeout": 600, "report_dir": "/a"},
             "node-b": {"sweep": sweep, "reboot": "false", "timeout": 60, "report_dir": "/b"}}
    plan = health_plan(nodes, max_unavailable=2, platform="compose", members=MEMBERS)
    a, b = plan["hosts"]["node-a"]["steps"], plan["hosts"]["node-b"]["steps"]
    assert "validate" in kinds(a)
    assert kinds(b) == ["stop_workspaces", "mark_out", "reboot"]
    assert b[-1]["enabled"] is False
    assert next(s for s in a if s["kind"] == "reboot").get("enabled", True) is True
    support = {**sweep, "events": [{**sweep["events"][0], "code": 61, "immediate_action": "CONTACT_SUPPORT"}]}
    nodes = {"node-a": {"sweep": support, "report_dir": "/a"}, "node-b": {"sweep": support, "report_dir": "/b"}}
    plan = health_plan(nodes, max_unavailable=2, platform="compose")
    dests = [plan["hosts"][h]["steps"][-1]["dest"] for h in ("node-a", "node-b")]
    assert dests == ["/a/nvidia-bug-report", "/b/nvidia-bug-report"]


def test_the_filter_reads_each_hosts_opt_out_and_says_where_its_sweep_came_from():
    """Each host's record (roles/health sweep.yml's __health_node): its own health_remediation, where its sweep came
    from (the plan carries it into health.json); a host with no record is unreadable, never acted on."""
    sweep = {"read_ok": True, "cursor": "c2", "verdict": "failed", "findings": [],
             "events": [{"kind": "xid", "code": 79, "gpu": 0, "pci": "0000:3b:00", "immediate_action": "RESTART_BM",
                         "line": "NVRM: Xid (PCI:0000:3b:00): 79, pid=0", "time": "t1"}],
             "gpus": [{"index": i, "verdict": "failed" if i == 0 else "healthy"} for i in range(2)]}
    came = {"source": "sweep", "why": "the scheduled sweep's last result", "age": 12.0}
    plan = health_plan({"node-a": {"sweep": sweep, "from": came}, "node-b": {"sweep": sweep, "remediation": "false"},
                        "node-c": {}}, max_unavailable=3, platform="compose")
    hosts = plan["hosts"]
    assert (hosts["node-a"]["status"], hosts["node-a"]["swept"]) == ("act", came)
    assert hosts["node-b"]["status"] == "opted_out"
    assert "health_remediation is false" in hosts["node-b"]["reason"]
    assert (hosts["node-c"]["status"], hosts["node-c"]["steps"]) == ("unreadable", [])
