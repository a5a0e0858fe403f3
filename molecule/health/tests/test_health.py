"""health.yml on three nodes: node A logged Xid 79 (RESTART_BM) on GPU 0, node B nothing, node C the same Xid 79
but opted out (health_remediation false) (molecule.yml).

prepare.yml ran the dry run, converge the apply; these tests read the reports, the audit log and the state on the
controller, and the stand-in docker's log on each node. The re-run that changes nothing is a test here (the
scenario's idempotence: molecule.yml runs no idempotence step of its own). The next two run the playbook again: an
Xid 13 (RESTART_APP) on node B changes nothing on the node, and preflight refuses the member given node A's GPU 0,
naming the GPU and the event. Then, over time (issue 38 §2): node C is reported,
never acted on; the circuit breaker trips on node B's failure (the second node within the window), holds it on a
re-run, and acts only after -e health_breaker_reset=true, audited; a repeat on node A is escalated to "service
required" and held on the next run. Back in service only through a validation run (issue 38 §3): health_release is
refused on a failing DCGM diag and accepted on a passing one (a stand-in dcgmi printing DCGM's real JSON). A reset
is tried before a reboot, and the workspace an operator stopped is neither stopped nor started; on Kubernetes an
operator's cordon is never undone (the stand-in kubectl's argv); the reboot reason reaches the node's journal.
Every stand-in (docker, nvidia-smi, dcgmi, kubectl, shutdown) is labelled and records the argv it is given.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import jinja2
import yaml
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
    return [json.loads(p.read_text()) for p in sorted(REPORTS.glob("health/*/health.json"))]


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
    assert [s["kind"] for s in a["steps"]] == ["stop_workspaces", "mark_out", "reboot"]
    assert (b["status"], b["action"], b["items"]) == ("clear", "none", [])
    assert b["steps"] == []


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
    """The scenario's idempotence run (molecule.yml has no idempotence step): changed=0, and nothing on the controller
    or the nodes moved."""
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
    assert c["steps"] == []
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


def node_file(node: str, path: str) -> list[str]:
    out = subprocess.run(["docker", "exec", node, "cat", path], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()


def install(node: str, files: dict[str, str]) -> None:
    """Write each stand-in (mode 0755) or data file on the node."""
    for path, content in files.items():
        mode = "0755" if content.startswith("#!") else "0644"
        done = subprocess.run(["docker", "exec", "-i", node, "sh", "-c", f"mkdir -p /var/log/gpuops-standin "
                               f"{Path(path).parent} && rm -f {path} && cat >{path} && chmod {mode} {path}"],
                              input=content, text=True, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr


DCGMI_STANDIN = """#!/bin/sh
# STAND-IN for dcgmi (molecule/health): records its argv; prints the `dcgmi diag -j` JSON the test wrote (NVIDIA
# DCGM's real output, trimmed to this node's 2 GPUs) and exits as dcgmi does, non-zero when a test failed
echo "$*" >>/var/log/gpuops-standin/dcgmi.log
cat /etc/gpuops-standin/dcgmi-diag.json
exit "$(cat /etc/gpuops-standin/dcgmi-rc)"
"""


def dcgm_diag(fail_gpu: int | None = None) -> str:
    """`dcgmi diag -j` as DCGM 3.1.0 printed it on 8 GPUs (the real output NVIDIA's DCGM repository quotes in its
    JsonResult test: tests/unit/plugins/module_utils/fixtures/dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt), kept to
    GPUs 0 and 1; ``fail_gpu``: that GPU's software test FAILs with a warning, as DCGM writes one."""
    text = (PROJECT / "tests/unit/plugins/module_utils/fixtures/dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt").read_text()
    document = json.loads(text[text.index("{"):])
    for category in document["DCGM GPU Diagnostic"]["test_categories"]:
        for test in [t for t in category["tests"] if t]:
            for result in test["results"]:
                result["gpu_ids"] = ",".join(g for g in str(result["gpu_ids"]).split(",") if g in ("0", "1"))
            test["results"] = [r for r in test["results"] if r["gpu_ids"]]
            if fail_gpu is not None and test["name"] == "software":
                test["results"][fail_gpu].update(status="FAIL", warnings=[f"GPU {fail_gpu}: software test failed"])
    return json.dumps(document, indent=1)


