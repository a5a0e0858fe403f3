"""gpu_health_metrics: the scheduled sweep's Prometheus text, from real captures (no GPU here).

State: the A100 SXM4 x4 ``nvidia-smi -q`` capture (one GPU, 9E, has a row remap pending) and the H200 driver 580
capture (../shared/data/nvidia-smi/*/SOURCES.md). Kernel log: the real lines of tests/unit/kernel_log_samples.py,
and the Xid 79 line the module test maps onto the A100's GPU 9E. Every text is checked by
``promtool check metrics`` where promtool is installed (Debian package prometheus).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.lookup.shipped_script import LookupModule as ShippedScript
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health, gpu_health_metrics
from conftest import shared_path
from gpu_facts_helpers import Commands
from kernel_log_samples import DEVELOPMENT, GPUD_46

REPO = Path(__file__).resolve().parents[4]
RULES = REPO / "roles" / "monitoring_assets" / "files" / "prometheus" / "rules" / "gpu_health.rules.yml"

A100 = ("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt")
H200 = ("nvidia-smi", "h200-driver580", "q.txt")
XID79_9E = (
    "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has "
    "fallen off the bus.\n"
)
FAILED, DEGRADED = gpu_health_metrics.VERDICT_VALUE["failed"], gpu_health_metrics.VERDICT_VALUE["degraded"]
FIRST_RUN, NEXT_RUN = 1000.0, 1060.0
A100_HEALTHY_GPUS = 3


def sweep(state, log):
    return gpu_health.sweep(Commands().run, Commands().which, kernel_log_text=log, dcgm_level=0, state_text=state)


def samples(text: str) -> dict:
    """``{(name, frozenset(labels)): value}`` of a text exposition, read back naively (our own label values have no
    comma or brace)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _brace, inner = head.partition("{")
        labels = frozenset(tuple(pair.split("=", 1)) for pair in inner.rstrip("}").split(",") if pair)
        found[(name, labels)] = float(value)
    return found


def labels(**pairs) -> frozenset:
    return frozenset((key, f'"{value}"') for key, value in pairs.items())


@pytest.fixture(scope="module")
def promtool():
    path = os.environ.get("GPUOPS_PROMTOOL") or shutil.which("promtool")
    if not path:
        pytest.skip("promtool not found: install Debian package `prometheus` or set GPUOPS_PROMTOOL")
    return path


def check_metrics(promtool: str, text: str) -> None:
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_xid79_on_a_real_a100_capture_fails_that_gpu_and_is_counted(promtool):
    state = shared_path(*A100).read_text()
    result = sweep(state, XID79_9E)
    sick = next(gpu for gpu in result["gpus"] if gpu["pci"] == "00000000:9E:00.0")
    seen = gpu_health_metrics.count_events([], result["events"], result["gpus"], FIRST_RUN)
    text = gpu_health_metrics.format_metrics(result, seen, FIRST_RUN)
    check_metrics(promtool, text)
    got = samples(text)
    gpu, uuid = str(sick["index"]), sick["uuid"]
    assert uuid.startswith("GPU-")
    assert got[("gpuops_gpu_health_verdict", frozenset())] == FAILED
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))] == FAILED
    event = labels(kind="xid", gpu=gpu, uuid=uuid, code="79", action="RESTART_BM")
    assert got[("gpuops_gpu_health_events_total", event)] == 1
    assert got[("gpuops_gpu_health_event_last_seen_timestamp_seconds", event)] == FIRST_RUN
    assert got[("gpuops_gpu_health_finding", labels(gpu=gpu, uuid=uuid, code="xid", action="RESTART_BM"))] == 1
    assert got[("gpuops_gpu_health_row_remap_pending", labels(gpu=gpu, uuid=uuid))] == 1
    assert got[("gpuops_gpu_health_row_remap_failure", labels(gpu=gpu, uuid=uuid))] == 0
    healthy = [g for g in result["gpus"] if g["index"] != sick["index"]]
    assert len(healthy) == A100_HEALTHY_GPUS
    assert all(got[("gpuops_gpu_health_gpu_verdict", labels(gpu=g["index"], uuid=g["uuid"]))] == 0 for g in healthy)


