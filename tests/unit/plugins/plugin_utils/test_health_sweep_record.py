"""health_sweep_results last: health.yml takes the scheduled sweep's last result instead of sweeping again.

The records are written by the sweep's own code (module_utils/gpu_health_result.py ``result_record``) from real
gpu_health results: the A100 SXM4 x4 ``nvidia-smi -q`` capture (../shared/data/nvidia-smi/query/, its SOURCES.md)
swept by gpu_health.sweep with kernel-log lines as the driver prints them (the Xid 79 line test_gpu_health_metrics
maps onto the capture's GPU 9E; Xid 13 as NVIDIA's catalog quotes it). The read on the host is what the role's
command prints: the host's clock in seconds, then the record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.health import health_sweep_record
from ansible_collections.gpuops.cluster.plugins.lookup.shipped_script import LookupModule as ShippedScript
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health, gpu_health_result
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health as H
from ansible_collections.gpuops.cluster.plugins.plugin_utils import health_steps
from conftest import shared_path
from gpu_facts_helpers import Commands

REPO = Path(__file__).resolve().parents[4]
A100 = ("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt")
XID79_9E = ("May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has "
            "fallen off the bus.\n")
XID13_9E = ("May 15 09:12:01 red kernel: NVRM: Xid (PCI:0000:9e:00): 13, pid=2210, name=python3, Graphics SM Warp "
            "Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address\n")
BOOT, OTHER_BOOT = "6f1c2a43-0d1e-4c53-9d8e-1b2a3c4d5e6f", "0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e"
T0 = 1_765_000_000.0
SETTINGS = {"mode": "last", "max_age": 300, "dcgm_level": 0, "expected_gpus": 4, "replay": False,
            "path": "/var/lib/gpuops/gpu_health/result.json"}
OPTIONS = {"dcgm_level": 0, "expected_gpus": None}  # the DaemonSet's and the timer's command lines today


def swept(log: str, cursor: str | None = None) -> dict:
    state = shared_path(*A100).read_text()
    return gpu_health.sweep(Commands().run, Commands().which, kernel_log_text=log, since_cursor=cursor,
                            dcgm_level=0, state_text=state)


def host_read(record: dict, clock: float, rc: int = 0) -> dict:
    """The role's read: `date +%s && cat result.json`, as registered."""
    return {"rc": rc, "stdout": f"{int(clock)}\n{json.dumps(record)}"}


def runs(*logs: str, boot: str = BOOT, previous: dict | None = None, first_cursor: str | None = None) -> dict:
    """The record after one sweep per log, a minute apart, each from the cursor the one before left."""
    record, cursor = previous, first_cursor
    for step, log in enumerate(logs):
        result = swept(log, cursor)
        record = gpu_health_result.result_record(record, result, T0 + 60 * step, boot, cursor, OPTIONS)
        cursor = result["cursor"]
    return record


def test_a_fresh_record_is_read_and_plans_exactly_what_a_new_sweep_plans():
    record = runs(XID79_9E)
    got = H.sweep_record(host_read(record, T0 + 42), SETTINGS)
    assert (got["source"], got["age"]) == ("sweep", 42)
    assert "42 s old (health_sweep_max_age 300 s)" in got["why"]
    from_sweep = H.build_plan({"a": got["sweep"]}, {}, 1)["hosts"]["a"]
    fresh = H.build_plan({"a": swept(XID79_9E)}, {}, 1)["hosts"]["a"]
    assert (from_sweep["status"], from_sweep["action"], list(from_sweep["gpus_out"])) == ("act", "reboot", ["1"])
    assert from_sweep == fresh


def test_the_record_keeps_every_event_of_the_boot_and_what_was_handled_is_not_acted_on_again():
    # run 1 reads Xid 79; an applied health run handles it; runs 2 and 3 read Xid 13, then nothing
    first = runs(XID79_9E)
    plan = H.build_plan({"a": swept(XID79_9E)}, {}, 1)["hosts"]["a"]
    steps = health_steps.host_steps("a", plan, "compose", {}, {"reboot": False, "timeout": 600,
                                                               "report_dir": "/var/log/gpuops"})
    done = [{**step, "result": "ok"} for step in steps]
    state = health_steps.next_state({}, "a", plan, done, "text:1", "2026-12-04T10:00:00Z")
    record = runs(XID79_9E + XID13_9E, XID79_9E + XID13_9E, previous=first, first_cursor="text:1")
    assert [(e["code"], e["read_at"]) for e in record["result"]["events"]] == [(79, T0), (13, T0)]
    assert record["events_complete"] is True
    got = H.sweep_record(host_read(record, T0 + 100), SETTINGS)
    hplan = H.build_plan({"a": got["sweep"]}, state, 1)["hosts"]["a"]
    assert [(i["event"], i["new"]) for i in hplan["items"] if i["source"] == "event"] == [
        ("Xid 79", False), ("Xid 13", True)]
    assert (hplan["action"], hplan["gpus_out"]) == ("notify_owner", {})


