"""health.yml on two nodes: node A logged Xid 79 (RESTART_BM) on GPU 0, node B nothing (molecule.yml).

prepare.yml ran the dry run, converge the apply, idempotence the re-run that changes nothing; these tests read the
reports, the audit log and the state on the controller, and the stand-in docker's log on each node. The last two
run the playbook again: an Xid 13 (RESTART_APP) on node B changes nothing on the node, and preflight refuses the
member given node A's GPU 0, naming the GPU and the event.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from ansible_env import playbook_env  # tests/ansible_env.py (pyproject's pytest pythonpath)

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory"))
REPORTS = EPHEMERAL / "reports"
A, B = "gpuops-health-a", "gpuops-health-b"
XID13 = ("[ 1204.441392] NVRM: Xid (PCI:0000:ad:00): 13, pid=2210, name=python3, Graphics SM Warp Exception on "
         "(GPC 1, TPC 0, SM 0): Out Of Range Address")


def runs() -> list[dict]:
    """Every health run's health.json, oldest first."""
    return [json.loads(p.read_text()) for p in sorted(REPORTS.glob("*/health.json"))]


def docker_log(node: str) -> list[str]:
    out = subprocess.run(["docker", "exec", node, "cat", "/var/log/gpuops-standin/docker.log"],
                         capture_output=True, text=True, check=False)
    return out.stdout.splitlines()


def audit() -> list[dict]:
    path = REPORTS / "health" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def playbook(path: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ansible-playbook", "-i", INVENTORY, str(PROJECT / path), *extra], capture_output=True,
                          text=True, env=playbook_env(PROJECT), timeout=600, check=False)


def test_the_dry_run_plans_a_reboot_of_a_and_nothing_for_b():
    dry = runs()[0]
    assert dry["apply"] is False
    a, b = dry["plan"]["hosts"][A], dry["plan"]["hosts"][B]
    assert (a["status"], a["action"], list(a["gpus_out"])) == ("act", "reboot", ["0"])
    assert a["gpus_out"]["0"]["event"] == "Xid 79"
    assert [s["kind"] for s in dry["steps"][A]] == ["stop_workspaces", "mark_out", "reboot"]
    assert (b["status"], b["action"], b["items"]) == ("clear", "none", [])
    assert dry["steps"][B] == []


def test_the_apply_stops_as_workspaces_takes_its_gpu_out_and_leaves_b_untouched():
    assert docker_log(A) == ["stop ws-alice ws-bob"]  # a reboot stops every workspace of the node
    assert docker_log(B) == []
    state = json.loads((REPORTS / "health" / "state.json").read_text())["hosts"]
    assert state[A]["out_of_service"]["0"]["event"] == "Xid 79"
    assert state[A]["out_of_service"]["0"]["pending"] == "reboot"  # health_reboot false: the reboot is the operator's
    assert state[A]["stopped"] == ["alice", "bob"]
    assert state[B].get("out_of_service", {}) == {}


def test_the_audit_log_has_one_line_per_step_on_a_and_none_for_b():
    lines = audit()
    assert [(r["host"], r["step"], r["result"]) for r in lines] == [
        (A, "stop_workspaces", "ok"), (A, "mark_out", "ok"), (A, "reboot", "skipped")]
    for record in lines:
        assert {"time", "host", "gpu", "event", "action", "result"} <= set(record)
        assert (record["event"], record["action"]) == ("Xid 79", "reboot")


def test_a_re_run_changes_nothing():
    before = (audit(), (REPORTS / "health" / "state.json").read_text(), docker_log(A), docker_log(B))
    result = playbook("playbooks/health.yml", "-e", "health_apply=true")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"changed=[1-9]", result.stdout) is None, result.stdout[-2000:]
    assert (audit(), (REPORTS / "health" / "state.json").read_text(), docker_log(A), docker_log(B)) == before
    assert runs()[-1]["plan"]["hosts"][A]["status"] == "clear"


def test_an_xid_13_changes_nothing_on_the_node():
    text = "[    5.120411] nvidia: loading out-of-tree module taints kernel.\n" \
           "[    5.311907] nvidia-nvlink: Nvlink Core is being initialized, major device number 239\n" + XID13 + "\n"
    result = playbook("playbooks/health.yml", "--limit", B, "-e", "health_apply=true",
                      "-e", json.dumps({"health_kernel_log_text": text}))
    assert result.returncode == 0, result.stdout[-3000:]
    plan = runs()[-1]["plan"]["hosts"][B]
    assert (plan["action"], plan["gpus_out"]) == ("notify_owner", {})
    assert [i["bucket"] for i in plan["items"]] == ["RESTART_APP"]
    assert docker_log(B) == []
    notes = [r for r in audit() if r["host"] == B]
    assert [(r["step"], r["action"]) for r in notes] == [("notify", "notify_owner")]
    state = json.loads((REPORTS / "health" / "state.json").read_text())["hosts"][B]
    assert state.get("out_of_service", {}) == {}


def test_preflight_refuses_the_member_given_the_gpu_out_of_service():
    result = playbook("playbooks/preflight.yml")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"member alice is given GPU 0 of {A}, which is out of service since" in output
    assert ": Xid 79 (reboot, playbooks/health.yml)" in output
    plan = json.loads((REPORTS / "plan.json").read_text())
    assert plan["hosts"][A]["out_of_service"]["0"]["event"] == "Xid 79"
    assert plan["hosts"][B]["out_of_service"] == {}