def test_the_next_run_reads_nothing_new_keeps_the_tally_and_the_gpu_verdict_follows_the_state(promtool):
    state = shared_path(*A100).read_text()
    first = sweep(state, XID79_9E)
    seen = gpu_health_metrics.count_events([], first["events"], first["gpus"], FIRST_RUN)
    second = sweep(state, "")
    again = gpu_health_metrics.count_events(json.loads(json.dumps(seen)), second["events"], second["gpus"], NEXT_RUN)
    text = gpu_health_metrics.format_metrics(second, again, NEXT_RUN)
    check_metrics(promtool, text)
    got = samples(text)
    sick = next(gpu for gpu in second["gpus"] if gpu["pci"] == "00000000:9E:00.0")
    event = labels(kind="xid", gpu=sick["index"], uuid=sick["uuid"], code="79", action="RESTART_BM")
    assert (got[("gpuops_gpu_health_events_total", event)],
            got[("gpuops_gpu_health_event_last_seen_timestamp_seconds", event)]) == (1, FIRST_RUN)
    # only the pending row remap is left: degraded, not failed
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=sick["index"], uuid=sick["uuid"]))] == DEGRADED
    assert got[("gpuops_gpu_health_last_run_timestamp_seconds", frozenset())] == NEXT_RUN


def test_real_development_lines_keep_their_bucket_and_unmapped_devices_have_empty_gpu_labels(promtool):
    log = "\n".join(sample.line for sample in DEVELOPMENT)
    result = sweep(shared_path(*H200).read_text(), log)
    seen = gpu_health_metrics.count_events([], result["events"], result["gpus"], 5.0)
    text = gpu_health_metrics.format_metrics(result, seen, 5.0)
    check_metrics(promtool, text)
    # A Severity or Data line read after its SXid header is part of that event, so count the events, and check
    # that every sample's (kind, code, bucket) is there.
    expected = {}
    for event in result["events"]:
        key = (event["kind"], str(event["code"]), event["immediate_action"])
        expected[key] = expected.get(key, 0) + 1
    assert set(expected) == {(s.kind, str(s.code), s.action) for s in DEVELOPMENT if s.kind is not None}
    got = {}
    for (name, pairs), value in samples(text).items():
        if name == "gpuops_gpu_health_events_total":
            found = {key: val.strip('"') for key, val in pairs}
            assert (found["gpu"], found["uuid"]) == ("", "")  # none of these devices is the H200 of the capture
            key = (found["kind"], found["code"], found["action"])
            got[key] = got.get(key, 0) + value
    assert got == expected
    assert ("xid", "14", "IGNORE") in got