# The scheduled sweep on a node (issue 38 §1): the collection's own gpu_health_metrics, from the files the role ships,
# in the node, run by the role's service unit. The node's nvidia-smi is a labelled stand-in that prints the real
# `nvidia-smi -q` capture (molecule.yml's health_state_text, so its GPUs' UUIDs are those health.yml reads) and
# records every call; the sweep's journalctl stand-in prints the kernel-log lines the test wrote.
NVIDIA_SMI_CAPTURE = """#!/bin/sh
# STAND-IN for nvidia-smi (test_health_takes_the_sweeps_last_result): `-q` prints the real capture of a 2x H100 NVL
# host; no NVLink answer; every call recorded
echo "$*" >>/var/log/gpuops-standin/nvidia-smi.log
[ "$1" = -q ] && exec cat /etc/gpuops-standin/nvidia-smi-q.txt
exit 6
"""
JOURNALCTL_KERNEL = """#!/bin/sh
# STAND-IN for `journalctl -k` on the sweep's PATH only (a container has no kernel journal of its own): prints the
# kernel-log file the test wrote, then a cursor, as journalctl --show-cursor does; records every call
echo "$*" >>/var/log/gpuops-standin/journalctl.log
case "$*" in *--after-cursor*) ;; *) cat /etc/gpuops-standin/kernel.log ;; esac
echo "-- cursor: s=gpuops-standin;i=1"
"""
SWEEP_LIB = "/usr/local/lib/gpuops/gpu_health"  # roles/gpu_health/vars/main.yml _gpu_health_sweep_lib
SWEEP_STATE = "/var/lib/gpuops/gpu_health/sweep.json"  # in gpu_health_state_dir's default; result.json beside it
SWEEP_UNIT = "/etc/systemd/system/gpuops-gpu-health-sweep.service"  # where gpu_health's tasks/sweep.yml writes it
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"  # gpu_health_textfile_dir's default
CAPTURE = PROJECT / "../shared/data/nvidia-smi/query/h100-nvl-x2_nvidia-smi-q.txt"  # molecule.yml's health_state_text


# The timer's DCGM level: the role's default (health_sweep_results last takes a result at it with health's defaults).
SWEEP_DCGM_LEVEL = yaml.safe_load((PROJECT / "roles/gpu_health/defaults/main.yml").read_text())[
    "gpu_health_sweep_dcgm_level"]


