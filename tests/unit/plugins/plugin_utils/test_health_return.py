"""The validation run before a node or GPU goes back into service (plugins/plugin_utils/health_return.py), on real
outputs read by the collection's own code: gpu_health's sweep of the 2 x H100 NVL ``nvidia-smi -q`` capture
(../shared/data/nvidia-smi/query/, read in place), DCGM's ``dcgmi diag -j`` JSON that NVIDIA's DCGM repository quotes
as real output (module_utils/fixtures/dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt; the failing case edits one result of
it, as test_gpu_health_dcgm does), nccl-tests and nvbandwidth outputs with provenance (fixtures/nccl/SOURCES.md,
fixtures/membw/SOURCES.md). Then the step ``validate`` in the health steps and the state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_dcgm import run_dcgm
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health as H
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_return as R
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_steps as S
from fleet_fixture import shared_path
from gpu_facts_helpers import Commands
from health_settings import HOST_SETTINGS
from jinja2.nativetypes import NativeEnvironment
from task_tree import every_task

HERE = Path(__file__).resolve().parent
DCGM_PASS = (HERE.parents[1] / "plugins" / "module_utils" / "fixtures" /
             "dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt")
NCCL_H100_PCIE_X2 = HERE / "fixtures" / "nccl" / "h100-pcie_x2_nvlink_nccl1161_EXCERPT.txt"  # ~116 GB/s
NVB_ASSERT = HERE / "fixtures" / "membw" / "a100x8_d2d_read_ce_assert_nvbandwidth34.txt"
XID79_GPU0 = "[  981.255810] NVRM: Xid (PCI:0000:ad:00): 79, pid=0, GPU has fallen off the bus.\n"


def dcgm_output(fail_gpu: int | None = None) -> str:
    text = DCGM_PASS.read_text(encoding="utf-8")
    if fail_gpu is None:
        return text
    document = json.loads(text[text.index("{"):])
    software = document["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"]
    software[fail_gpu] = {"gpu_ids": fail_gpu, "status": "FAIL", "warnings": [f"GPU {fail_gpu} memory test failed"]}
    return json.dumps(document)


def sweep(commands: Commands | None = None, log: str = "", level: int = 2) -> dict:
    """gpu_health's sweep of the 2 x H100 NVL capture, DCGM as ``commands`` answers."""
    state = shared_path("nvidia-smi", "query", "h100-nvl-x2_nvidia-smi-q.txt").read_text(encoding="utf-8")
    commands = commands or Commands(binaries=())
    return gpu_health.sweep(commands.run, commands.which, kernel_log_text=log, dcgm_level=level, state_text=state)


def dcgmi(rc: int, out: str, level: int = 2) -> Commands:
    return Commands({f"dcgmi diag -r {level} -j": (rc, out, "")}, binaries=("dcgmi",))


def ran(path: Path | None) -> dict:
    """A registered command result (ansible.builtin.command) whose stdout is the recorded output."""
    return {"rc": 0, "stdout": path.read_text(encoding="utf-8")} if path else {"skipped": True}


def by_check(result: dict) -> dict:
    return {c["check"]: c for c in result["checks"]}


def test_a_passing_dcgm_diag_lets_the_gpus_back():
    result = R.validation(sweep(dcgmi(0, dcgm_output())), ["0", "1"], 2)
    checks = by_check(result)
    assert (result["ok"], result["failed"]) == (True, [])
    assert (checks["gpu_health"]["status"], checks["dcgm_diag"]["status"]) == ("PASS", "PASS")
    assert checks["dcgm_diag"]["detail"].startswith("DCGM 3.1.0 diag level 2:")


def test_a_failing_dcgm_diag_keeps_the_node_out_and_names_the_check():
    result = R.validation(sweep(dcgmi(226, dcgm_output(fail_gpu=1))), ["0", "1"], 2)
    checks = by_check(result)
    assert (result["ok"], result["failed"]) == (False, ["dcgm_diag"])
    assert checks["gpu_health"]["status"] == "PASS"  # DCGM's own finding is the dcgm_diag check's, named once
    assert checks["dcgm_diag"]["detail"] == ("DCGM diag level 2 FAIL: software on GPU(s) 1 (GPU 1 memory test "
                                             "failed)")
    assert result["summary"].startswith("validation failed at dcgm_diag: dcgm_diag FAIL (DCGM diag level 2 FAIL")
    assert result["summary"].endswith("it stays out of service")


