"""nvidia_driver refuses Secure Boot without a signed module, from the state preflight's gpu_facts read.

Runs tests/unit/roles/playbooks/driver_secure_boot.yml on localhost: gpu_facts reads the SecureBoot efivar from
a fake /sys tree (4 attribute bytes, then the value, as efivarfs shows it), then the role's assert stage judges
it without asking the host again (a role run alone reads it with gpu_facts itself).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible_env import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_secure_boot.yml"
PLAYBOOK_FAILED = 2  # ansible-playbook's exit status when a task failed
EFIVAR = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def run(tmp_path: Path, secure_boot: int | None, **extra) -> subprocess.CompletedProcess:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    if secure_boot is not None:  # None: a legacy BIOS boot, no /sys/firmware/efi
        (sysfs / EFIVAR).parent.mkdir(parents=True)
        (sysfs / EFIVAR).write_bytes(bytes([6, 0, 0, 0, secure_boot]))
    variables = {"fake_sysfs": str(sysfs), "nvidia_driver_version": "535.261.03", "nvidia_driver_load_module": True,
                 **extra}
    return run_playbook(PLAYBOOK, variables, tmp_path, cache_dir=tmp_path / "facts")


def test_secure_boot_enabled_is_refused_from_gpu_facts_without_asking_the_host_again(tmp_path):
    out = run(tmp_path, 1)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    said = " ".join(out.stdout.split())
    assert "Secure Boot is enabled on localhost (the SecureBoot efivar, read by gpu_facts)" in said
    assert "nvidia_driver_secure_boot_signed: true" in out.stdout, "the fix is named"
    read = out.stdout.split("TASK [gpuops.cluster.nvidia_driver : Secure Boot | read the state")[1].split("TASK [")[0]
    assert read.strip().splitlines()[-1].startswith("skipping:"), "the host is not asked again"


def test_a_role_run_alone_reads_the_state_with_gpu_facts(tmp_path):
    """No gpu_facts read before the role (no preflight): its assert stage reads the efivar through gpu_facts."""
    out = run(tmp_path, 1, preflight_read=False, nvidia_driver_fabric_manager=False)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    read = out.stdout.split("TASK [gpuops.cluster.nvidia_driver : Secure Boot | read the state")[1].split("TASK [")[0]
    assert read.strip().splitlines()[-1].startswith("ok:"), read
    assert "Secure Boot is enabled on localhost" in " ".join(out.stdout.split())


@pytest.mark.parametrize(("state", "extra"), [(0, {}), (None, {}), (1, {"nvidia_driver_secure_boot_signed": True})])
def test_secure_boot_off_legacy_boot_or_a_signed_module_pass(tmp_path, state, extra):
    out = run(tmp_path, state, **extra)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "Secure Boot | the NVIDIA module will be allowed to load" in out.stdout