def scheduled_sweep(node: str, events: int) -> str:
    """One run of the scheduled sweep on the node as its timer runs it: the role's service unit
    (roles/gpu_health/templates/gpuops-gpu-health-sweep.service.j2, rendered with the role's paths) installed where
    gpu_health installs it, and its Environment= and ExecStart= run, from a copy of the collection's module_utils;
    the journalctl stand-in first on the PATH. No timer: only the test runs it. Returns what it printed."""
    code = f"{SWEEP_LIB}/ansible_collections/gpuops/cluster/plugins"
    unit = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        (PROJECT / "roles/gpu_health/templates/gpuops-gpu-health-sweep.service.j2").read_text()).render(
        ansible_managed="molecule/health", _gpu_health_sweep_unit="gpuops-gpu-health-sweep",
        _gpu_health_sweep_lib=SWEEP_LIB, _gpu_health_sweep_python="/usr/bin/python3",
        gpuops_sweep_state=SWEEP_STATE, gpu_health_textfile_dir=TEXTFILE_DIR,
        gpu_health_sweep_dcgm_level=SWEEP_DCGM_LEVEL, _gpu_health_sweep_expected_gpus=2)
    for argv in (["docker", "exec", node, "mkdir", "-p", code, "/var/lib/gpuops/gpu_health", TEXTFILE_DIR],
                 ["docker", "cp", str(PROJECT / "plugins" / "module_utils"), f"{node}:{code}/"]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    install(node, {SWEEP_UNIT: unit})
    run = subprocess.run(
        ["docker", "exec", "-e", "PATH=/etc/gpuops-standin/sweep-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
         ":/sbin:/bin", node, "sh", "-c", f"env $(sed -n 's/^Environment=//p' {SWEEP_UNIT}) "
         f"$(sed -n 's/^ExecStart=//p' {SWEEP_UNIT})"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{events} new event(s)" in run.stdout, run.stdout
    return run.stdout


def sweep_held(node: str) -> tuple[list[str], list[str]]:
    """The GPU UUIDs the node's scheduled sweep holds a finding of: in its state file, and in the metrics file it
    wrote for node-exporter (gpuops_gpu_health_held_since_timestamp_seconds, what GpuHealthGpuFailed fires on)."""
    state = json.loads("\n".join(node_file(node, SWEEP_STATE)))
    metrics = [line for line in node_file(node, f"{TEXTFILE_DIR}/gpuops_gpu_health.prom")
               if line.startswith("gpuops_gpu_health_held_since_timestamp_seconds{")]
    return (sorted(entry["uuid"] for entry in state["held"]),
            sorted(re.search(r'uuid="([^"]*)"', line).group(1) for line in metrics))


def test_return_to_service_is_refused_on_a_failing_dcgm_diag_and_accepted_on_a_passing_one():
    """Node A's GPUs 0 and 1 are out (service required). Its scheduled sweep read Xid 79 on GPU 0 and Xid 62 on
    GPU 1 and holds both findings (GpuHealthGpuFailed fires on them): a failed validation keeps them held, a passed
    one clears them on the node (gpu_health's release entry point), and the audit log says so."""
    uuids = re.findall(r"GPU UUID\s+:\s+(\S+)", CAPTURE.read_text())  # GPU 0 (AD:00.0), GPU 1 (AE:00.0)
    journal = ("2026-12-05T00:30:00+0000 gpuops-health-a kernel: NVRM: Xid (PCI:0000:ad:00): 79, pid=0, GPU has "
               "fallen off the bus.\n"
               "2026-12-05T00:30:01+0000 gpuops-health-a kernel: NVRM: Xid (PCI:0000:ae:00): 62, pid=0, 0000(0000) "
               "00000000 00000000\n")
    install(A, {"/usr/local/bin/nvidia-smi": NVIDIA_SMI_CAPTURE, "/etc/gpuops-standin/nvidia-smi-q.txt":
                CAPTURE.read_text(), "/etc/gpuops-standin/sweep-bin/journalctl": JOURNALCTL_KERNEL,
                "/etc/gpuops-standin/kernel.log": journal})
    said = scheduled_sweep(A, events=2)
    assert sweep_held(A) == (sorted(uuids), sorted(uuids)), said
    args = ["--limit", A, "-e", "health_apply=true", "-e", "health_breaker_fraction=1", "-e", "health_release=true",
            *text(QUIET)]
    install(A, {"/usr/local/bin/dcgmi": DCGMI_STANDIN, "/etc/gpuops-standin/dcgmi-diag.json": dcgm_diag(fail_gpu=1),
                "/etc/gpuops-standin/dcgmi-rc": "226\n"})
    stops = docker_log(A)
    refused = playbook("playbooks/health.yml", *args)
    assert refused.returncode != 0
    assert (f"health stopped on {A} at step validate: validation failed at dcgm_diag: dcgm_diag FAIL (DCGM diag "
            "level 2 FAIL: software on GPU(s) 1 (GPU 1: software test failed))") in refused.stdout
    entry = state()["hosts"][A]
    assert (sorted(entry["out_of_service"]), "service_required" in entry) == (["0", "1"], True)
    assert (entry["validation"]["ok"], entry["validation"]["failed"]) == (False, ["dcgm_diag"])
    assert [(r["step"], r["result"]) for r in audit() if r["host"] == A][-1] == ("validate", "failed")
    report = json.loads((sorted(REPORTS.glob("health/*/health.json"))[-1].parent / f"validation-{A}.json").read_text())
    assert [c["status"] for c in report[0]["checks"]] == ["PASS", "FAIL", "UNKNOWN"]  # gpu_health, DCGM, H100 NVL
    assert docker_log(A) == stops  # nothing given back
    assert node_file(A, "/var/log/gpuops-standin/dcgmi.log") == ["diag -r 2 -j"]  # health_return_dcgm_level 2
    assert sweep_held(A) == (sorted(uuids), sorted(uuids))  # not validated: still held, the alert still firing
    install(A, {"/etc/gpuops-standin/dcgmi-diag.json": dcgm_diag(), "/etc/gpuops-standin/dcgmi-rc": "0\n"})
    accepted = playbook("playbooks/health.yml", *args)
    assert accepted.returncode == 0, accepted.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["gpus_back"] == ["0", "1"]
    entry = state()["hosts"][A]
    assert ("service_required" in entry, entry["out_of_service"], entry["validation"]["ok"]) == (False, {}, True)
    assert [c["status"] for c in entry["validation"]["checks"]] == ["PASS", "PASS", "UNKNOWN"]
    assert docker_log(A) == [*stops, "start ws-alice ws-bob"]  # the containers it stopped, and only those
    assert node_file(A, "/var/log/gpuops-standin/dcgmi.log") == ["diag -r 2 -j"] * 2
    # validated and back: the node's sweep holds neither finding, and its metrics carry no held_since for them
    assert sweep_held(A) == ([], [])
    clear = [r for r in audit() if r["host"] == A][-1]
    assert (clear["step"], clear["gpu"], clear["result"]) == ("clear_held", ["0", "1"], "ok")
    for gpu, uuid, finding in (("0", uuids[0], "xid RESTART_BM"), ("1", uuids[1], "xid RESET_GPU")):
        assert f"GPU {gpu} ({uuid}) {finding}" in clear["detail"], clear["detail"]
    assert "cleared (release): health.yml by " in clear["detail"]
    assert "GPU(s) 0, 1 back in service after a passed validation (health_release)" in clear["detail"]


NVIDIA_SMI_STANDIN = """#!/bin/sh
# STAND-IN for nvidia-smi (test_a_reset_is_tried_first): no process on any GPU; every call recorded
echo "$*" >>/var/log/gpuops-standin/nvidia-smi.log
"""


# Xid 62 (PMU_HALT_ERROR, RESET_GPU in NVIDIA's catalog) on GPU 0 and GPU 1 (Bus Id 00000000:AD:00.0 and AE:00.0)
XID62 = ("[ 7001.100000] NVRM: Xid (PCI:0000:ad:00): 62, pid=0, 0000(0000) 00000000 00000000\n"
         "[ 7001.100001] NVRM: Xid (PCI:0000:ae:00): 62, pid=0, 0000(0000) 00000000 00000000\n")


def test_a_reset_is_tried_first_no_reboot_follows_a_healthy_sweep_and_an_operators_stopped_workspace_stays():
    install(A, {"/usr/local/bin/nvidia-smi": NVIDIA_SMI_STANDIN, "/etc/gpuops-standin/stopped": "alice\n"})
    stops, smi_calls = docker_log(A), len(node_file(A, "/var/log/gpuops-standin/nvidia-smi.log"))
    result = playbook("playbooks/health.yml", "--limit", A, "-e", "health_apply=true", "-e", "health_reboot=true",
                      "-e", "health_max_unavailable=3",
                      "-e", "health_timeout=60", "-e", "health_escalate_after=9", "-e", "health_breaker_fraction=1",
                      *text(QUIET + XID62))
    assert result.returncode == 0, result.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["action"] == "reset_gpu"
    steps = [(r["step"], r["result"]) for r in audit() if r["host"] == A][-12:]
    assert steps == [("stop_workspaces", "ok"), ("mark_out", "ok"), ("gpu_idle", "ok"), ("command", "ok"),
                     ("gpu_idle", "ok"), ("command", "ok"), ("sweep", "ok"), ("command", "skipped"),
                     ("reboot", "skipped"), ("validate", "ok"), ("back_if_healthy", "healthy"), ("clear_held", "ok")]
    assert node_file(A, "/var/log/gpuops-standin/nvidia-smi.log")[smi_calls:] == [
        "--query-compute-apps=pid,process_name --format=csv,noheader -i 0", "-r -i 0",
        "--query-compute-apps=pid,process_name --format=csv,noheader -i 1", "-r -i 1"]
    # both GPUs' workspaces were to stop; alice's was stopped by an operator: neither stopped nor started here
    assert docker_log(A) == [*stops, "stop ws-bob", "start ws-bob"]
    assert state()["hosts"][A]["out_of_service"] == {}
    assert node_file(A, "/var/log/gpuops-standin/dcgmi.log")[-1] == "diag -r 2 -j"  # validated before it went back


KUBECTL_STANDIN = """#!/bin/sh
# STAND-IN for kubectl (molecule/health): no API server here. Records every argv; answers `get nodes` and `get pods`
# with the JSON the test wrote (the shape kubectl prints: a List of Node / Pod objects) and succeeds otherwise
echo "$*" >>/var/log/gpuops-standin/kubectl.log
case "$*" in
  "get nodes -o json") cat /etc/gpuops-standin/nodes.json ;;
  "get pods -A "*) cat /etc/gpuops-standin/pods.json ;;
  "delete pod "*) echo "pod \\"$5\\" deleted" ;;
esac
"""


def kube_list(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)})


def test_an_operators_cordon_is_left_alone_on_kubernetes():
    # node A cordoned by an operator: spec.unschedulable and the taint `kubectl cordon` sets, no gpuops.io/cordoned-by
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": A, "labels": {"kubernetes.io/hostname": A, "nvidia.com/gpu.present": "true"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"unschedulable": True, "taints": [{"key": "node.kubernetes.io/unschedulable",
                                                        "effect": "NoSchedule", "timeAdded": "2026-12-04T09:00:00Z"}]}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "namespace": "team-a"},
           "spec": {"nodeName": A, "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running"}}
    install(A, {"/usr/local/bin/kubectl": KUBECTL_STANDIN, "/etc/gpuops-standin/nodes.json": kube_list(node),
                "/etc/gpuops-standin/pods.json": kube_list(pod)})
    xid62 = "[ 8001.100000] NVRM: Xid (PCI:0000:ae:00): 62, pid=0, 0000(0000) 00000000 00000000\n"
    # the plan on record as preflight writes it for a Kubernetes fleet (its platform; the rest as on file), taken
    # with -e gpuops_platform=kubernetes (tasks/plan.yml takes a plan on file only for the inventory's platform)
    on_file = (REPORTS / "plan.json").read_text()
    kube = json.loads(on_file)
    kube["platform"].update(name="kubernetes", source="override", reason="gpuops_platform")
    (REPORTS / "plan.json").write_text(json.dumps(kube))
    try:
        result = playbook("playbooks/health.yml", "--limit", A, "-e", "health_apply=true",
                          "-e", "gpuops_platform=kubernetes", "-e", "health_max_unavailable=3", "-e",
                          "health_escalate_after=9", "-e", "health_breaker_fraction=1", *text(QUIET + XID62 + xid62))
    finally:
        (REPORTS / "plan.json").write_text(on_file)
    assert result.returncode == 0, result.stdout[-3000:]
    assert runs()[-1]["plan"]["hosts"][A]["operator_cordon"] is True
    assert [(r["step"], r["result"]) for r in audit() if r["host"] == A][-8:] == [
        ("notify", "ok"), ("mark_out", "ok"), ("drain_gpu_pods", "ok"), ("gpu_idle", "ok"), ("command", "ok"),
        ("validate", "ok"), ("back_if_healthy", "healthy"), ("clear_held", "ok")]
    # GPU 1 went back into service, and the node was never cordoned, marked nor uncordoned by health
    assert node_file(A, "/var/log/gpuops-standin/kubectl.log") == [
        "get nodes -o json", f"get pods -A --field-selector spec.nodeName={A} -o json",
        "delete pod -n team-a train-0 --wait=true --timeout=600s"]
    entry = state()["hosts"][A]
    assert (entry["out_of_service"], entry["cordoned_by"]) == ({}, "operator")