def test_label_values_are_escaped():
    text = gpu_health_metrics._sample("finding", {"code": 'a"b\\c\nd'}, 1)
    assert text == 'gpuops_gpu_health_finding{code="a\\"b\\\\c\\nd"} 1'


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "gpuops_gpu_health.prom"
    target.write_text("old\n")
    gpu_health_metrics.write_atomic(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuops_gpu_health.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_the_script_runs_from_a_copy_of_the_shipped_files_alone(tmp_path):
    """The files the role ships (the shipped_script lookup with_imports) are the whole import closure: the script
    runs from a bare copy of them (the collection is importable from nowhere else), on a host with no GPU tool
    (read_ok false)."""
    lib = tmp_path / "lib" / "ansible_collections" / "gpuops" / "cluster" / "plugins" / "module_utils"
    lib.mkdir(parents=True)
    for name, text in ShippedScript().run(["gpu_health_metrics"], with_imports=True)[0].items():
        (lib / name).write_text(text)
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    state = tmp_path / "sweep.json"
    # the command line of the role's service unit (templates/gpuops-gpu-health-sweep.service.j2)
    argv = [sys.executable, "-m", "ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics",
            "--state-file", str(state), "--textfile-dir", str(textfiles), "--dcgm-level", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={"PATH": "/nonexistent", "LC_ALL": "C", "PYTHONPATH": str(tmp_path / "lib")})
    assert done.returncode == 0, done.stdout + done.stderr
    text = (textfiles / "gpuops_gpu_health.prom").read_text()
    assert "gpuops_gpu_health_read_ok 0" in text
    assert "cursor" in json.loads(state.read_text())


# Held findings: real lines of tests/unit/kernel_log_samples.py (leptonai/gpud PR 46, GPUD_46), re-addressed from
# their card (PCI 0000:cb:00) to the A100 capture's healthy GPU at 0000:68:00 -- the only change -- so that the
# events land on a GPU the capture lists: Xid 109 (CTX SWITCH TIMEOUT, bucket RESET_GPU: failed) and Xid 13
# (Graphics SM Warp Exception, RESTART_APP: degraded, and over with the application).
XID109_68 = (
    "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:68:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
    "errorString CTX SWITCH TIMEOUT, Info 0x58005"
)
XID13_68 = (
    "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:68:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
    "Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
assert GPUD_46.endswith("/pull/46")
BOOT, NEXT_BOOT = "2b2c5c1e-5f7a-4d6b-9d3e-3f1c2f0a7b11", "8f0d9a44-1c3e-4b7f-a2d6-6b5e0c9d1f22"
SWEEPS = 6  # one sweep a minute: the event, then five sweeps that read nothing new


def run_sweeps(logs: list, boots: list, clears: list | None = None) -> list:
    """The scheduled sweep's runs on the A100 capture, one a minute, each with its kernel-log text, boot id and
    release request (UUID or all -> reason), the state (events, held) carried between runs through JSON as the state
    file does. Returns each run's ``(metrics text, held, cleared)``."""
    state = shared_path(*A100).read_text()
    seen, held, runs = [], [], []
    for minute, (log, boot) in enumerate(zip(logs, boots)):
        now = FIRST_RUN + 60 * minute
        result = sweep(state, log)
        seen = gpu_health_metrics.count_events(seen, result["events"], result["gpus"], now)
        held, cleared = gpu_health_metrics.hold(held, result, boot, now, (clears or [{}] * len(logs))[minute])
        runs.append((gpu_health_metrics.format_metrics(result, seen, now, held), held, cleared))
        seen, held = json.loads(json.dumps(seen)), json.loads(json.dumps(held))
    return runs


def gpu_68(text: str) -> tuple:
    """``(gpu label, uuid)`` of the A100 capture's GPU at 0000:68:00."""
    result = sweep(shared_path(*A100).read_text(), "")
    gpu = next(gpu for gpu in result["gpus"] if gpu["pci"] == "00000000:68:00.0")
    assert f'uuid="{gpu["uuid"]}"' in text
    return str(gpu["index"]), gpu["uuid"]


def test_a_reset_gpu_xid_keeps_its_gpu_failed_with_its_cause_over_later_sweeps_until_a_reboot(promtool):
    runs = run_sweeps([XID109_68, *[""] * (SWEEPS - 1), ""], [BOOT] * SWEEPS + [NEXT_BOOT])
    gpu, uuid = gpu_68(runs[0][0])
    finding = ("gpuops_gpu_health_finding", labels(gpu=gpu, uuid=uuid, code="xid", action="RESET_GPU"))
    held_since = ("gpuops_gpu_health_held_since_timestamp_seconds",
                  labels(gpu=gpu, uuid=uuid, code="xid", action="RESET_GPU"))
    for text, held, cleared in runs[:SWEEPS]:
        check_metrics(promtool, text)
        got = samples(text)
        assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))] == FAILED
        assert got[("gpuops_gpu_health_verdict", frozenset())] == FAILED
        assert got[finding] == 1
        assert got[held_since] == FIRST_RUN  # held since the sweep that read the line, not refreshed
        assert [(entry["uuid"], entry["action"], entry["step"]) for entry in held] == [(uuid, "RESET_GPU", "RESET_GPU")]
        assert "Xid 109" in held[0]["evidence"]
        assert "CTX SWITCH TIMEOUT" in held[0]["evidence"]
        assert cleared == []
    text, held, cleared = runs[SWEEPS]
    got = samples(text)
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))] == 0
    assert finding not in got
    assert held_since not in got
    assert held == []
    assert [(entry["uuid"], entry["why"]) for entry in cleared] == [(uuid, f"reboot (boot id {BOOT} -> {NEXT_BOOT})")]


