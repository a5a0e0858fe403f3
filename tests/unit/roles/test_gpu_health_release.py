"""gpu_health's release entry point (issue 38): one mechanism for both sweep forms - a release request (clear.json
beside the sweep's state file) that the sweep program applies at its next run.

Runs tests/unit/roles/playbooks/gpu_health_release.yml on localhost against a scratch state holding the Xid 109
finding the scheduled sweep holds on the A100 capture (tests/unit/plugins/module_utils/test_gpu_health_metrics.py
run_sweeps). The DaemonSet form: the request is written, nothing runs, gpu_health_released.pending says when it
takes effect. The timer form: a unit file stands where the role installs it (the test's folder, reached through
``..`` from /etc/systemd/system) and ``systemctl`` on the PATH is a stand-in (labelled below) that records its
arguments and runs the sweep program once on the scratch state, as the unit's ExecStart would.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from ansible_env import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "gpu_health_release.yml"
sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from test_gpu_health_metrics import BOOT, XID109_68, run_sweeps  # noqa: E402

REASON = "health.yml by alice: GPU(s) 0 back in service after a passed validation (health_release)"
# Stand-in systemctl (not the real one): records its argv, then runs the sweep program on the scratch state, as the
# unit's ExecStart does, on a host with no GPU tool (PATH) and the test's boot id.
SYSTEMCTL = """#!/bin/sh
echo "$@" >> {folder}/systemctl.log
PATH=/nonexistent PYTHONPATH={collections} exec {python} -m \\
  ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics --state-file {folder}/sweep.json \\
  --textfile-dir {folder}/textfile --boot-id-file {folder}/boot_id
"""


def release(folder: Path, form: str, check: bool = False) -> dict:
    """One run of the entry point for every GPU of the scratch state; returns gpu_health_released."""
    variables = {"gpu_health_release_gpus": ["all"], "gpu_health_release_reason": REASON,
                 "gpu_health_state_dir": str(folder),
                 "_gpu_health_sweep_unit": f"../../..{folder}/gpuops-gpu-health-sweep",
                 "gpuops_plan": {"hosts": {"localhost": {"health_sweep": {"form": form, "reason": "test"}}}},
                 "gpu_health_test_out": str(folder / "released.json")}
    if check:
        variables["gpu_health_test_check"] = True
    run = run_playbook(PLAYBOOK, variables, folder, cache="memory", bin_dir=folder / "bin")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return json.loads((folder / "released.json").read_text())


@pytest.fixture
def held(tmp_path: Path) -> list:
    """The scratch state: one held Xid 109 finding; the stand-in systemctl; the boot id the finding was held in."""
    found = run_sweeps([XID109_68], [BOOT])[0][1]
    (tmp_path / "sweep.json").write_text(json.dumps({"cursor": None, "events": [], "held": found}))
    (tmp_path / "boot_id").write_text(BOOT + "\n")
    (tmp_path / "textfile").mkdir()
    (tmp_path / "bin").mkdir()
    systemctl = tmp_path / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL.format(folder=tmp_path, collections=REPO / "collections", python=sys.executable))
    systemctl.chmod(0o755)
    return found


def test_on_a_daemonset_node_the_request_is_written_for_the_pods_next_sweep(tmp_path, held):
    released = release(tmp_path, "daemonset")
    request = tmp_path / "clear.json"
    assert oct(stat.S_IMODE(request.stat().st_mode)) == "0o600"
    assert json.loads(request.read_text())["gpus"]["all"]["reason"] == REASON
    assert (released["held"], released["cleared"], released["skipped"]) == (held, [], "")
    assert f"DaemonSet applies the request {request} at its next sweep" in released["pending"]
    assert not (tmp_path / "systemctl.log").exists()  # nothing started on a DaemonSet node
    before = request.read_text()
    assert release(tmp_path, "daemonset")["request"] == released["request"]  # a re-run merges: the same request
    assert request.read_text() == before


def test_on_a_timer_host_the_request_is_written_and_the_unit_started_once_which_clears_it(tmp_path, held):
    (tmp_path / "gpuops-gpu-health-sweep.service").write_text("[Service]\n")  # where the role installs the unit
    released = release(tmp_path, "timer")
    assert (tmp_path / "systemctl.log").read_text().split() == [
        "start", f"../../..{tmp_path}/gpuops-gpu-health-sweep.service"]
    assert json.loads((tmp_path / "sweep.json").read_text())["held"] == []
    assert not (tmp_path / "clear.json").exists()  # applied and removed by the sweep
    entry = held[0]
    assert released["cleared"] == [
        f"gpu_health released: GPU {entry['gpu']} ({entry['uuid']}) xid RESET_GPU, held since {entry['since']:.0f}: "
        f"cleared (release): {REASON}"]
    assert release(tmp_path, "timer")["held"] == []  # idempotent: nothing held, nothing written or started
    assert len((tmp_path / "systemctl.log").read_text().splitlines()) == 1
    assert not (tmp_path / "clear.json").exists()


def test_check_mode_writes_and_starts_nothing(tmp_path, held):
    (tmp_path / "gpuops-gpu-health-sweep.service").write_text("[Service]\n")
    assert release(tmp_path, "timer", check=True)["held"] == held
    assert not (tmp_path / "clear.json").exists()
    assert not (tmp_path / "systemctl.log").exists()
