"""Toolkit cases on the converged nodes (toolkit_cases.yml): bad input, a daemon.json that dockerd refuses,
and a containerd config.toml rewritten by `containerd config default`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
GLOB = "/etc/containerd/conf.d/*.toml"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    assert inventory, "MOLECULE_INVENTORY_FILE is not set: run these tests through `molecule verify -s driver`"
    out = tmp_path_factory.mktemp("toolkit") / "results"
    playbook = shutil.which("ansible-playbook") or "ansible-playbook"
    run = subprocess.run(
        [playbook, "-i", inventory, str(SCENARIO / "toolkit_cases.yml"), "-e", f"toolkit_results={out}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    tail = f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert run.returncode == 0, f"toolkit_cases.yml itself failed (rc {run.returncode}):\n{tail}"
    merged = {}
    for host in ("gpuops-driver-deb12", "gpuops-driver-deb13"):
        merged.update(json.loads(Path(f"{out}.{host}.json").read_text()))
    return merged


def test_missing_runtime_fail_is_refused_naming_variable_runtime_and_fix(results):
    case = results["missing_runtime_fail"]
    assert case["failed"]
    assert case["task"].startswith("Assert |"), case["task"]
    assert "containerd is not installed" in case["msg"]
    assert "nvidia_container_toolkit_runtimes" in case["msg"]
    assert "Fix:" in case["msg"]
    assert "nvidia_container_toolkit_missing_runtime: skip" in case["msg"]


def test_missing_runtime_refusal_changed_no_host_file(results):
    case = results["missing_runtime_fail"]
    assert "/etc/docker/daemon.json" in case["before"], "the watched files must exist, or the comparison proves nothing"
    assert "/etc/apt/preferences.d/" in case["before"]
    assert case["before"] == case["after"]


def test_wrong_key_is_refused_by_fingerprint_before_any_apt_source_is_written(results):
    """The refusal comes from the probe (the pinned_packages module checks the fingerprint before it reads the
    index); the host comparison above covers this run too (before/after bracket both cases), so no .sources,
    .pref or keyring was written."""
    case = results["wrong_key"]
    assert case["failed"]
    assert case["task"].startswith("Probe | offered versions and dependency closure"), case["task"]
    assert "the repository key has fingerprint" in case["msg"], case["msg"]
    assert "Fix:" in case["msg"]


def test_daemon_json_dockerd_refuses_is_rolled_back_and_docker_runs(results):
    case = results["daemon_json_rollback"]
    assert case["failed"], "docker must have refused the merged file (flag and file both set default-shm-size)"
    assert "did not start" in case["msg"], case["msg"]
    assert "restored" in case["msg"], case["msg"]
    assert case["after"] == case["previous"], "the previous daemon.json must be back, byte for byte"
    assert case["active"] == "active"
    assert case["info_rc"] == 0
    assert json.loads(case["default_runtime"]) == "nvidia"


def test_containerd_rewrite_drops_the_runtime_and_the_role_repairs_it(results):
    case = results["containerd_rewrite"]
    # The rewrite really broke it: no import, no nvidia runtime.
    assert "runtimes.nvidia" not in case["dump_after_rewrite"]
    assert re.search(r'^imports = \[.*"' + re.escape(GLOB) + r'".*\]$', case["config_toml"], re.M), case["config_toml"]
    assert "runtimes.nvidia.options]" in case["dump_after_role"]
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in case["dump_after_role"]
    assert re.search(r'^\s*default_runtime_name = "nvidia"$', case["dump_after_role"], re.M)
    assert case["active"] == "active"