def test_without_dcgmi_the_diag_is_not_run_and_never_called_passed():
    result = R.validation(sweep(), ["0"], 2)
    dcgm = by_check(result)["dcgm_diag"]
    assert (result["ok"], dcgm["status"]) == (True, "NOT_RUN")
    assert "dcgmi is not installed on this node: DCGM diag level 2 was not run (not counted as passed)" in \
        result["summary"]
    assert "dcgm_diag PASS" not in result["summary"]


def test_the_absent_reason_is_the_one_run_dcgm_gives():
    absent = Commands(binaries=())
    assert run_dcgm(2, absent.run, absent.which)["reason"].startswith(R.DCGM_ABSENT)


def test_dcgmi_installed_without_a_result_fails():
    no_engine = dcgmi(255, "Error: unable to establish a connection to the specified host: localhost")
    result = R.validation(sweep(no_engine), ["0"], 2)
    assert (result["ok"], result["failed"]) == (False, ["dcgm_diag"])
    assert "is nv-hostengine running?" in by_check(result)["dcgm_diag"]["detail"]


def test_level_0_asks_for_no_diag():
    result = R.validation(sweep(level=0), ["0"], 0)
    assert by_check(result)["dcgm_diag"] == {"check": "dcgm_diag", "status": "NOT_RUN",
                                             "detail": "health_return_dcgm_level is 0: no DCGM diag asked for"}


def test_a_gpu_still_failing_in_the_sweep_stays_out():
    result = R.validation(sweep(log=XID79_GPU0), ["0"], 2)
    assert (result["ok"], result["failed"]) == (False, ["gpu_health"])
    detail = by_check(result)["gpu_health"]["detail"]
    assert detail.startswith("GPU 0: xid failed (Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")


def test_an_unreadable_node_fails_and_judges_nothing():
    result = R.validation({"failed": True, "msg": "nvidia-smi not found"}, ["0"], 2)
    checks = by_check(result)
    assert (checks["gpu_health"]["status"], checks["thresholds"]["status"]) == ("FAIL", "NOT_RUN")
    assert "nvidia-smi not found" in checks["gpu_health"]["detail"]


def test_without_the_tools_the_thresholds_are_the_sweeps_own_and_the_tools_are_named():
    result = R.validation(sweep(), ["0"], 2, nccl={"skipped": True}, nvbandwidth=None)
    thresholds = by_check(result)["thresholds"]
    # H100 NVL has no published row remap figure: UNKNOWN, never PASS, and it does not hold the node
    assert (result["ok"], thresholds["status"]) == (True, "UNKNOWN")
    assert [c["check"] for c in thresholds["checks"]] == ["row_remap_pending", "row_remap_failure"]
    assert thresholds["detail"].startswith("H100 NVL: row_remap_pending UNKNOWN")
    assert thresholds["detail"].endswith("all_reduce_perf, nvbandwidth not on the node: not run")


@pytest.mark.parametrize(("override", "ok", "status"), [(None, True, "UNKNOWN"), (150, False, "FAIL"),
                                                        (100, True, "PASS")])
def test_all_reduce_perf_is_judged_against_the_table_or_the_operators_figure(override, ok, status):
    overrides = {"nccl_busbw_gbps": override} if override else {}
    result = R.validation(sweep(), ["0"], 2, nccl=ran(NCCL_H100_PCIE_X2), overrides=overrides)
    nccl = next(c for c in by_check(result)["thresholds"]["checks"] if c["check"] == "nccl_busbw_gbps")
    assert (result["ok"], nccl["status"], nccl["measured"]) == (ok, status, 115.93)
    assert result["failed"] == ([] if ok else ["thresholds"])
    # the validate step's result (health_step_result): its registered benchmark runs found by tool, the overrides
    bench = {"results": [{"item": {"tool": "all_reduce_perf"}, **ran(NCCL_H100_PCIE_X2)}]}
    step = S.step_result({"kind": "validate", "gpus": ["0"]}, {"resweep": sweep(), "bench": bench},
                         thresholds=overrides)
    assert (step["result"], step["validation"]) == ("ok" if ok else "failed", result)


def test_an_nvbandwidth_run_that_printed_no_result_fails():
    result = R.validation(sweep(), ["0"], 2, nvbandwidth=ran(NVB_ASSERT))
    p2p = next(c for c in by_check(result)["thresholds"]["checks"] if c["check"] == "gpu_gpu_gbps")
    assert (result["ok"], p2p["status"]) == (False, "FAIL")


