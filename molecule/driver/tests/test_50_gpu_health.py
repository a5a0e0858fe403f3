"""gpu_health: DCGM 4 (LABELLED TEST STAND-IN packages) pinned and held from the CUDA repository the host has.

What is real: apt (sources, Signed-By, pin at 1001, hold, what upgrade and dist-upgrade would do), systemd's
enablement and start of nvidia-dcgm, and the role's decision (gpu_health_dcgm_source: auto) to install from the
source nvidia_driver wrote for the CUDA repository stand-in instead of adding a second source for the same URL,
which apt refuses ("Conflicting values set for option Signed-By") and which would break every apt command. What
stands in: the packages (names, epoch and "= version" structure of NVIDIA's, nvidia-repo-structure.yml, dcgm),
their nvidia-dcgm unit (a labelled sleep) and dcgmi (a labelled program that answers only while that unit runs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

testinfra_hosts = ["gpuops-driver-deb13", "gpuops-driver-deb12-cuda"]

STRUCTURE = yaml.safe_load((Path(__file__).resolve().parents[1] / "files" / "nvidia-repo-structure.yml").read_text())
PACKAGES = [pkg["name"] for pkg in STRUCTURE["dcgm"]]
PIN = f"{STRUCTURE['dcgm_epoch']}:{STRUCTURE['dcgm_versions'][0]}-1"  # converge.yml pins 4.6.0 (bare)
NEWER = f"{STRUCTURE['dcgm_epoch']}:{STRUCTURE['dcgm_versions'][1]}-1"
MIRROR = "http://127.0.0.1:8089/cuda"
DCGMI_LOG = "/var/log/gpuops-dcgmi-standin.log"


def test_the_mirror_offers_a_newer_dcgm_and_the_packages_are_labelled(host):
    # Precondition of the pin tests: without a newer version they would pass trivially.
    out = host.check_output(f"apt-cache madison {' '.join(PACKAGES)}")
    for name in PACKAGES:
        assert re.search(rf"^\s*{re.escape(name)} \|\s+{re.escape(NEWER)}\s+\|\s+{re.escape(MIRROR)}", out, re.M), out
        assert "TEST STAND-IN" in host.check_output(f"dpkg-query -W -f '${{Description}}' {name}")


def test_every_dcgm_package_is_at_the_pin_held_and_pinned_at_1001(host):
    holds = set(host.check_output("apt-mark showhold").split())
    pref = host.file("/etc/apt/preferences.d/gpuops-dcgm.pref").content_string
    pinned = dict(re.findall(r"^Package: (\S+)\nPin: version (\S+)\nPin-Priority: 1001$", pref, re.M))
    for name in PACKAGES:
        assert host.package(name).version == PIN, name
        assert name in holds, name
        assert pinned.get(name) == PIN, pref
        assert f"Candidate: {PIN}" in host.check_output(f"apt-cache policy {name}")


@pytest.mark.parametrize("command", ["apt-get -s upgrade", "apt-get -s dist-upgrade"])
def test_upgrade_and_dist_upgrade_move_no_dcgm_package(host, command):
    out = host.check_output(command)
    moved = [line for line in out.splitlines() if line.startswith(("Inst ", "Remv ")) and line.split()[1] in PACKAGES]
    assert moved == [], f"{command} would move: {moved}"


def test_no_second_source_for_the_cuda_repository_and_apt_reads_its_sources(host):
    """auto chose the host's repository: the one source of the URL is nvidia_driver's; apt parses its sources."""
    assert not host.file("/etc/apt/sources.list.d/gpuops-dcgm.sources").exists
    assert not host.file("/etc/apt/keyrings/gpuops-dcgm.gpg").exists
    naming = host.check_output(f"grep -lsF {MIRROR} /etc/apt/sources.list.d/* || true").split()
    assert naming == ["/etc/apt/sources.list.d/gpuops-nvidia-driver.sources"], naming
    policy = host.run("apt-cache policy")
    assert policy.rc == 0, policy.stderr
    assert "Conflicting values" not in policy.stderr


def test_the_host_engine_is_enabled_and_running_and_the_role_asked_dcgmi(host):
    service = host.service("nvidia-dcgm")
    assert service.is_enabled
    assert service.is_running
    assert "TEST STAND-IN" in host.check_output("systemctl show -p Description --value nvidia-dcgm")
    calls = [json.loads(line)["argv"] for line in host.file(DCGMI_LOG).content_string.splitlines()]
    assert ["discovery", "-l"] in calls, "the verify stage ran dcgmi discovery -l"
    assert "2 GPUs found." in host.check_output("dcgmi discovery -l")


def test_the_scheduled_sweep_runs_and_writes_its_metrics_for_node_exporter(host):
    """gpu_health_sweep_timer_enabled (on by default): the timer is enabled and active; one run of its service
    writes gpuops_gpu_health.prom (no GPU here: the state is unread, the metrics say so) and keeps its cursor."""
    timer = host.service("gpuops-gpu-health-sweep.timer")
    assert timer.is_enabled
    assert timer.is_running
    run = host.run("systemctl start gpuops-gpu-health-sweep.service")
    journal = "journalctl -u gpuops-gpu-health-sweep.service --no-pager | tail -20"
    assert run.rc == 0, run.stderr + host.check_output(journal)
    metrics = host.file("/var/lib/node_exporter/textfile_collector/gpuops_gpu_health.prom")
    assert oct(metrics.mode) == "0o644"
    text = metrics.content_string
    for name in ("verdict", "read_ok", "log_read_ok", "last_run_timestamp_seconds"):
        assert f"# TYPE gpuops_gpu_health_{name} " in text, text
    # the rename left no temporary file behind
    assert host.check_output("ls -A /var/lib/node_exporter/textfile_collector") == "gpuops_gpu_health.prom"
    # no kernel log is readable in this container (log_read_ok 0), so the cursor kept is empty: the next run
    # reads the whole boot, as the module does without one
    state = json.loads(host.file("/var/lib/gpuops/gpu_health/sweep.json").content_string)
    assert set(state) == {"cursor", "events", "held", "released"}, state
    assert state["held"] == [], state  # no kernel-log event read, so no finding held
    assert state["released"] == [], state  # nothing was held, so nothing released
    assert "gpuops_gpu_health_log_read_ok 0" in text, text
