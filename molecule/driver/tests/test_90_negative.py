"""Negative cases: the real roles, run by ansible-playbook against the converged node (negative.yml)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

testinfra_hosts = ["gpuops-driver-deb12"]

SCENARIO = Path(__file__).resolve().parents[1]
BRANCH_MSG = (
    "nvidia_driver_version '535' is a branch, not a version: pin the full version, "
    "e.g. 550.90.07 (see apt-cache madison nvidia-driver)"
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    assert inventory, "MOLECULE_INVENTORY_FILE is not set: run these tests through `molecule verify -s driver`"
    out = tmp_path_factory.mktemp("negative") / "results.json"
    playbook = shutil.which("ansible-playbook") or "ansible-playbook"
    run = subprocess.run(
        [playbook, "-i", inventory, str(SCENARIO / "negative.yml"), "-e", f"negative_results={out}"],
        capture_output=True, text=True, timeout=900, check=False,
    )
    tail = f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert run.returncode == 0, f"negative.yml itself failed (rc {run.returncode}):\n{tail}"
    return json.loads(out.read_text()) | json.loads(Path(f"{out}.deb13.json").read_text())


def test_version_missing_from_the_mirror_names_version_mirror_and_offer(results, host):
    case = results["version_not_in_mirror"]
    assert case["failed"]
    assert "535.300.01" in case["msg"]
    assert "http://127.0.0.1:8089/debian" in case["msg"]
    assert "535.261.03" in case["msg"]
    assert "535.309.01" in case["msg"]


def test_branch_instead_of_version_is_refused_with_the_fix(results, host):
    case = results["branch_instead_of_version"]
    assert case["failed"]
    assert case["msg"] == BRANCH_MSG


def test_wrong_signing_key_is_refused_by_its_fingerprint(results, host):
    case = results["wrong_signing_key"]
    assert case["failed"]
    assert "the repository key has fingerprint" in case["msg"], case["msg"]
    key = "/srv/gpuops-mirror/keys/gpuops-test-mirror.asc"
    expected = host.check_output(f"gpg --show-keys --with-colons {key} | awk -F: '/^fpr/ {{print $10; exit}}'")
    assert f"expected {expected}" in case["msg"], case["msg"]


def test_refusals_happen_before_anything_changes(results, host):
    unchanged = results["unchanged"]
    assert None not in unchanged["before"]
    assert unchanged["before"] == unchanged["after"]


def test_corrupted_daemon_json_is_backed_up_and_reported(results, host):
    case = results["corrupt_daemon_json"]
    assert case["fail_mode"]["failed"]
    [backup] = case["backups"]
    assert backup in case["fail_mode"]["msg"], "the failure must name the backup"
    assert case["contents"][backup] == case["garbage"], "the backup must hold the corrupted file as it was"
    assert case["contents"]["/etc/docker/daemon.json"] == case["garbage"], "fail mode must leave the file alone"
    assert case["docker_after_refusal"] == "active", "docker must not have been restarted with a bad file"


def test_replace_mode_goes_on_from_an_empty_configuration(results, host):
    replaced = results["corrupt_daemon_json"]["replaced"]
    assert replaced["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert "log-opts" not in replaced


def test_fabric_manager_one_patch_off_is_refused_naming_package_and_offer(results):
    """deb13 (labelled NVSwitch fixture): the driver is offered at 570.195.03, Fabric Manager only at 570.195.02."""
    case = results["fabric_manager_patch_off"]
    assert case["failed"]
    assert "nvidia-fabricmanager-570" in case["msg"], case["msg"]
    assert "570.195.03" in case["msg"]
    assert "570.195.02" in case["msg"], "the refusal must list the versions the repository offers"
    assert "nvidia_driver_version" in case["msg"], "the fix names the variable"


def test_fabric_manager_refusal_changed_nothing(results):
    case = results["fabric_manager_patch_off"]
    assert "gpuops-nvidia-driver.pref" in case["before"], "the watched files must exist, or this proves nothing"
    assert "nvidia-fabricmanager-570" in case["before"]
    assert case["before"] == case["after"]