def test_the_alert_stays_firing_over_the_sweeps_the_finding_is_held_and_ends_with_the_reboot(promtool, tmp_path):
    """promtool test rules on the series the sweeps above write: GpuHealthGpuFailed fires at every sweep while the
    finding is held (one sweep a minute) and resolves at the first sweep after the reboot."""
    runs = run_sweeps([XID109_68, *[""] * (SWEEPS - 1), "", ""], [BOOT] * SWEEPS + [NEXT_BOOT] * 2)
    gpu, uuid = gpu_68(runs[0][0])
    key = ("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))
    values = [int(samples(text)[key]) for text, _held, _cleared in runs]
    assert values == [FAILED] * SWEEPS + [0, 0]
    series = f'gpuops_gpu_health_gpu_verdict{{gpu="{gpu}", uuid="{uuid}", instance="red:9100"}}'
    alert_labels = {"gpu": gpu, "uuid": uuid, "instance": "red:9100"}
    rule = next(rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
                if rule.get("alert") == "GpuHealthGpuFailed")
    annotations = {name: " ".join(text.split()) for name, text in rule["annotations"].items()}
    for name, value in alert_labels.items():
        annotations = {key: text.replace(f"{{{{ $labels.{name} }}}}", value) for key, text in annotations.items()}
    firing = [{"exp_labels": {"severity": "critical", **alert_labels}, "exp_annotations": annotations}]
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": " ".join(map(str, values))}],
        "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": "GpuHealthGpuFailed",
                             "exp_alerts": firing if value == FAILED else []}
                            for minute, value in enumerate(values)],
    }]}
    path = tmp_path / "held.test.yml"
    path.write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_restart_app_xid_is_not_held_its_condition_ends_with_the_application():
    runs = run_sweeps([XID13_68, ""], [BOOT, BOOT])
    gpu, uuid = gpu_68(runs[0][0])
    key = ("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))
    assert [samples(text)[key] for text, _held, _cleared in runs] == [DEGRADED, 0]
    assert [held for _text, held, _cleared in runs] == [[], []]


@pytest.mark.parametrize("clear", ["uuid", gpu_health_metrics.CLEAR_ALL])
def test_a_release_clears_the_held_finding_and_a_new_event_after_it_is_held_again(clear):
    uuid = gpu_68(run_sweeps([""], [BOOT])[0][0])[1]
    name = uuid if clear == "uuid" else clear
    runs = run_sweeps([XID109_68, "", "", XID109_68], [BOOT] * 4, [{}, {}, {name: ""}, {}])
    assert [len(held) for _text, held, _cleared in runs] == [1, 1, 0, 1]
    assert [entry["why"] for entry in runs[2][2]] == ["cleared (release)"]
    assert runs[3][1][0]["since"] == FIRST_RUN + 3 * 60  # held anew, from the new event


def test_a_release_with_a_reason_keeps_who_and_why_and_clears_only_the_gpu_it_names():
    """gpu_health's release entry point's request names who and the validation that passed: the record of the
    cleared finding carries it; a UUID the sweep does not hold clears nothing."""
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    result = sweep(shared_path(*A100).read_text(), "")
    reason = "health.yml (operator alice): GPU 0 back in service, its validation passed"
    kept, cleared = gpu_health_metrics.hold(held, result, BOOT, NEXT_RUN, {"GPU-not-held": reason})
    assert (len(kept), cleared) == (1, [])
    kept, cleared = gpu_health_metrics.hold(held, result, BOOT, NEXT_RUN, {held[0]["uuid"]: reason})
    assert kept == []
    assert [(entry["uuid"], entry["why"], entry["at"]) for entry in cleared] == [
        (held[0]["uuid"], f"cleared (release): {reason}", NEXT_RUN)]


def _run_behind_the_lock(directory, argv, while_waiting) -> None:
    """One sweep run (``main(argv)``, no nvidia-smi on the PATH) started while this test holds the lock on the state
    directory: it must wait; ``while_waiting()`` runs then (asserts, or writes), then the lock is let go and
    the run must end."""
    handle = os.open(directory, os.O_RDONLY)
    fcntl.flock(handle, fcntl.LOCK_EX)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", "/nonexistent")
        run = threading.Thread(target=gpu_health_metrics.main, args=(argv,))
        try:
            run.start()
            run.join(timeout=3)
            assert run.is_alive()  # waiting for the lock
            while_waiting()
        finally:
            os.close(handle)
        run.join(timeout=60)
    assert not run.is_alive()


def test_a_run_waits_for_the_lock_on_the_state_directory(tmp_path):
    """A release run and the timer's run on one state file: a run holds the directory's lock from reading the state
    to writing it, so the second waits (here the test holds the lock) and never writes over the first's update."""
    state, textfiles = tmp_path / "sweep.json", tmp_path / "textfile"
    textfiles.mkdir()
    argv = ["--state-file", str(state), "--textfile-dir", str(textfiles), "--boot-id-file", str(tmp_path / "none")]

    def nothing_written():
        assert not state.exists()

    _run_behind_the_lock(tmp_path, argv, nothing_written)
    assert json.loads(state.read_text())["held"] == []


def test_a_gpu_reset_ends_the_held_finding_its_uncorrectable_ecc_since_the_driver_loaded_went_down():
    """The GPU's volatile uncorrectable ECC count (gpu_health_state: since the driver loaded) was 2 when the finding
    was held; the capture, read after, shows 0: the GPU was reset (or the driver reloaded)."""
    first = run_sweeps([XID109_68], [BOOT])[0][1]
    first[0]["ecc_volatile"] = 2
    result = sweep(shared_path(*A100).read_text(), "")
    held, cleared = gpu_health_metrics.hold(first, result, BOOT, NEXT_RUN)
    assert held == []
    assert [entry["why"] for entry in cleared] == [
        "GPU reset or driver reload (uncorrectable ECC since the driver loaded 2 -> 0)"]


def test_a_held_gpu_the_driver_no_longer_lists_keeps_its_failed_verdict(promtool):
    """Xid 79 (RESTART_BM) on the A100 capture's GPU 9E, then a sweep on the H200 capture, which lists another
    GPU: the held GPU keeps its last index and its failed verdict; the host is failed."""
    first = sweep(shared_path(*A100).read_text(), XID79_9E)
    held, _cleared = gpu_health_metrics.hold([], first, BOOT, FIRST_RUN)
    sick = next(gpu for gpu in first["gpus"] if gpu["pci"] == "00000000:9E:00.0")
    second = sweep(shared_path(*H200).read_text(), "")
    held, cleared = gpu_health_metrics.hold(held, second, BOOT, NEXT_RUN)
    text = gpu_health_metrics.format_metrics(second, [], NEXT_RUN, held)
    check_metrics(promtool, text)
    got = samples(text)
    assert cleared == []
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=sick["index"], uuid=sick["uuid"]))] == FAILED
    assert got[("gpuops_gpu_health_verdict", frozenset())] == FAILED