def test_a_new_boot_starts_a_new_record_and_one_started_from_a_cursor_is_incomplete():
    old = runs(XID79_9E)
    new = runs("", boot=OTHER_BOOT, previous=old, first_cursor="text:1")
    assert (new["boot_id"], new["result"]["events"], new["events_complete"]) == (OTHER_BOOT, [], True)
    upgraded = runs(XID13_9E, first_cursor="text:0")  # a state file older than result.json: events before it unseen
    assert upgraded["events_complete"] is False
    got = H.sweep_record(host_read(upgraded, T0 + 5), SETTINGS)
    assert got["source"] == "gpu_health"
    assert "record of this boot's events is incomplete" in got["why"]


def test_past_events_kept_the_oldest_go_and_the_record_is_incomplete(monkeypatch):
    monkeypatch.setattr(gpu_health_result, "EVENTS_KEPT", 1)
    record = runs(XID79_9E + XID13_9E)
    assert ([e["code"] for e in record["result"]["events"]], record["events_complete"]) == ([13], False)


@pytest.mark.parametrize(("change", "clock", "needle"), [
    ({}, T0 + 301, "301 s old, over health_sweep_max_age (300 s)"),
    ({}, T0 - 30, "-30 s old, over health_sweep_max_age"),  # the host's clock went back
    ({"dcgm_level": 1}, T0, "the sweep ran DCGM diag at level 0, health_dcgm_level asks for 1"),
    ({"expected_gpus": 8}, T0, "did not check for the 8 the plan expects"),
    ({"replay": True}, T0, "health_kernel_log_text or health_state_text is given"),
    ({"mode": "fresh"}, T0, "health_sweep_results is fresh"),
])
def test_a_host_is_swept_again_and_the_report_says_why(change, clock, needle):
    got = H.sweep_record(host_read(runs(XID79_9E), clock), {**SETTINGS, **change})
    assert (got["source"], got["sweep"]) == ("gpu_health", None)
    assert needle in got["why"]


def test_with_health_dcgm_level_unset_the_sweeps_level_stands_and_the_report_names_it():
    got = H.sweep_record(host_read(runs(XID79_9E), T0 + 5), {**SETTINGS, "dcgm_level": None})
    assert got["source"] == "sweep"
    assert got["why"].endswith("DCGM diag level 0 (health_dcgm_level unset: the sweep's level stands)"), got["why"]
    asked = H.sweep_record(host_read(runs(XID79_9E), T0 + 5), SETTINGS)
    assert asked["why"].endswith("DCGM diag level 0 (health_dcgm_level 0 or above)"), asked["why"]


def _role_default(role: str, name: str):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))[name]


def test_the_roles_defaults_take_the_timers_fresh_result():
    """An operator who sets only health_sweep_results: last: the timer's record, written at the timer's default
    level (gpu_health_sweep_dcgm_level), read through the filter the role calls with health's default
    health_dcgm_level, stands. Before issue 38's review it did not: health's default asked level 1 of a level-0
    sweep, and every host was swept again."""
    timer = {"dcgm_level": _role_default("gpu_health", "gpu_health_sweep_dcgm_level"), "expected_gpus": 4}
    result = swept(XID79_9E)
    record = gpu_health_result.result_record(None, result, T0, BOOT, None, timer)
    got = health_sweep_record(host_read(record, T0 + 30), mode="last",
                              max_age=_role_default("health", "health_sweep_max_age"),
                              dcgm_level=_role_default("health", "health_dcgm_level"), expected_gpus=4)
    assert got["source"] == "sweep", got["why"]


@pytest.mark.parametrize(("given", "source"), [
    (None, "sweep"),  # unset (-e health_dcgm_level= is refused by the role's argument spec)
    ("0", "sweep"), (0, "sweep"),
    ("1", "gpu_health"), (2, "gpu_health"),  # the operator asks for more than the level-0 sweep ran
])
def test_the_filter_reads_health_dcgm_level_as_the_inventory_or_extra_vars_give_it(given, source):
    got = health_sweep_record(host_read(runs(XID79_9E), T0), mode="last", max_age=300, dcgm_level=given,
                              expected_gpus=4)
    assert got["source"] == source, got["why"]


def test_the_gpu_count_check_stands_when_the_sweep_lists_as_many_gpus_or_checked_the_same():
    record = runs("")
    assert H.sweep_record(host_read(record, T0), {**SETTINGS, "expected_gpus": 4})["source"] == "sweep"
    checked = {**record, "expected_gpus": 8}
    assert H.sweep_record(host_read(checked, T0), {**SETTINGS, "expected_gpus": 8})["source"] == "sweep"


