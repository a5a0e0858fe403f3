"""local_pv on loop-device disks: the module's verdict, fstab by UUID, and a disk with data refused untouched.

create.yml records in disks.json which disks the scenario has: "loop" (two loop devices) or "directory" (losetup
failed, or GPUOPS_LOCAL_PV_DISKS=directory: a host directory mounted at /mnt/disks/dir-a, and disk B a LABELLED
STAND-IN, a regular file at a /dev path with the same ext4 signature). Only the tests that need a block device the
role formats and mounts skip in the fallback, saying why: a host without loop devices tests less, so under CI=true
those skips fail (tests/ci_skips.py, loaded by molecule/conftest.py). The fallback volume's own test skips on loop
devices by design (skip_by_design: one of the two set-ups always applies), and stays a skip under CI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_env import playbook_env  # tests/ansible_env.py (pyproject's pytest pythonpath)
from ci_skips import skip_by_design

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory"))
testinfra_hosts = ["gpuops-localpv-node"]


def disks() -> dict:
    return json.loads((EPHEMERAL / "disks.json").read_text())


def needs_loop_devices() -> None:
    if disks()["mode"] != "loop":
        pytest.skip(f"directory fallback ({disks()['reason']}): no block device for the role to format and mount")


def run_ansible(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*args, "-i", INVENTORY], capture_output=True, text=True, env=playbook_env(PROJECT), timeout=300, check=False
    )


def uuid_of(host, device: str) -> str:
    return host.check_output(f"blkid -p -s UUID -o value {device}").strip()


def test_disk_a_has_our_filesystem(host) -> None:
    needs_loop_devices()
    out = host.check_output(f"blkid -p -o export {disks()['a']}")
    assert "TYPE=ext4" in out
    assert "LABEL=gpuops-lpv" in out


def fstab_entries_under_mnt_disks(host) -> list[list[str]]:
    entries = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()
               if line.strip() and not line.startswith("#")]
    return [e for e in entries if e[1].startswith("/mnt/disks/")]


def test_fallback_volume_is_the_scenarios_and_not_in_fstab(host) -> None:
    """Directory fallback: the role prepared no disk, so it wrote no fstab entry; the volume is the scenario's."""
    if disks()["mode"] != "directory":
        skip_by_design("loop devices: the role's own volume is checked by the fstab and filesystem tests")
    assert fstab_entries_under_mnt_disks(host) == []
    mount = host.mount_point("/mnt/disks/dir-a")
    assert mount.exists
    assert mount.filesystem == "ext4"
    assert "noatime" in mount.options


def test_fstab_by_uuid_with_noatime(host) -> None:
    needs_loop_devices()
    uuid = uuid_of(host, disks()["a"])
    ours = fstab_entries_under_mnt_disks(host)
    assert ours == [[f"UUID={uuid}", f"/mnt/disks/{uuid}", "ext4", "noatime", "0", "0"]], ours
    mount = host.mount_point(f"/mnt/disks/{uuid}")
    assert mount.exists
    assert "noatime" in mount.options


def test_module_verdict(host) -> None:
    result = run_ansible("ansible", "all", "-m", "gpuops.cluster.local_pv", "-a", "path=/mnt/disks min_free_gib=0",
                         "-o")
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads(result.stdout.split("=>", 1)[1])
    assert verdict["ok"] is True, verdict
    [volume] = verdict["volumes"]
    expected = "/mnt/disks/dir-a" if disks()["mode"] == "directory" else f"/mnt/disks/{uuid_of(host, disks()['a'])}"
    assert (volume["path"], volume["fstype"]) == (expected, "ext4"), volume


def test_module_refuses_a_bare_directory(host) -> None:
    """The same module turns a plain directory in the discovery directory into a problem (not a volume)."""
    host.run("mkdir -p /mnt/disks/not-a-disk")
    try:
        result = run_ansible("ansible", "all", "-m", "gpuops.cluster.local_pv", "-a",
                             "path=/mnt/disks min_free_gib=0", "-o")
        verdict = json.loads(result.stdout.split("=>", 1)[1])
        assert verdict["ok"] is False
        assert "/mnt/disks/not-a-disk" in verdict["msg"]
    finally:
        host.run("rmdir /mnt/disks/not-a-disk")


@pytest.fixture(scope="module")
def refusal(host) -> tuple[subprocess.CompletedProcess, str, str]:
    fstab_before = host.file("/etc/fstab").content_string
    b_before = host.check_output(f"blkid -p -o export {disks()['b']}")
    result = run_ansible("ansible-playbook", str(PROJECT / "molecule" / "local_pv" / "refuse.yml"))
    return result, fstab_before, b_before


def test_disk_with_data_is_refused(refusal) -> None:
    result, _, _ = refusal
    assert result.returncode != 0, "a disk holding another filesystem must stop the run"
    out = result.stdout + result.stderr
    assert f"local_pv_disks has {disks()['b']}, which already holds ext4 (label precious" in out
    assert "never reformatted" in out
    assert "Nothing was changed" in out


def test_refused_disk_and_fstab_untouched(host, refusal) -> None:
    _, fstab_before, b_before = refusal
    assert host.file("/etc/fstab").content_string == fstab_before
    assert host.check_output(f"blkid -p -o export {disks()['b']}") == b_before
    assert "LABEL=precious" in b_before
    assert not host.run(f"findmnt --source {disks()['b']}").stdout.strip(), "the refused disk was mounted"