def test_the_script_holds_a_finding_across_runs_and_a_reboot_releases_it(tmp_path):
    """main() with the state file of a run that held an Xid 109 finding: the next run, on a host with no GPU tool,
    keeps it (verdict failed, the finding exported); with another boot id the run after releases it."""
    state, boot, textfiles = tmp_path / "sweep.json", tmp_path / "boot_id", tmp_path / "textfile"
    textfiles.mkdir()
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    state.write_text(json.dumps({"cursor": None, "events": [], "held": held}))
    argv = ["--state-file", str(state), "--textfile-dir", str(textfiles), "--boot-id-file", str(boot)]
    for boot_id, kept in ((BOOT, 1), (NEXT_BOOT, 0)):
        boot.write_text(boot_id + "\n")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PATH", "/nonexistent")
            assert gpu_health_metrics.main(argv) == 0
        text = (textfiles / "gpuops_gpu_health.prom").read_text()
        assert len(json.loads(state.read_text())["held"]) == kept
        assert (f'gpuops_gpu_health_verdict {FAILED}' in text.splitlines()) == bool(kept)


def script_run(tmp_path, held: list, request: dict | None, boot_id: str = BOOT) -> tuple:
    """One main() run on a scratch state holding ``held``, with ``request`` as the pending clear.json (None: none),
    on a host with no GPU tool. Returns ``(held after, what it printed)``."""
    state, boot, textfiles = tmp_path / "sweep.json", tmp_path / "boot_id", tmp_path / "textfile"
    textfiles.mkdir(exist_ok=True)
    state.write_text(json.dumps({"cursor": None, "events": [], "held": held}))
    boot.write_text(boot_id + "\n")
    if request is not None:
        (tmp_path / gpu_health_metrics.CLEAR_REQUEST).write_text(json.dumps(request))
    argv = ["--state-file", str(state), "--textfile-dir", str(textfiles), "--boot-id-file", str(boot)]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", "/nonexistent")
        patch.setattr(sys, "stdout", out)
        assert gpu_health_metrics.main(argv) == 0
    return json.loads(state.read_text())["held"], out.getvalue()