SHUTDOWN_STANDIN = """#!/bin/sh
# STAND-IN for shutdown (molecule/health): a container is not rebooted; records the argv ansible.builtin.reboot gives
echo "$*" >>/var/log/gpuops-standin/shutdown.log
"""


def test_the_reboot_reason_is_in_the_nodes_journal_before_the_reboot():
    """Node B: Xid 79 (RESTART_BM) with health_reboot true. The reason goes to the journal (logger -t gpuops-health,
    read back with journalctl: systemd-journald runs in the node), then ansible.builtin.reboot calls shutdown (a
    stand-in: a container cannot reboot), and waits for a new boot id that a container never gets: the reboot step
    fails, and the GPU still waits for its reboot."""
    install(B, {"/usr/sbin/shutdown": SHUTDOWN_STANDIN})
    xid79 = XID79.replace("981.255810", "9120.000001")
    result = playbook("playbooks/health.yml", "--limit", B, "-e", "health_apply=true", "-e", "health_reboot=true",
                      "-e", "health_timeout=5", "-e", "health_max_unavailable=3", "-e", "health_escalate_after=9",
                      "-e", "health_breaker_fraction=1", *text(QUIET * 4 + xid79))
    assert result.returncode != 0
    assert f"health stopped on {B} at step reboot" in result.stdout
    why = f"gpuops health reboots {B}: reboot: Xid 79 on GPU 0: RESTART_BM: restart the bare-metal node"
    journal = subprocess.run(["docker", "exec", B, "journalctl", "-t", "gpuops-health", "-o", "cat", "--no-pager"],
                             capture_output=True, text=True, check=False)
    assert journal.stdout.splitlines() == [why], journal.stderr
    logger = [r for r in audit() if r["host"] == B][-2:]
    assert [(r["step"], r["argv"], r["result"]) for r in logger] == [
        ("command", ["logger", "-t", "gpuops-health", why], "ok"), ("reboot", None, "failed")]
    assert node_file(B, "/var/log/gpuops-standin/shutdown.log") == [f"-r 0 {why}"]
    assert state()["hosts"][B]["out_of_service"]["0"]["pending"] == "reboot"


