"""preflight on a fresh node with no GPU: facts, decisions, report, and refusals of bad plans.

The bad-plan runs use the real role through ansible-playbook against the scenario's node,
and prove that a refused plan leaves the host untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory"))
NODE = "gpuops-preflight-node"


def latest_report() -> dict:
    runs = sorted((EPHEMERAL / "reports").glob("*/"))
    assert runs, f"no report directory under {EPHEMERAL / 'reports'}"
    return json.loads((runs[-1] / f"{NODE}.json").read_text())


def playbook(playbook: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_COLLECTIONS_PATH=str(PROJECT / "collections"),
    )
    return subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(PROJECT / playbook), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_no_gpu_is_a_normal_answer():
    gpu = latest_report()["gpu"]
    assert gpu["present"] is False
    assert gpu["count"] == 0
    assert gpu["gpus"] == []
    assert gpu["source"] in ("pci", "none")
    # one remote call: the topology was not read, and the facts say why
    assert gpu["topology"] is None
    assert any(note.startswith("topology: not read because") for note in gpu["notes"]), gpu["notes"]


def test_plan_passes_and_platform_is_decided():
    report = latest_report()
    checks = {c["name"]: c for c in report["result"]["checks"]}
    assert report["result"]["ok"] is True
    assert checks["os_supported"]["status"] == "ok"
    assert "Debian 12" in checks["os_supported"]["msg"]
    # 535.261.03 runs CUDA 12.2 natively (12.2 GA needs >= 535.54.03)
    assert checks["driver_cuda_compat"]["status"] == "ok"
    assert report["result"]["compat"]["mode"] == "native"
    assert checks["fabric_manager"]["status"] == "skipped"
    decision = report["result"]["platform"]
    assert (decision["platform"], decision["source"]) == ("compose", "auto")
    assert "a team of 3 (< 5) with 4 GPUs (< 8) is small" in decision["reason"]


def test_readable_summary_written():
    runs = sorted((EPHEMERAL / "reports").glob("*/"))
    summary = (runs[-1] / f"{NODE}.md").read_text()
    assert "| platform | **compose** (auto:" in summary
    assert "| verdict | PASS |" in summary


def test_bad_plan_is_refused_before_any_change(host):
    host.run_expect([0], "touch /root/.preflight-marker && sleep 1")
    bad = {
        "nvidia_driver_version": "470.82.01",
        "gpuops_cuda_version": "12.4",
        "preflight_gpu_assignments": [{"name": "alice", "gpus": [0, 1]}, {"name": "bob", "gpus": [1]}],
        "preflight_mig_requested": True,
        "preflight_assume_nvlink": True,
        "preflight_time_slicing_replicas": 1,
    }
    run = playbook("playbooks/preflight.yml", "-e", json.dumps(bad))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "preflight refused gpuops-preflight-node" in out
    assert "CUDA 12.4 cannot run on the pinned driver 470.82.01" in out
    assert "GPU 1 is assigned twice: to alice and to bob" in out
    assert "MIG disables NVLink" in out
    assert "time-slicing replicas is 1" in out
    changed = host.run(
        "find / -xdev -newer /root/.preflight-marker -not -path '/proc/*' -not -path '/sys/*' "
        "-not -path '/run/*' -not -path '/tmp/*' -not -path '/root/.ansible*' -not -path '/var/log/journal/*' "
        "-not -path /root -not -path /tmp -print"
    ).stdout.split()
    assert changed == [], f"preflight changed files on the host: {changed}"


def test_branch_instead_of_version_is_refused():
    run = playbook("playbooks/preflight.yml", "-e", "nvidia_driver_version=550")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "'550' is a branch, not a version" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('{"gpuops_team_size": "3"}', 'gpuops_team_size is "3" (str)'),
        ('{"gpuops_multi_node_training": "yes"}', "expected a bool"),
        ('{"gpuops_teamsize": 3}', "unknown variable(s) gpuops_teamsize"),
        ('{"gpuops_platform": "k8s"}', "gpuops_platform is 'k8s'; expected one of auto, compose, kubernetes"),
    ],
    ids=["team-size-string", "bool-as-string", "typo", "bad-platform"],
)
def test_boilerplate_refuses_bad_inventory(extra, message):
    run = playbook("playbooks/boilerplate.yml", "-e", extra)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert message in out, out[-2000:]