def test_the_benchmarks_run_over_every_gpu_and_an_absent_tool_is_not_run():
    """The validate step carries both runs over the node's GPUs (step.yml runs each where the tool is on the PATH,
    rc 127 where not); a node with no GPU read runs none."""
    hplan = {"status": "act", "action": "reset_gpu", "gpus_out": {"0": {}}, "items": [], "uuids": {"0": "GPU-a"}}
    step = next(s for s in S.host_steps("a", hplan, "compose", {}, HOST_SETTINGS) if s["kind"] == "validate")
    assert step["bench"] == [
        {"tool": "all_reduce_perf", "argv": ["all_reduce_perf", "-b", "8G", "-e", "16G", "-f", "2", "-g"]},
        {"tool": "nvbandwidth", "argv": ["nvbandwidth", "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                                         "device_to_device_memcpy_read_ce"]}]
    assert R.bench_runs(0) == []
    result = R.validation(sweep(), ["0"], 2, nccl={"rc": 127, "stdout": ""}, nvbandwidth=ran(NVB_ASSERT))
    assert by_check(result)["thresholds"]["detail"].endswith("all_reduce_perf not on the node: not run")


def test_step_yml_ends_all_reduce_perf_with_the_validation_sweeps_gpu_count():
    """After the remedy the node may have a GPU back that the plan's sweep lost (Xid 79: no UUID), so step.yml
    gives all_reduce_perf the validation sweep's GPU count, not the plan's; nvbandwidth's argv goes as it is."""
    step_yml = Path(__file__).parents[4] / "roles/health/tasks/step.yml"
    name = "Step | validate - the single-node burn-in run (read-only benchmarks)"
    task = next(t for t in every_task(yaml.safe_load(step_yml.read_text())) if t.get("name") == name)
    argv = NativeEnvironment().from_string(task["ansible.builtin.command"]["argv"])
    plan_bench = S.host_steps("a", {"status": "act", "action": "reboot", "gpus_out": {"0": {}}, "items": [],
                                    "uuids": {"1": "GPU-b"}}, "compose", {}, HOST_SETTINGS)
    bench = next(s for s in plan_bench if s["kind"] == "validate")["bench"]
    resweep = {"gpus": [{"index": 0}, {"index": 1}]}
    runs = [argv.render(item=item, __health_resweep=resweep) for item in bench]
    assert runs[0][4:6] == ["all_reduce_perf", "-b"]
    assert runs[0][-2:] == ["-g", "2"]
    assert runs[1][4:] == bench[1]["argv"]


@pytest.mark.parametrize(("overrides", "fragment"), [
    ([], "health_return_thresholds is []"),
    ({"nccl": 100}, "health_return_thresholds names 'nccl', which is no check"),
    ({"nccl_busbw_gbps": "fast"}, "health_return_thresholds['nccl_busbw_gbps'] is 'fast'; expected a number"),
])
def test_bad_settings_are_named(overrides, fragment):
    problems = R.settings_problems(overrides)
    assert len(problems) == 1
    assert fragment in problems[0]
    assert R.settings_problems({"nccl_busbw_gbps": 150}) == []


# --- the step validate in the host's steps and the state ----------------------------------------------------------

def quarantined_state() -> tuple[dict, dict]:
    """node-a after an escalation to service required (two GPUs out), as build_plan and next_state leave it."""
    item = {"kind": "xid", "code": 79, "gpu": 0, "immediate_action": "RESTART_BM", "line": XID79_GPU0, "time": "t1"}
    events = {"read_ok": True, "cursor": "c1", "events": [item], "findings": [],
              "gpus": [{"index": 0, "verdict": "failed"}, {"index": 1, "verdict": "healthy"}]}
    state = {"schema": 2, "hosts": {"node-a": {"remediations": [{"time": "2026-12-04T09:00:00Z", "action": "reboot",
                                                                 "cause": "Xid 79", "gpus": ["0"]}]}}}
    bounds = {"now": "2026-12-04T10:00:00Z", "escalate_after": 1, "escalate_window": 604800, "fleet_size": 3,
              "breaker_fraction": 1, "breaker_window": 300}
    hplan = H.build_plan({"node-a": events}, state, 1, bounds=bounds)["hosts"]["node-a"]
    done = [{**s, "result": "ok"} for s in S.host_steps("node-a", hplan, "compose", {}, HOST_SETTINGS)]
    return S.next_state(state, "node-a", hplan, done, "c1", "2026-12-04T10:00:00Z"), hplan


def released(state: dict) -> dict:
    healthy = {"read_ok": True, "cursor": "c2", "events": [], "findings": [],
               "gpus": [{"index": 0, "verdict": "healthy"}, {"index": 1, "verdict": "healthy"}]}
    bounds = {"now": "2026-12-05T10:00:00Z", "breaker_fraction": 0.5, "breaker_window": 300}
    return H.build_plan({"node-a": healthy}, state, 1, release=True, bounds=bounds)


def test_a_failed_validation_on_release_keeps_the_gpus_out_and_service_required():
    state, hplan = quarantined_state()
    assert hplan["action"] == "quarantine"
    assert "service_required" in state["hosts"]["node-a"]
    back = released(state)["hosts"]["node-a"]
    steps = S.host_steps("node-a", back, "compose", {}, HOST_SETTINGS)
    assert [s["kind"] for s in steps] == ["validate", "give_back", "clear_held"]
    swept = sweep(dcgmi(226, dcgm_output(fail_gpu=0)))
    check = R.validation(swept, steps[0]["gpus"], 2)
    result = S.step_result(steps[0], {"resweep": swept})
    assert (result["result"], result["detail"]) == ("failed", check["summary"])
    after = S.next_state(state, "node-a", back, [{**steps[0], **result}], "c2", "t3", release=True)["hosts"]["node-a"]
    assert sorted(after["out_of_service"]) == ["0", "1"]
    assert "service_required" in after  # the operator's release did not validate: still held
    assert (after["validation"]["ok"], after["validation"]["failed"]) == (False, ["dcgm_diag"])
    audit = json.loads(S.audit_records("node-a", [{**steps[0], **result}], back, "t3")[0])
    assert (audit["step"], audit["result"]) == ("validate", "failed")
    assert audit["detail"].startswith("validation failed at dcgm_diag")


def test_a_passing_validation_on_release_gives_the_gpus_back():
    state, _audit = quarantined_state()
    back = released(state)["hosts"]["node-a"]
    steps = S.host_steps("node-a", back, "compose", {}, HOST_SETTINGS)
    done = [{**steps[0], **S.step_result(steps[0], {"resweep": sweep(dcgmi(0, dcgm_output()))})},
            {**steps[1], "result": "ok"}]
    assert done[0]["result"] == "ok"
    after = S.next_state(state, "node-a", back, done, "c2", "t3", release=True)["hosts"]["node-a"]
    assert (after["out_of_service"], "service_required" in after, after["validation"]["ok"]) == ({}, False, True)


def test_a_reboot_that_timed_out_failed():
    """ansible.builtin.reboot's result on a timeout, as step.yml registers it (failed_when: false clears ``failed``):
    the step fails; a reboot that came back has no msg."""
    step = {"kind": "reboot", "enabled": True, "host": "node-b", "reason": "why"}
    timed_out = {"changed": False, "failed": False, "failed_when_result": False, "rebooted": True,
                 "msg": "Timed out waiting for last boot time check (timeout=5)"}
    assert S.step_result(step, {"reboot": timed_out}) == {
        "result": "failed", "detail": "the reboot did not complete: Timed out waiting for last boot time check "
        "(timeout=5)"}
    assert S.step_result(step, {"reboot": {"changed": True, "rebooted": True, "elapsed": 61}})["result"] == "ok"


def test_the_reboot_reason_logged_is_no_remedy():
    """The logger line before a reboot ran, the reboot failed: the GPU still waits for its reboot."""
    hplan = H.host_plan({"read_ok": True, "cursor": "c1", "findings": [], "gpus": [{"index": 0, "verdict": "failed"}],
                         "events": [{"kind": "xid", "code": 79, "gpu": 0, "immediate_action": "RESTART_BM",
                                     "line": XID79_GPU0, "time": "t1"}]}, {})
    steps = S.host_steps("node-a", hplan, "compose", {}, HOST_SETTINGS)
    assert [s["kind"] for s in steps] == ["mark_out", "command", "reboot", "validate", "back_if_healthy", "clear_held"]
    done = [{**steps[0], "result": "ok"}, {**steps[1], "result": "ok"}, {**steps[2], "result": "failed"}]
    entry = S.next_state({}, "node-a", hplan, done, "c1", "t")["hosts"]["node-a"]
    assert entry["out_of_service"]["0"]["pending"] == "reboot"