@pytest.mark.parametrize(("read", "needle"), [
    ({"rc": 1, "stdout": "1765000000\n"}, "no sweep result at /var/lib/gpuops/gpu_health/result.json"),
    ({"rc": 0, "stdout": "1765000000\n{not json"}, "cannot be read"),
    ({"rc": 0, "stdout": '1765000000\n{"schema": 9}'}, "is not schema 1"),
    ({"skipped": True}, "no sweep result at"),
])
def test_a_missing_or_unreadable_record_is_swept_again(read, needle):
    got = H.sweep_record(read, SETTINGS)
    assert got["source"] == "gpu_health"
    assert needle in got["why"]


def test_a_sweep_that_could_not_read_the_gpus_is_swept_again():
    result = gpu_health.sweep(Commands().run, Commands().which, kernel_log_text="", dcgm_level=0)
    record = gpu_health_result.result_record(None, result, T0, BOOT, None, OPTIONS)
    assert result["read_ok"] is False
    assert "could not read the GPUs' state" in H.sweep_record(host_read(record, T0), SETTINGS)["why"]


def test_write_result_keeps_the_record_beside_the_state_file(tmp_path):
    state = tmp_path / "sweep.json"
    writes = []

    def write(path, text):
        writes.append(path)
        (tmp_path / "result.json").write_text(text)

    for log in (XID79_9E, ""):
        path = gpu_health_result.write_result(str(state), swept(log), T0, BOOT, None, OPTIONS, write)
    assert writes == [str(tmp_path / "result.json")] * 2 == [path] * 2
    record = json.loads((tmp_path / "result.json").read_text())
    assert [e["code"] for e in record["result"]["events"]] == [79]
    assert record["events_complete"] is True


def test_the_sweep_script_writes_the_record_from_a_copy_of_the_shipped_files(tmp_path):
    """The service unit's command line (roles/gpu_health/templates/gpuops-gpu-health-sweep.service.j2) run from a
    bare copy of what the shipped_script lookup ships, on a host with no GPU tool: result.json lands beside the
    state file, and health.yml's read of it says why it is not used (the GPUs could not be read)."""
    lib = tmp_path / "lib" / "ansible_collections" / "gpuops" / "cluster" / "plugins" / "module_utils"
    lib.mkdir(parents=True)
    shipped = ShippedScript().run(["gpu_health_metrics"], with_imports=True)[0]
    assert "gpu_health_result.py" in shipped
    for name, text in shipped.items():
        (lib / name).write_text(text)
    (tmp_path / "textfile").mkdir()
    argv = [sys.executable, "-m", "ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics",
            "--state-file", str(tmp_path / "sweep.json"), "--textfile-dir", str(tmp_path / "textfile"),
            "--dcgm-level", "0"]
    for _run in range(2):
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path,
                              env={"PATH": "/nonexistent", "LC_ALL": "C", "PYTHONPATH": str(tmp_path / "lib")})
        assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "result.json").read_text())
    assert (record["schema"], record["dcgm_level"], record["expected_gpus"]) == (1, 0, None)
    assert set(swept("")) <= set(record["result"])  # gpu_health's own keys, as the module returns them
    clock = record["time"] + 1
    assert "could not read the GPUs' state" in H.sweep_record(host_read(record, clock), SETTINGS)["why"]


def test_the_sweep_folder_has_one_home():
    """gpu_health_state_dir (roles/_gpuops_vars) is where gpu_health's timer and kube_monitoring's DaemonSet keep
    the sweep's state and where health reads result.json: no role, playbook or plugin spells the folder itself,
    and health's read is the sweep's RESULT_NAME in it."""
    shared = yaml.safe_load((REPO / "roles/_gpuops_vars/defaults/main.yml").read_text(encoding="utf-8"))
    folder = shared["gpu_health_state_dir"]
    spelt = [f"{path.relative_to(REPO)}:{number}"
             for top in ("roles", "playbooks", "plugins") for path in sorted((REPO / top).rglob("*"))
             if path.suffix in {".yml", ".j2", ".py"} and "_gpuops_vars" not in path.parts
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if folder in line]
    assert not spelt, f"{folder} spelt outside roles/_gpuops_vars (read gpu_health_state_dir instead): {spelt}"
    health = yaml.safe_load((REPO / "roles/health/vars/main.yml").read_text(encoding="utf-8"))
    assert health["_health_sweep_result"] == "{{ gpuops_sweep_state | dirname }}/" + gpu_health_result.RESULT_NAME
    constants = yaml.safe_load((REPO / "roles/_gpuops_vars/vars/main.yml").read_text(encoding="utf-8"))
    assert constants["gpuops_sweep_state"].startswith("{{ gpu_health_state_dir }}/")  # the state, result beside it
    assert SETTINGS["path"] == f"{folder}/{gpu_health_result.RESULT_NAME}"
