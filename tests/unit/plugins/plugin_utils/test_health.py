"""GPU health plan (plugin_utils/health.py): NVIDIA's buckets -> actions, bounded per fleet, nothing twice.

The sweeps are dicts of the shape gpu_health returns (its agreed interface: events, gpus, findings, verdict,
read_ok, cursor); the kernel-log lines in them are the formats NVIDIA documents (Xid catalog) and that public
reports quote, e.g. "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus." (NVIDIA forums).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_events import parse_events
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import empty_state
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_verdict import dcgm_findings, state_findings
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health as H
from conftest import shared_path

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
XID13 = ("NVRM: Xid (PCI:0000:07:00): 13, pid=2210, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): "
         "Out Of Range Address")


def event(code: int, bucket: str, gpu: int | None = 0, line: str = "", time: str = "t1", kind: str = "xid") -> dict:
    return {"kind": kind, "code": code, "pci": "0000:3b:00", "gpu": gpu, "immediate_action": bucket,
            "line": line or f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=0", "time": time}


def sweep(*events: dict, verdicts: dict | None = None, findings: list | None = None, read_ok: bool = True,
          cursor: str = "c2") -> dict:
    verdicts = verdicts or {0: "failed" if events else "healthy", 1: "healthy"}
    return {"events": list(events), "read_ok": read_ok, "cursor": cursor, "findings": findings or [],
            "gpus": [{"index": i, "verdict": v, "findings": []} for i, v in verdicts.items()],
            "verdict": "failed" if events else "healthy", "log_source": "text", "state_source": "nvidia-smi"}


def statuses(plan: dict) -> dict:
    return {host: hplan["status"] for host, hplan in plan["hosts"].items()}


def test_every_bucket_of_nvidias_sheet_has_a_behaviour():
    rows = list(csv.DictReader(shared_path("xid", "resolution-buckets.csv").open(encoding="utf-8")))
    assert len(rows) >= 30  # noqa: PLR2004 -- the sheet has 33 rows
    missing = sorted({r["bucket"] for r in rows} - set(H.BUCKETS))
    assert missing == []
    for bucket in {r["bucket"] for r in rows}:
        action, why = H.decide({"bucket": bucket, "kind": "xid", "code": 1, "gpu": 0, "line": ""}, [])
        assert action in H.ACTIONS, bucket
        assert why


def test_every_catalog_action_is_a_bucket_with_a_behaviour():
    catalog = list(csv.DictReader(shared_path("xid", "xid-catalog.csv").open(encoding="utf-8")))
    named = {r["immediate_action"] for r in catalog if r["immediate_action"]}
    assert named <= set(H.BUCKETS), sorted(named - set(H.BUCKETS))


def test_an_sxid_is_never_nvsentinels_action_fatal_gets_contact_support_behaviour():
    sxid = list(csv.DictReader(shared_path("xid", "sxid-catalog.csv").open(encoding="utf-8")))
    for action in {r["nvsentinel_action"] for r in sxid}:
        item = {"kind": "sxid", "code": 12028, "gpu": None, "bucket": action}
        fatal, why = H.decide({**item, "fatal": True}, [])
        assert fatal == "quarantine"
        assert f"NVSentinel suggests {action} (advice, not NVIDIA guidance)" in why
        assert H.decide({**item, "fatal": False}, [])[0] == "review"
        assert H.decide({**item, "fatal": None}, [])[0] == "review"


def test_an_sxid_line_is_as_fatal_as_its_group():
    """Issue 36's capture shape: a continuation line (no Fatal/Non-fatal word) before its Fatal header; the group is
    fatal (gpu_health_verdict's rule), so both lines get the CONTACT_SUPPORT behaviour."""
    lines = ["nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Data {0x00000000, 0x00000000}",
             "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack timeout"]
    items = H.build_plan({"a": sweep(*parse_events(lines))}, {}, 1)["hosts"]["a"]["items"]
    assert [(i["fatal"], i["action"]) for i in items] == [(None, "quarantine"), (True, "quarantine")]


def test_the_step_of_a_workflow_is_gpu_healths_verdict_rule_on_the_sweeps_events():
    """Xid 48 with a row-remap Xid (63/64) on its GPU drains and resets, alone it resets; Xid 154 takes the recovery
    action its line printed (gpu_health_verdict.xid_judgement, the one home of the rule)."""
    dbe, remap = event(48, "WORKFLOW_XID_48", gpu=2), event(63, "IGNORE", gpu=2)
    item = H.build_plan({"a": sweep(dbe, remap)}, {}, 1)["hosts"]["a"]["items"][0]
    assert item["action"] == "reset_gpu"
    assert "DRAIN_AND_RESET" in item["why"]
    assert "step RESET_GPU" in H.build_plan({"a": sweep(dbe)}, {}, 1)["hosts"]["a"]["items"][0]["why"]
    x154 = {**event(154, "XID_154", gpu=0, line="Xid 154"), "recovery_action": "Node Reboot Required"}
    assert H.build_plan({"a": sweep(x154)}, {}, 1)["hosts"]["a"]["items"][0]["action"] == "reboot"
    pending = {"gpu": 1, "check": "row_remap_pending", "severity": "degraded", "action": "RESET_GPU", "step": None,
               "evidence": "Remapped Rows: Pending = Yes"}
    assert H.build_plan({"a": sweep(findings=[pending])}, {}, 1)["hosts"]["a"]["action"] == "reset_gpu"
    report_only = {**pending, "check": "throttle_thermal", "action": "INVESTIGATE"}
    assert H.build_plan({"a": sweep(findings=[report_only])}, {}, 1)["hosts"]["a"]["action"] == "review"


@pytest.mark.parametrize(("bucket", "action"), [
    ("RESTART_APP", "notify_owner"), ("IGNORE", "none"), ("RESET_GPU", "reset_gpu"), ("RESTART_BM", "reboot"),
    ("CONTACT_SUPPORT", "quarantine"), ("CHECK_MECHANICALS", "quarantine"), ("UNKNOWN", "review"),
    ("no such bucket", "review")])
def test_fixed_buckets(bucket, action):
    assert H.decide({"bucket": bucket, "gpu": 0}, [])[0] == action


def test_xid_48_solo_resets_and_with_63_drains_and_resets():
    dbe = {"kind": "xid", "code": 48, "gpu": 0, "bucket": "WORKFLOW_XID_48"}
    remap = {"kind": "xid", "code": 63, "gpu": 0, "bucket": "IGNORE"}
    # the step is gpu_health_verdict's rule (module_utils), called here for an event no finding names a step for
    assert H.decide(dbe, [dbe]) == ("reset_gpu", "WORKFLOW_XID_48: gpu_health's step RESET_GPU: reset the GPU; a "
                                                 "reboot is not needed")
    action, why = H.decide(dbe, [dbe, remap])
    assert action == "reset_gpu"
    assert "DRAIN_AND_RESET" in why


def test_xid_45_restarts_fabric_manager_only_alone():
    pre = {"kind": "xid", "code": 45, "gpu": 2, "bucket": "WORKFLOW_XID_45"}
    other = {"kind": "xid", "code": 79, "gpu": 2, "bucket": "RESTART_BM"}
    assert H.decide(pre, [pre])[0] == "restart_fm"
    assert H.decide(pre, [pre, other])[0] == "none"


@pytest.mark.parametrize("bucket", ["IGNORE (sympathetic)", "SYMPATHETIC_REPORT_SOLO"])
def test_a_sympathetic_event_follows_the_others_on_its_gpu_and_alone_is_reviewed(bucket):
    item, other = {"bucket": bucket, "gpu": 0}, {"kind": "xid", "code": 79, "gpu": 0, "bucket": "RESTART_BM"}
    assert H.decide(item, [item])[0] == "review"
    assert H.decide(item, [item, {**other, "gpu": 1}])[0] == "review"  # another GPU's event is no cause
    assert H.decide(item, [item, other])[0] == "none"


def test_an_nvlink_failure_follows_a_link_down_and_without_one_is_reviewed():
    item = {"bucket": "CHECK_NVLINK_FAILURE_FLOW", "gpu": 0}
    assert H.decide(item, [item])[0] == "review"
    assert H.decide(item, [item, {"check": "nvlink_down", "gpu": 0}])[0] == "none"


def test_xid_13_once_tells_the_owner_and_repeated_asks_for_diagnostics():
    one = {"kind": "xid", "code": 13, "gpu": 1, "bucket": "WORKFLOW_XID_13"}
    two = dict(one)
    assert H.decide(one, [one])[0] == "notify_owner"
    assert H.decide(one, [one, two])[0] == "review"


@pytest.mark.parametrize(("regs", "action"), [
    ("0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0", "none"),  # bit 0: ignorable
    ("0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0", "quarantine"),  # bit 16: mechanical
    ("0x200000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0", "quarantine"),  # bit 21: marginal SI
    ("0x10, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0", "review"),  # bit 4: ECC/parity, report if it repeats
])
def test_xid_74_decodes_the_first_register(regs, action):
    line = f"NVRM: Xid (PCI:0000:07:00): 74, pid=0, NVLink: fatal error detected on link 3({regs})"
    xid74 = {"kind": "xid", "code": 74, "gpu": 0, "bucket": "WORKFLOW_NVLINK_ERR"}
    assert H.decide({**xid74, "line": line}, [])[0] == action
    assert H.decide({**xid74, "line": "74"}, [])[0] == "review"  # no register words: an operator decodes


@pytest.mark.parametrize(("recovery", "action"), [
    ("Node Reboot Required", "reboot"), ("GPU Reset Required", "reset_gpu"), ("Drain and Reset", "reset_gpu"),
    ("Drain P2P", "notify_owner"), ("None", "none"), ("PF FLR", "review")])
def test_xid_154_follows_the_recovery_action_it_prints(recovery, action):
    """gpu_health reads the recovery action from the line (its parser and verdict); the plan acts on it."""
    line = f"NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 ({recovery})"
    plan = H.build_plan({"a": sweep(*parse_events([line]))}, {}, 1)
    assert [i["action"] for i in plan["hosts"]["a"]["items"]] == [action]


def test_nvlink5_fatal_takes_the_node_out_and_nonfatal_is_reviewed():
    """gpu_health's parser reads Fatal/Nonfatal from the line; the plan acts on it."""
    fatal = ("NVRM: Xid (PCI:0000:1b:00): 145, RLW_REMAP Fatal XC0 i0 Link 00 "
             "(0x004500c7 0x00000000 0x0 0x0 0x0 0x0 0x0)")
    for line, action in ((fatal, "quarantine"), (fatal.replace("Fatal", "Nonfatal"), "review")):
        assert H.build_plan({"a": sweep(*parse_events([line]))}, {}, 1)["hosts"]["a"]["action"] == action


def test_an_override_replaces_the_buckets_action():
    action, why = H.decide({"bucket": "RESTART_APP", "gpu": 0}, [], {"RESTART_APP": "quarantine"})
    assert action == "quarantine"
    assert "health_action_overrides[RESTART_APP]" in why


def test_xid_79_plans_a_reboot_of_that_host_and_nothing_for_the_healthy_one():
    plan = H.build_plan({"node-a": sweep(event(79, "RESTART_BM", line=XID79)), "node-b": sweep()}, {}, 1)
    a, b = plan["hosts"]["node-a"], plan["hosts"]["node-b"]
    assert (a["status"], a["action"], list(a["gpus_out"])) == ("act", "reboot", ["0"])
    assert a["gpus_out"]["0"]["event"] == "Xid 79"
    assert (b["status"], b["action"], b["items"]) == ("clear", "none", [])


def test_xid_13_changes_nothing_on_the_node():
    plan = H.build_plan({"node-a": sweep(event(13, "RESTART_APP", line=XID13))}, {}, 1)
    host = plan["hosts"]["node-a"]
    assert host["action"] == "notify_owner"
    assert host["gpus_out"] == {}


def test_a_host_whose_sweep_failed_to_read_is_never_acted_on():
    plan = H.build_plan({"node-a": sweep(event(79, "RESTART_BM"), read_ok=False)}, {}, 3)
    assert plan["hosts"]["node-a"]["status"] == "unreadable"
    assert plan["hosts"]["node-a"]["action"] == "none"


def test_an_unreadable_host_with_workspaces_on_record_restarts_none():
    # the state of a run that stopped workspaces (schema 2): an unreadable sweep starts none of them again (this
    # raised KeyError 'restart' until the unreadable plan carried the key; found by molecule health)
    state = {"schema": 2, "hosts": {"node-a": {"stopped_containers": ["ws-alice"], "stopped": ["ws-alice"]}}}
    plan = H.build_plan({"node-a": sweep(event(79, "RESTART_BM"), read_ok=False)}, state, 3)
    assert plan["hosts"]["node-a"]["status"] == "unreadable"
    assert plan["hosts"]["node-a"]["containers"] == []


def test_never_more_than_max_unavailable_nodes_out_at_once():
    sweeps = {f"n{i}": sweep(event(79, "RESTART_BM")) for i in range(3)}
    plan = H.build_plan(sweeps, {}, 1)
    assert statuses(plan) == {"n0": "act", "n1": "deferred", "n2": "deferred"}
    assert "health_max_unavailable" in plan["hosts"]["n1"]["reason"]
    # a node already out of service (the state says so) counts against the limit
    held = {"hosts": {"n9": {"out_of_service": {"0": {"event": "Xid 79", "pending": "reboot"}}}}}
    assert statuses(H.build_plan(sweeps, held, 2)) == {"n0": "act", "n1": "deferred", "n2": "deferred"}


def test_quarantine_goes_before_reboot_when_only_one_may_go():
    sweeps = {"a": sweep(event(79, "RESTART_BM")), "b": sweep(event(61, "CONTACT_SUPPORT"))}
    assert statuses(H.build_plan(sweeps, {}, 1)) == {"a": "deferred", "b": "act"}


def test_a_second_run_with_nothing_new_plans_nothing():
    first = H.build_plan({"a": sweep(event(79, "RESTART_BM"))}, {}, 1)
    keys = [i["key"] for i in first["hosts"]["a"]["items"]]
    state = {"hosts": {"a": {"handled": keys, "cursor": "c2",
                             "out_of_service": {"0": {"event": "Xid 79", "pending": "reboot"}}}}}
    # the cursor hides the old event; the GPU stays out (its reboot is pending) and nothing is done
    again = H.build_plan({"a": sweep(verdicts={0: "healthy"})}, state, 1)
    assert again["hosts"]["a"]["status"] == "clear"
    assert again["hosts"]["a"]["gpus_back"] == []
    # even when the same event is read again (no cursor), a handled item is not acted on twice
    replay = H.build_plan({"a": sweep(event(79, "RESTART_BM"))}, state, 1)
    assert replay["hosts"]["a"]["status"] == "clear"


def test_a_gpu_comes_back_once_serviced_and_healthy():
    state = {"hosts": {"a": {"out_of_service": {"0": {"event": "Xid 79", "pending": None}}}}}
    plan = H.build_plan({"a": sweep(verdicts={0: "healthy"})}, state, 1)
    assert plan["hosts"]["a"]["gpus_back"] == ["0"]
    sick = H.build_plan({"a": sweep(verdicts={0: "degraded"})}, state, 1)
    assert sick["hosts"]["a"]["gpus_back"] == []


def test_state_findings_map_to_actions_and_kernel_log_findings_are_not_counted_twice():
    findings = [{"gpu": 1, "check": "row_remap_failure", "severity": "failed", "evidence": "remap failure",
                 "action": "CONTACT_SUPPORT"},
                {"gpu": 0, "check": "xid", "severity": "failed", "evidence": XID79, "action": "RESTART_BM"},
                {"gpu": 0, "check": "throttle_thermal", "severity": "degraded", "evidence": "thermal", "action": ""}]
    plan = H.build_plan({"a": sweep(event(79, "RESTART_BM"), findings=findings)}, {}, 1)
    items = plan["hosts"]["a"]["items"]
    assert [(i["source"], i["action"]) for i in items] == [("event", "reboot"), ("finding", "quarantine"),
                                                           ("finding", "review")]
    assert plan["hosts"]["a"]["action"] == "quarantine"
    assert sorted(plan["hosts"]["a"]["gpus_out"]) == ["0", "1"]


def test_a_state_finding_is_acted_on_by_the_bucket_gpu_health_names():
    """gpu_health names a bucket for each state and DCGM finding (gpu_health_verdict), and that bucket decides: an
    NVLink down (INVESTIGATE) is reviewed, a narrower PCIe link (CHECK_MECHANICALS) quarantined, a DCGM WARN reviewed
    and a FAIL quarantined (docs/operations.md, after "What each bucket does")."""
    state = {**empty_state(), "nvlink_links_active": [0], "nvlink_links_down": [1], "pcie_width_current": 8,
             "pcie_width_max": 16}
    found = state_findings({"index": 0, "state": state})
    result = {"category": "Hardware", "test": "memory", "gpus": [0], "warnings": [], "info": []}
    found += dcgm_findings({"level": 2, "results": [{**result, "status": "warn"}, {**result, "status": "fail"}]}, {0})
    items = H.build_plan({"a": sweep(findings=found)}, {}, 1)["hosts"]["a"]["items"]
    assert [(i["check"], i["action"]) for i in items] == [("nvlink_down", "review"), ("pcie_degraded", "quarantine"),
                                                          ("dcgm_diag", "review"), ("dcgm_diag", "quarantine")]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"max_unavailable": 0}, "health_max_unavailable is 0; expected a whole number >= 1"),
    ({"max_unavailable": True}, "health_max_unavailable is True"),
    ({"overrides": {"RESTART_BM": "nuke"}}, "health_action_overrides['RESTART_BM'] is 'nuke'; expected one of none"),
    ({"overrides": {"RESTRAT_BM": "reboot"}}, "health_action_overrides names 'RESTRAT_BM', which is no bucket"),
    ({"overrides": ["RESTART_BM"]}, "expected a mapping bucket -> action"),
    ({"apply": True, "plan_source": "inventory"}, "health_apply is true, but the plan is the inventory one"),
    ({"dcgm_level": 4}, "health_dcgm_level is 4; expected 0 (no DCGM diag), 1 (quick deployment checks)"),
    ({"dcgm_level": True}, "health_dcgm_level is True"),
])
def test_bad_settings_are_named(kwargs, needle):
    args = {"max_unavailable": 1, "overrides": {}, "apply": False, "plan_source": "preflight", **kwargs}
    problems = H.settings_problems(**args)
    assert any(needle in p for p in problems), problems


