"""preflight on a fresh node with no GPU: facts, decisions, report, and refusals of bad plans.

The bad-plan runs use the real role through ansible-playbook against the scenario's node,
and prove that a refused plan leaves the host untouched. Two faults are real here: a nearly
full data volume (a small tmpfs on the node) and an unreachable NFS server (the node's own
loopback, where nothing listens on 2049).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ansible_env import playbook_env  # tests/ansible_env.py (pyproject's pytest pythonpath)

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory"))
NODE = "gpuops-preflight-node"


def latest_report() -> dict:
    runs = sorted((EPHEMERAL / "reports").glob("*/"))
    assert runs, f"no report directory under {EPHEMERAL / 'reports'}"
    return json.loads((runs[-1] / f"{NODE}.json").read_text())


def playbook(playbook: str, *extra: str) -> subprocess.CompletedProcess:
    env = playbook_env(PROJECT)
    return subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(PROJECT / playbook), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


UNCHANGED_FIND = (
    "find / -xdev -newer /root/.preflight-marker -not -path '/proc/*' -not -path '/sys/*' "
    "-not -path '/run/*' -not -path '/tmp/*' -not -path '/root/.ansible*' -not -path '/var/log/journal/*' "
    "-not -path /root -not -path /tmp -print"
)


def mark(host) -> None:
    host.run_expect([0], "touch /root/.preflight-marker && sleep 1")


def assert_unchanged(host) -> None:
    changed = host.run(UNCHANGED_FIND).stdout.split()
    assert changed == [], f"preflight changed files on the host: {changed}"


def test_one_remote_call_gathers_the_os_facts_too():
    report = latest_report()
    os_facts = report["host_facts"]["os"]
    assert os_facts["distribution"] == "Debian"
    assert os_facts["distribution_major_version"] == "12"
    assert os_facts["kernel"]
    assert os_facts["architecture"]
    assert os_facts["secure_boot"] in (True, False, None)
    assert report["os"].startswith("Debian 12")


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
    mark(host)
    bad = {"nvidia_driver_version": "470.82.01", "gpuops_cuda_version": "12.4"}
    run = playbook("playbooks/preflight.yml", "-e", json.dumps(bad))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "preflight refused gpuops-preflight-node" in out
    assert "CUDA 12.4 cannot run on the pinned driver 470.82.01" in out
    # The team rule runs once, in preflight.yml's gpuops_* check (site.yml: the boilerplate play's), before any
    # host is judged or touched.
    team = {"gpuops_teams": [{"name": "research"}],
            "gpuops_members": [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0, 1]},
                               {"name": "bob", "uid": 2002, "team": "research", "gpus": [1]},
                               {"name": "carol", "uid": 2003, "team": "research", "gpus": [2]}]}
    run = playbook("playbooks/preflight.yml", "-e", json.dumps(team))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "the team in group_vars/all/team.yml cannot be used on gpuops-preflight-node" in out
    assert "GPU 1 is given twice: to alice and to bob" in out
    assert_unchanged(host)


@pytest.fixture
def tiny_volume(host):
    """A nearly full 8 MiB data volume on the node (tmpfs, 7 MiB used), removed afterwards."""
    host.run_expect([0], "mkdir -p /srv/tiny && mount -t tmpfs -o size=8m tmpfs /srv/tiny")
    try:
        host.run_expect([0], "dd if=/dev/zero of=/srv/tiny/fill bs=1M count=7 2>/dev/null")
        yield "/srv/tiny"
    finally:
        host.run("umount /srv/tiny && rmdir /srv/tiny")


def test_nearly_full_data_volume_is_refused_naming_path_and_space(host, tiny_volume):
    mark(host)
    wanted = [{"path": f"{tiny_volume}/gpuops", "min_free": "64M", "why": "service data"}]
    run = playbook("playbooks/preflight.yml", "-e", json.dumps({"preflight_free_space": wanted}))
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "preflight refused gpuops-preflight-node" in out
    assert f"{tiny_volume}/gpuops (filesystem of {tiny_volume}) has " in out, out[-3000:]
    assert "MiB free; 64.0 MiB is needed for service data" in out
    assert not host.file(f"{tiny_volume}/gpuops").exists
    assert_unchanged(host)


def test_unreachable_nfs_server_is_refused_quickly_and_nothing_is_mounted(host):
    # the node's own loopback: nothing listens on 2049 there, so the connect is refused at once
    mark(host)
    datasets = [{"name": "imagenet", "src": "127.0.0.1:/export/imagenet", "fstype": "nfs4", "opts": "ro,hard"}]
    started = time.monotonic()
    run = playbook(
        "playbooks/preflight.yml", "-e", json.dumps({"compose_stack_datasets": datasets, "preflight_probe_timeout": 2})
    )
    elapsed = time.monotonic() - started
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "NFS server unreachable: dataset imagenet (127.0.0.1:2049)" in out, out[-3000:]
    assert "Nothing was mounted or created" in out
    assert elapsed < 120, f"the refused run took {elapsed:.0f} s"  # noqa: PLR2004 -- far above 2 s, far below a hang
    assert not host.file("/mnt/datasets").exists
    assert "127.0.0.1:/export/imagenet" not in host.run("cat /proc/mounts").stdout
    assert_unchanged(host)


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