def test_health_takes_the_sweeps_last_result_instead_of_sweeping_again():
    capture = CAPTURE.read_text()
    xid62 = "2026-12-04T21:00:00+0000 gpuops-health-b kernel: NVRM: Xid (PCI:0000:ae:00): 62, pid=0, 0000(0000) " \
            "00000000 00000000\n"
    for node in (B, C):
        install(node, {"/usr/local/bin/nvidia-smi": NVIDIA_SMI_CAPTURE,
                       "/etc/gpuops-standin/nvidia-smi-q.txt": capture})
    install(B, {"/etc/gpuops-standin/sweep-bin/journalctl": JOURNALCTL_KERNEL,
                "/etc/gpuops-standin/kernel.log": xid62})
    scheduled_sweep(B, events=1)
    calls = {node: node_file(node, "/var/log/gpuops-standin/nvidia-smi.log") for node in (B, C)}
    assert calls[B] == ["-q", "nvlink -s", "nvlink -e"]  # the sweep's, in the node
    # health_dcgm_level as health's defaults leave it (unset; molecule.yml sets 0 for the other runs): the timer's
    # result stands at the timer's own level (issue 38 review: the defaults used to sweep every host again)
    last = ["--limit", f"{B},{C}", "-e", "health_sweep_results=last", "-e", "health_kernel_log_text=",
            "-e", "health_state_text=", "-e", json.dumps({"health_dcgm_level": None})]
    result = playbook("playbooks/health.yml", *last)
    assert result.returncode == 0, result.stdout[-3000:]
    report = runs()[-1]
    swept = {host: report["plan"]["hosts"][host]["swept"] for host in (B, C)}  # where each host's sweep came from
    assert swept[B]["source"] == "sweep", swept
    assert swept[B]["why"].startswith("the scheduled sweep's last result")
    assert swept[B]["why"].endswith(
        f"DCGM diag level {SWEEP_DCGM_LEVEL} (health_dcgm_level unset: the sweep's level stands)"), swept
    assert (swept[C]["source"], swept[C]["why"]) == (
        "gpu_health", "no sweep result at /var/lib/gpuops/gpu_health/result.json on this host (is the scheduled "
        "sweep installed? gpu_health_sweep_timer_enabled, or kube_monitoring's gpu-health-sweep DaemonSet): "
        "swept again")
    # the commands run: gpu_health did not call nvidia-smi on B; on C it did
    assert node_file(B, "/var/log/gpuops-standin/nvidia-smi.log") == calls[B]
    assert node_file(C, "/var/log/gpuops-standin/nvidia-smi.log") == [*calls[C], "-q", "nvlink -s", "nvlink -e"]
    events = [i for i in report["plan"]["hosts"][B]["items"] if i["source"] == "event"]
    assert [(i["event"], i["gpu"], i["bucket"], i["action"], i["new"]) for i in events] == [
        ("Xid 62", 1, "RESET_GPU", "reset_gpu", True)]
    assert f"| {B} |" in (sorted(REPORTS.glob("health/*/health.md"))[-1]).read_text()
    assert "read from the scheduled sweep" in (sorted(REPORTS.glob("health/*/health.md"))[-1]).read_text()
    # past health_sweep_max_age the node is swept again, and the report says so
    stale = playbook("playbooks/health.yml", *last, "-e", "health_sweep_max_age=1")
    assert stale.returncode == 0, stale.stdout[-3000:]
    why = runs()[-1]["plan"]["hosts"][B]["swept"]
    assert why["source"] == "gpu_health"
    assert "over health_sweep_max_age (1 s)" in why["why"], why
    assert node_file(B, "/var/log/gpuops-standin/nvidia-smi.log") == [*calls[B], "-q", "nvlink -s", "nvlink -e"]
