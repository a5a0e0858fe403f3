"""health.yml on three nodes: node A logged Xid 79 (RESTART_BM) on GPU 0, node B nothing, node C the same Xid 79
but opted out (health_remediation false) (molecule.yml).

prepare.yml ran the dry run, converge the apply, idempotence the re-run that changes nothing; these tests read the
reports, the audit log and the state on the controller, and the stand-in docker's log on each node. The last two
run the playbook again: an Xid 13 (RESTART_APP) on node B changes nothing on the node, and preflight refuses the
member given node A's GPU 0, naming the GPU and the event. Then, over time (issue 38 §2): node C is reported,
never acted on; the circuit breaker trips on node B's failure (the second node within the window), holds it on a
re-run, and acts only after -e health_breaker_reset=true, audited; a repeat on node A is escalated to "service
required", held on the next run, and health_release gives its GPUs and the workspaces it stopped back.
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
A, B, C = "gpuops-health-a", "gpuops-health-b", "gpuops-health-c"
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


XID79 = "[  981.255810] NVRM: Xid (PCI:0000:ad:00): 79, pid=0, GPU has fallen off the bus.\n"  # node A's, molecule.yml
QUIET = "[    5.120411] nvidia: loading out-of-tree module taints kernel.\n"


def state() -> dict:
    return json.loads((REPORTS / "health" / "state.json").read_text())


def text(kernel_log: str) -> list[str]:
    return ["-e", json.dumps({"health_kernel_log_text": kernel_log})]


def test_node_c_opted_out_is_reported_never_acted_on():
    applied = next(r for r in runs() if r["apply"])
    c = applied["plan"]["hosts"][C]
    assert (c["status"], c["action"]) == ("opted_out", "reboot")
    assert "health_remediation is false for this host" in c["reason"]
    assert applied["steps"][C] == []
    assert docker_log(C) == []
    assert C not in state()["hosts"]
    assert [r for r in audit() if r["host"] == C] == []


def test_the_breaker_trips_on_the_second_node_within_the_window_and_resets_only_when_asked():
    bounds = ["-e", "health_apply=true", "-e", "health_max_unavailable=3", "-e", "health_breaker_window=1h"]
    tripped = playbook("playbooks/health.yml", *bounds, *text(XID79))
    assert tripped.returncode == 0, tripped.stdout[-3000:]
    b = runs()[-1]["plan"]["hosts"][B]
    assert (b["status"], b["action"]) == ("held", "reboot")
    assert f"circuit breaker: 1 of 3 GPU node(s) ({A})" in b["reason"]
    assert "circuit breaker TRIPPED" in tripped.stdout
    assert docker_log(B) == []
    assert state()["breaker"]["tripped"] is True
    assert audit()[-1]["step"] == "breaker_tripped"
    again = playbook("playbooks/health.yml", *bounds, *text(XID79))
    assert again.returncode == 0, again.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][B]["status"] == "held"
    assert docker_log(B) == []
    reset = playbook("playbooks/health.yml", *bounds, *text(XID79), "-e", "health_breaker_reset=true")
    assert reset.returncode == 0, reset.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][B]["status"] == "act"
    assert docker_log(B) == ["stop ws-alice ws-bob"]
    breaker = state()["breaker"]
    assert (breaker["tripped"], len(breaker["resets"])) == (False, 1)
    assert [r["step"] for r in audit() if r["host"] is None] == ["breaker_tripped", "breaker_reset"]


def test_a_repeat_on_a_is_escalated_to_service_required_held_and_released():
    # gpu_health's text cursor counts lines: the converge's line first, then the repeat (and, next run, one more)
    repeat = XID79 + XID79.replace("981.255810", "5120.000001")
    args = ["--limit", A, "-e", "health_apply=true", "-e", "health_breaker_fraction=1"]
    escalated = playbook("playbooks/health.yml", *args, *text(repeat))
    assert escalated.returncode == 0, escalated.stdout[-3000:]
    a = runs()[-1]["plan"]["hosts"][A]
    assert a["action"] == "quarantine"
    assert a["escalated"].startswith("service required: remediated 1 time(s)")
    assert state()["hosts"][A]["service_required"]["reason"] == a["escalated"]
    assert sorted(state()["hosts"][A]["out_of_service"]) == ["0", "1"]
    assert [(r["step"], r["result"]) for r in audit() if r["host"] == A][-1] == ("bug_report", "ok")
    held = playbook("playbooks/health.yml", *args, *text(repeat + XID79.replace("981.255810", "6120.000001")))
    assert held.returncode == 0, held.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["status"] == "service_required"
    stops = docker_log(A)
    released = playbook("playbooks/health.yml", *args, "-e", "health_release=true", *text(QUIET))
    assert released.returncode == 0, released.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["gpus_back"] == ["0", "1"]
    entry = state()["hosts"][A]
    assert ("service_required" in entry, entry["out_of_service"]) == (False, {})
    assert docker_log(A) == [*stops, "start ws-alice ws-bob"]  # the containers it stopped, and only those


NVIDIA_SMI_STANDIN = """#!/bin/sh
# STAND-IN for nvidia-smi (test_a_reset_is_tried_first): no process on any GPU; every call recorded
echo "$*" >>/var/log/gpuops-standin/nvidia-smi.log
"""


def test_a_reset_is_tried_first_and_no_reboot_follows_a_healthy_sweep():
    # Xid 62 (PMU_HALT_ERROR, RESET_GPU in NVIDIA's catalog) on GPU 1 (Bus Id 00000000:AE:00.0 in the capture)
    xid62 = "[ 7001.100000] NVRM: Xid (PCI:0000:ae:00): 62, pid=0, 0000(0000) 00000000 00000000\n"
    install = subprocess.run(["docker", "exec", "-i", A, "sh", "-c", "mkdir -p /var/log/gpuops-standin && cat "
                              ">/usr/local/bin/nvidia-smi && chmod 0755 /usr/local/bin/nvidia-smi"],
                             input=NVIDIA_SMI_STANDIN, text=True, capture_output=True, check=False)
    assert install.returncode == 0, install.stderr
    stops = docker_log(A)
    result = playbook("playbooks/health.yml", "--limit", A, "-e", "health_apply=true", "-e", "health_reboot=true",
                      "-e", "health_max_unavailable=3",
                      "-e", "health_timeout=60", "-e", "health_escalate_after=9", "-e", "health_breaker_fraction=1",
                      *text(QUIET + xid62))
    assert result.returncode == 0, result.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["action"] == "reset_gpu"
    steps = [(r["step"], r["result"]) for r in audit() if r["host"] == A][-9:]
    assert steps == [("stop_workspaces", "ok"), ("mark_out", "ok"), ("gpu_idle", "ok"), ("command", "ok"),
                     ("sweep", "ok"), ("command", "skipped"), ("reboot", "skipped"), ("sweep", "ok"),
                     ("back_if_healthy", "healthy")]
    logged = subprocess.run(["docker", "exec", A, "cat", "/var/log/gpuops-standin/nvidia-smi.log"],
                            capture_output=True, text=True, check=False).stdout.splitlines()
    assert logged == ["--query-compute-apps=pid,process_name --format=csv,noheader -i 1", "-r -i 1"]
    assert docker_log(A) == [*stops, "stop ws-bob", "start ws-bob"]
    assert state()["hosts"][A]["out_of_service"] == {}
