"""gpu_health's release entry point (issue 38): one mechanism for both sweep forms - a release request (clear.json
beside the sweep's state file) that the sweep program applies at its next run.

Runs tests/unit/roles/playbooks/gpu_health_release.yml on the controller against a scratch state holding the Xid 109
finding the scheduled sweep holds on the A100 capture (tests/unit/plugins/module_utils/test_gpu_health_metrics.py
run_sweeps). The DaemonSet form: the request is written, nothing runs, gpu_health_released.pending says when it
takes effect. The timer form: a unit file stands where the role installs it (the test's folder, reached through
``..`` from /etc/systemd/system) and ``systemctl`` on the PATH is a stand-in (labelled below) that records its
arguments and runs the sweep program once on the scratch state, as the unit's ExecStart would.

Every case is a host of the same two runs (case_hosts.py), each with its own folder, state, stand-in and plan: the
first run of the DaemonSet form, of the timer form and of the timer form in check mode, then a re-run of the first
two; what a test reads between the runs is kept after the first (``First``).
"""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from case_hosts import run_cases

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
FORMS = {"daemonset": "daemonset", "timer": "timer", "check": "timer"}  # case -> its plan's sweep form


def case_host(folder: Path, case: str) -> dict:
    """The case's variables: the entry point for every GPU of its scratch state; gpu_health_released is written to
    its folder's released.json."""
    return {"gpu_health_release_gpus": ["all"], "gpu_health_release_reason": REASON,
            "gpu_health_state_dir": str(folder),
            "gpu_health_test_sweep_unit": f"../../..{folder}/gpuops-gpu-health-sweep",
            "gpu_health_test_bin": str(folder / "bin"),
            "gpuops_plan": {"hosts": {case: {"health_sweep": {"form": FORMS[case], "reason": "test"}}}},
            "gpu_health_test_out": str(folder / "released.json"),
            **({"gpu_health_test_check": True} if case == "check" else {})}


def release(root: Path, cases: list[str]) -> dict[str, dict]:
    """One run of the entry point on the cases' hosts; each case's gpu_health_released."""
    run = run_cases(PLAYBOOK, {case: case_host(root / case, case) for case in cases}, root / "run", cache="memory",
                    extra_vars={"_gpu_health_sweep_unit": "{{ gpu_health_test_sweep_unit }}"})
    assert not any(found.failed for found in run.cases.values()), run.stdout[-3000:]
    return {case: json.loads((root / case / "released.json").read_text()) for case in cases}


def scratch(folder: Path, held: list) -> None:
    """The scratch state: one held Xid 109 finding; the stand-in systemctl; the boot id the finding was held in."""
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps({"cursor": None, "events": [], "held": held}))
    (folder / "boot_id").write_text(BOOT + "\n")
    (folder / "textfile").mkdir()
    (folder / "bin").mkdir()
    systemctl = folder / "bin" / "systemctl"
    systemctl.write_text(SYSTEMCTL.format(folder=folder, collections=REPO / "collections", python=sys.executable))
    systemctl.chmod(0o755)


@dataclass
class First:
    released: dict  # gpu_health_released
    files: dict[str, str | None]  # name in the case's folder -> its text after the first run (None: absent)
    request_mode: str | None  # clear.json's mode after the first run


@dataclass
class Releases:
    root: Path
    held: list  # the finding each scratch state held
    first: dict[str, First]  # case -> the first run
    again: dict[str, dict]  # case -> gpu_health_released of the re-run (daemonset, timer)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Releases:
    root = tmp_path_factory.mktemp("release")
    held = run_sweeps([XID109_68], [BOOT])[0][1]
    for case in FORMS:
        scratch(root / case, held)
    # where the role installs the unit, on the timer hosts
    for case in ("timer", "check"):
        (root / case / "gpuops-gpu-health-sweep.service").write_text("[Service]\n")
    released = release(root, list(FORMS))
    first = {}
    for case in FORMS:
        folder = root / case
        files = {name: (folder / name).read_text() if (folder / name).exists() else None
                 for name in ("clear.json", "systemctl.log", "sweep.json")}
        mode = oct(stat.S_IMODE((folder / "clear.json").stat().st_mode)) if files["clear.json"] is not None else None
        first[case] = First(released[case], files, mode)
    return Releases(root, held, first, release(root, ["daemonset", "timer"]))


def test_on_a_daemonset_node_the_request_is_written_for_the_pods_next_sweep(releases):
    first, folder = releases.first["daemonset"], releases.root / "daemonset"
    request, released = folder / "clear.json", first.released
    assert first.request_mode == "0o600"
    assert json.loads(first.files["clear.json"])["gpus"]["all"]["reason"] == REASON
    assert (released["held"], released["cleared"], released["skipped"]) == (releases.held, [], "")
    assert f"DaemonSet applies the request {request} at its next sweep" in released["pending"]
    assert first.files["systemctl.log"] is None  # nothing started on a DaemonSet node
    assert releases.again["daemonset"]["request"] == released["request"]  # a re-run merges: the same request
    assert request.read_text() == first.files["clear.json"]
    assert not (folder / "systemctl.log").exists()


def test_on_a_timer_host_the_request_is_written_and_the_unit_started_once_which_clears_it(releases):
    first, folder = releases.first["timer"], releases.root / "timer"
    assert first.files["systemctl.log"].split() == ["start", f"../../..{folder}/gpuops-gpu-health-sweep.service"]
    assert json.loads(first.files["sweep.json"])["held"] == []
    assert first.files["clear.json"] is None  # applied and removed by the sweep
    entry = releases.held[0]
    assert first.released["cleared"] == [
        f"gpu_health released: GPU {entry['gpu']} ({entry['uuid']}) xid RESET_GPU, held since {entry['since']:.0f}: "
        f"cleared (release): {REASON}"]
    assert releases.again["timer"]["held"] == []  # idempotent: nothing held, nothing written or started
    assert len((folder / "systemctl.log").read_text().splitlines()) == 1
    assert not (folder / "clear.json").exists()


def test_check_mode_writes_and_starts_nothing(releases):
    first = releases.first["check"]
    assert first.released["held"] == releases.held
    assert first.files["clear.json"] is None
    assert first.files["systemctl.log"] is None