@pytest.mark.parametrize(("name", "value", "needle"), [
    ("health_apply", "yes please", "unable to convert to bool"),
    ("health_breaker_reset", "maybe", "unable to convert to bool"),
    ("health_return_dcgm_level", 4, "value of health_return_dcgm_level must be one of: 0, 1, 2, 3, got: 4"),
])
def test_the_argument_spec_refuses_the_types_the_settings_check_leaves_to_it(name, value, needle):
    """settings_problems judges what a spec cannot; the health role's spec, run first, refuses these."""
    specs = yaml.safe_load((Path(H.__file__).parents[2] / "roles/health/meta/argument_specs.yml").read_text())
    found = ArgumentSpecValidator(specs["argument_specs"]["main"]["options"]).validate({name: value})
    assert any(needle in m for m in found.error_messages), found.error_messages


def test_good_settings_pass():
    assert H.settings_problems(2, {"RESTART_APP": "none", "row_remap_pending": "quarantine"}, True, "preflight") == []
    for level in (None, 0, 3):  # health_dcgm_level unset (its default) or a dcgmi diag level
        assert H.settings_problems(1, {}, False, "preflight", level) == []


def test_an_event_that_names_no_gpu_takes_every_gpu_of_the_host_out():
    plan = H.build_plan({"a": sweep(event(79, "RESTART_BM", gpu=None, line=XID79))}, {}, 1)
    assert sorted(plan["hosts"]["a"]["gpus_out"]) == ["0", "1"]


