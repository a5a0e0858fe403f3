"""gpu_health's scheduled sweep on the Compose stack: an injected Xid 79 reaches Alertmanager (issue 38 §1 and §4).

What is real: the sweep's systemd timer and service (installed by prepare.yml with the gpu_health role, as
playbooks/host.yml installs them on a GPU host), the sweep's code (gpu_health_metrics, the module's own), its
textfile in /var/lib/node_exporter/textfile_collector, compose_stack's node-exporter reading it through its root
mount, Prometheus scraping it and evaluating monitoring_assets' gpu_health.rules.yml, and Alertmanager receiving the
alerts. What stands in (labelled, removed after the test): the GPUs, as an ``nvidia-smi`` earlier on the service's
PATH that prints a real ``nvidia-smi -q`` capture (../shared/data/nvidia-smi/query/a100-sxm4-80gb-x4, 4x A100 SXM4,
GPU 1 at 00000000:9E:00.0), and the kernel, as /var/log/kern.log holding a real-format Xid 79 line on that GPU: the
node shares the host's kernel (its /dev/kmsg is not its own to write), ``journalctl -k`` shows no kernel messages
in it and ``dmesg`` is refused, so kern.log is the source the sweep reads, as on a host where rsyslog writes it.

Named test_10 so that it runs after test_05_* and before test_compose.py, whose last test removes the stack.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from pathlib import Path

import pytest

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
SHARED_DATA = Path(os.environ.get("GPUOPS_SHARED_DATA", PROJECT.parent / "shared" / "data"))
CAPTURE = SHARED_DATA / "nvidia-smi" / "query" / "a100-sxm4-80gb-x4_nvidia-smi-q.txt"
GPU, UUID = "1", "GPU-72d87681-01db-370e-567d-41afcf20fad0"  # the capture's GPU at 00000000:9E:00.0
# The Xid 79 line the unit tests feed the module and the sweep (tests/unit/plugins/module_utils/
# test_gpu_health_metrics.py XID79_9E): the message as the driver prints it (tests/unit/kernel_log_samples.py,
# GPUD_KMSG) with a syslog prefix (LLAMA_JOURNAL), on the capture's GPU 1.
XID79 = (
    "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has "
    "fallen off the bus."
)
KERN_LOG = "/var/log/kern.log"
STANDIN_BIN = "/usr/local/bin/nvidia-smi"
STANDIN_CAPTURE = "/usr/local/share/gpuops-standin/nvidia-smi-q.txt"
# TEST STAND-IN for nvidia-smi: no GPU here. `-q` prints a real capture; anything else (nvlink -s/-e) is refused,
# so the sweep reads the NVLink fields as null and says so.
STANDIN = f"""#!/bin/sh
# TEST STAND-IN (molecule/compose tests/test_10_gpu_health_alert.py): prints a recorded nvidia-smi -q, no GPU here.
[ "$*" = "-q" ] && exec cat {STANDIN_CAPTURE}
echo "nvidia-smi TEST STAND-IN: only -q" >&2
exit 2
"""
SERVICE = "gpuops-gpu-health-sweep.service"
TIMER = "gpuops-gpu-health-sweep.timer"
STATE = "/var/lib/gpuops/gpu_health/sweep.json"
TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpuops_gpu_health.prom"
# A release request beside the state (role gpu_health's tasks/release.yml writes it): the next run of the sweep
# applies and removes it
REQUEST = "/var/lib/gpuops/gpu_health/clear.json"
EVENT = f'gpuops_gpu_health_events_total{{kind="xid",gpu="{GPU}",uuid="{UUID}",code="79",action="RESTART_BM"}}'
EXPECTED = {  # alert name -> the labels it must carry (besides instance, job, Hostname)
    "GpuHealthXid": {
        "severity": "critical",
        "kind": "xid",
        "gpu": GPU,
        "uuid": UUID,
        "code": "79",
        "action": "RESTART_BM",
    },
    "GpuHealthGpuFailed": {"severity": "critical", "gpu": GPU, "uuid": UUID},
}
# What the test saw (the service's line, the textfile's health families, the Prometheus sample, the alerts), written
# whether it passes or fails: docs/operations.md's Compose walkthrough quotes it.
RECORD = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "gpu-health-alert.json"
WAIT_S = 120  # scrape and evaluation every 5 s (molecule.yml), for: 0m; the margin is for a loaded 2-core machine


def sh(host, command: str) -> str:
    result = host.run(command)
    assert result.rc == 0, f"{command!r} failed (rc={result.rc}): {result.stdout}{result.stderr}"
    return result.stdout


def get_json(host, url: str):
    return json.loads(sh(host, f"curl -sS -f '{url}'"))


def said_lines(host) -> list[str]:
    return sh(host, f"journalctl -u {SERVICE} --no-pager -o cat | grep '^gpu_health sweep:' || true").splitlines()


def sweep_once(host) -> str:
    """One run of the timer's service; the line it wrote to the journal (verdict, new events, findings)."""
    before = len(said_lines(host))
    sh(host, f"systemctl start {SERVICE}")
    deadline, lines = time.time() + 15, []  # the service's stdout reaches the journal asynchronously
    while time.time() < deadline and len(lines) <= before:
        lines = said_lines(host)
        time.sleep(0.5)
    assert len(lines) == before + 1, lines
    return lines[-1]