def test_a_pending_release_request_is_applied_by_the_next_run_and_removed(tmp_path):
    """gpu_health's release writes clear.json beside the state (the timer's unit or the DaemonSet pod runs next): the
    run clears the finding it names, prints the record with the request's reason, and removes the request."""
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    reason = "health.yml by alice: GPU(s) 0 back in service after a passed validation (health_release)"
    after, said = script_run(tmp_path, held, {"gpus": {held[0]["uuid"]: {"reason": reason, "at": NEXT_RUN}}})
    assert after == []
    assert (f"gpu_health released: GPU {held[0]['gpu']} ({held[0]['uuid']}) xid RESET_GPU, held since "
            f"{FIRST_RUN:.0f}: cleared (release): {reason}") in said.splitlines()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["boot_id", "result.json", "sweep.json", "textfile"]
    again, said = script_run(tmp_path, after, None)  # nothing pending: nothing released
    assert (again, "gpu_health released" in said) == ([], False)


def test_a_request_for_a_gpu_not_held_is_removed_and_changes_nothing(tmp_path):
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    after, said = script_run(tmp_path, held, {"gpus": {"GPU-not-held": {"reason": "operator", "at": NEXT_RUN}}})
    assert after == held
    assert "gpu_health released" not in said
    assert not (tmp_path / gpu_health_metrics.CLEAR_REQUEST).exists()
    assert not (tmp_path / (gpu_health_metrics.CLEAR_REQUEST + ".taken")).exists()


@pytest.mark.parametrize("text", ["{not json", '{"gpus": ["GPU-1"]}', "[]"])
def test_an_unreadable_request_is_dropped_and_the_sweep_runs_on(tmp_path, capsys, text):
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    (tmp_path / gpu_health_metrics.CLEAR_REQUEST).write_text(text)
    after, _said = script_run(tmp_path, held, None)
    assert after == held
    assert "release request" in capsys.readouterr().err
    assert not (tmp_path / gpu_health_metrics.CLEAR_REQUEST).exists()
    assert not (tmp_path / (gpu_health_metrics.CLEAR_REQUEST + ".taken")).exists()