def test_the_recovery_action_and_fatal_fields_of_gpu_health_are_used_when_present():
    xid154 = {"kind": "xid", "code": 154, "gpu": 0, "bucket": "XID_154", "line": "Xid 154",
              "recovery_action": "Node Reboot Required"}
    assert H.decide(xid154, [])[0] == "reboot"
    nvlink5 = {"kind": "xid", "code": 145, "gpu": 0, "bucket": "WORKFLOW_NVLINK5_ERR", "line": "Xid 145",
               "fatal": False}
    assert H.decide(nvlink5, [])[0] == "review"
    assert H.decide({**nvlink5, "fatal": True}, [])[0] == "quarantine"


def test_health_release_gives_back_a_gpu_whose_remedy_the_operator_did():
    state = {"hosts": {"a": {"out_of_service": {"0": {"event": "Xid 79", "pending": "reboot"}}}}}
    healthy = sweep(verdicts={0: "healthy"})
    assert H.build_plan({"a": healthy}, state, 1)["hosts"]["a"]["gpus_back"] == []
    assert H.build_plan({"a": healthy}, state, 1, release=True)["hosts"]["a"]["gpus_back"] == ["0"]
    assert H.build_plan({"a": sweep(verdicts={0: "failed"})}, state, 1, release=True)["hosts"]["a"]["gpus_back"] == []