def test_an_injected_xid_79_reaches_prometheus_and_alertmanager_with_gpu_uuid_and_code(host) -> None:
    if not CAPTURE.is_file():
        pytest.skip(f"real third-party data not present: {CAPTURE} (see ../shared/data/README.md)")
    timer = host.service(TIMER)
    assert timer.is_enabled, "prepare installed the sweep timer (role gpu_health)"
    assert timer.is_running
    assert not host.file(STANDIN_BIN).exists, "the node has no nvidia-smi of its own to shadow"
    record: dict = {"timer": sh(host, f"systemctl list-timers --all --no-pager {TIMER}")}
    # The timer stopped, and a run it started ended, so that the run below is the one that reads the injected line;
    # started again at the end (finally).
    sh(
        host,
        f"systemctl stop {TIMER} && timeout 60 sh -c "
        f"'while [ \"$(systemctl show -p ActiveState --value {SERVICE})\" = activating ]; do sleep 1; done'",
    )
    try:
        sh(
            host,
            f"mkdir -p {os.path.dirname(STANDIN_CAPTURE)} && cat > {STANDIN_CAPTURE} <<'GPUOPS_EOF'\n"
            f"{CAPTURE.read_text().rstrip()}\nGPUOPS_EOF",
        )
        sh(host, f"cat > {STANDIN_BIN} <<'GPUOPS_EOF'\n{STANDIN}GPUOPS_EOF\nchmod 0755 {STANDIN_BIN}")
        sh(host, f"cat >> {KERN_LOG} <<'GPUOPS_EOF'\n{XID79}\nGPUOPS_EOF")
        said = record["first_run"] = sweep_once(host)
        # the Xid 79 finding fails GPU 1; the capture's own pending row remap on it is a second finding
        cursor = json.loads(host.file(STATE).content_string)["cursor"]
        assert said == "gpu_health sweep: verdict failed, 1 new event(s), 2 finding(s)", (said, cursor)
        assert cursor.startswith("file:"), f"the sweep read {cursor!r}, not kern.log (the module doc's order)"
        text = record["textfile"] = host.file(TEXTFILE).content_string
        assert f"{EVENT} 1\n" in text, text
        assert f'gpuops_gpu_health_gpu_verdict{{gpu="{GPU}",uuid="{UUID}"}} 2\n' in text, text

        query = urllib.parse.quote(EVENT)
        deadline, seen = time.time() + WAIT_S, []
        while time.time() < deadline:
            seen = get_json(host, f"http://127.0.0.1:9090/api/v1/query?query={query}")["data"]["result"]
            if seen:
                break
            time.sleep(2)
        record["prometheus"] = seen
        assert [sample["value"][1] for sample in seen] == ["1"], f"Prometheus after {WAIT_S} s: {seen}"

        received: dict = {}
        while time.time() < deadline:
            alerts = get_json(host, "http://127.0.0.1:9093/api/v2/alerts?active=true")
            received = {a["labels"]["alertname"]: a["labels"] for a in alerts if a["labels"]["alertname"] in EXPECTED}
            record["alertmanager"] = alerts
            if set(received) == set(EXPECTED):
                break
            time.sleep(2)
        firing = get_json(host, "http://127.0.0.1:9090/api/v1/alerts")["data"]["alerts"]
        assert set(received) == set(EXPECTED), (
            f"Alertmanager within {WAIT_S} s received {received}; Prometheus' alerts: "
            f"{[(a['labels']['alertname'], a['state']) for a in firing]}"
        )
        for name, labels in EXPECTED.items():
            assert labels.items() <= received[name].items(), (name, received[name])
            assert received[name]["job"] == "node-exporter", received[name]

        # The next run reads from the cursor: no new event, the tally kept (the Xid alert lasts an hour after it),
        # and the GPU still failed: the sweep holds the Xid 79 finding until a reboot, a GPU reset or a release.
        said = record["next_run"] = sweep_once(host)
        assert said.startswith("gpu_health sweep: verdict failed, 0 new event(s),"), said
        text = host.file(TEXTFILE).content_string
        assert f"{EVENT} 1\n" in text
        assert f'gpuops_gpu_health_gpu_verdict{{gpu="{GPU}",uuid="{UUID}"}} 2\n' in text, text
        assert [entry["uuid"] for entry in json.loads(host.file(STATE).content_string)["held"]] == [UUID]
        # Released as health.yml releases a GPU: a release request, then one run of the timer's service.
        request = json.dumps({"gpus": {UUID: {"reason": "molecule compose", "at": int(time.time())}}})
        sh(host, f"umask 077; printf '%s' '{request}' > {REQUEST}")
        sweep_once(host)
        said = record["release"] = sh(host, f"journalctl -u {SERVICE} --no-pager -o cat | grep '^gpu_health released:'")
        assert f"gpu_health released: GPU {GPU} ({UUID}) xid RESTART_BM" in said, said
        assert "cleared (release): molecule compose" in said, said
        assert not host.file(REQUEST).exists
        assert json.loads(host.file(STATE).content_string)["held"] == []
    finally:
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        host.run(f"""umask 077; printf '%s' '{{"gpus": {{"all": {{"reason": "molecule cleanup"}}}}}}' > {REQUEST}; """
                 f"systemctl start {SERVICE}")
        host.run(f"rm -f {STANDIN_BIN} {KERN_LOG}; rm -rf {os.path.dirname(STANDIN_CAPTURE)}; systemctl start {TIMER}")