def test_a_request_written_while_a_run_waits_for_the_lock_is_applied_by_that_run(tmp_path):
    """The run reads the request under the state directory's lock: written while another run holds the lock (here
    the test), it is applied by the waiting run, not lost."""
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    state, textfiles = tmp_path / "sweep.json", tmp_path / "textfile"
    textfiles.mkdir()
    state.write_text(json.dumps({"cursor": None, "events": [], "held": held}))
    (tmp_path / "boot_id").write_text(BOOT + "\n")
    argv = ["--state-file", str(state), "--textfile-dir", str(textfiles), "--boot-id-file", str(tmp_path / "boot_id")]
    request = tmp_path / gpu_health_metrics.CLEAR_REQUEST
    _run_behind_the_lock(tmp_path, argv, lambda: request.write_text(json.dumps({"gpus": {"all": {"reason": "ops"}}})))
    assert json.loads(state.read_text())["held"] == []
    assert not (tmp_path / gpu_health_metrics.CLEAR_REQUEST).exists()


def test_a_request_left_taken_by_a_run_that_died_is_applied_by_the_next_merged_with_a_new_one(tmp_path):
    """A run that died between taking the request (renamed to ``.taken``) and writing the state left the release
    unapplied: the next run applies the left ``.taken`` too, merged with a request written since, and removes both.
    Held: Xid 109 on GPU 68 and Xid 79 on GPU 9E of the A100 capture; the left request names one, the new the
    other."""
    held = run_sweeps([XID109_68 + "\n" + XID79_9E], [BOOT])[0][1]
    first, second = sorted({entry["uuid"] for entry in held})
    (tmp_path / (gpu_health_metrics.CLEAR_REQUEST + ".taken")).write_text(
        json.dumps({"gpus": {first: {"reason": "left by a run that died", "at": FIRST_RUN}}}))
    after, said = script_run(tmp_path, held, {"gpus": {second: {"reason": "written since", "at": NEXT_RUN}}})
    assert after == []
    released = [line for line in said.splitlines() if line.startswith("gpu_health released")]
    assert sorted(line.rsplit("cleared (release): ", 1)[1] for line in released) == [
        "left by a run that died", "written since"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["boot_id", "result.json", "sweep.json", "textfile"]
    left, _said = script_run(tmp_path, held, None)  # a left .taken alone is applied too
    assert left == held
    (tmp_path / (gpu_health_metrics.CLEAR_REQUEST + ".taken")).write_text(json.dumps({"gpus": {"all": {}}}))
    assert script_run(tmp_path, held, None)[0] == []
    assert not (tmp_path / (gpu_health_metrics.CLEAR_REQUEST + ".taken")).exists()


def test_release_writes_the_request_under_the_lock_merged_with_a_pending_one(tmp_path, capsys):
    """gpu_health's release runs the program with --release: it waits for the state directory's lock (a sweep
    holds it from taking the request to writing the state), keeps a pending request's entries as they are, writes
    0600, and changes nothing when run again."""
    request = tmp_path / gpu_health_metrics.CLEAR_REQUEST
    pending = {"GPU-pending": {"reason": "operator", "at": FIRST_RUN}}
    argv = ["--state-file", str(tmp_path / "sweep.json"), "--release", "GPU-pending", "all", "--reason=health.yml"]
    _run_behind_the_lock(tmp_path, argv, lambda: request.write_text(json.dumps({"gpus": pending})))
    written = json.loads(request.read_text())["gpus"]
    assert written["GPU-pending"] == pending["GPU-pending"]
    assert written["all"]["reason"] == "health.yml"
    assert oct(os.stat(request).st_mode & 0o777) == "0o600"
    assert json.loads(capsys.readouterr().out) == {"gpus": written, "changed": True}
    assert gpu_health_metrics.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"gpus": written, "changed": False}
    assert json.loads(request.read_text())["gpus"] == written
