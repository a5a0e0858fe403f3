"""nvidia_driver refuses Secure Boot without a signed module, from the state preflight's gpu_facts read.

Runs tests/unit/roles/playbooks/driver_secure_boot.yml on the controller: gpu_facts reads the SecureBoot efivar from
a fake /sys tree (4 attribute bytes, then the value, as efivarfs shows it), then the role's assert stage judges
it without asking the host again (a role run alone reads it with gpu_facts itself).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from case_hosts import Case, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_secure_boot.yml"
EFIVAR = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
READ = "Secure Boot | read the state"
# Case (a host of the one run) -> the SecureBoot efivar's value (None: a legacy BIOS boot, no /sys/firmware/efi), and
# the case's other variables.
CASES = {
    "enabled": (1, {}),
    "role_alone": (1, {"preflight_read": False, "nvidia_driver_fabric_manager": False}),
    "off": (0, {}),
    "legacy_boot": (None, {}),
    "signed": (1, {"nvidia_driver_secure_boot_signed": True}),
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    tmp_path = tmp_path_factory.mktemp("secure_boot")
    hosts = {}
    for name, (secure_boot, extra) in CASES.items():
        sysfs = tmp_path / name / "sys"
        (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
        if secure_boot is not None:
            (sysfs / EFIVAR).parent.mkdir(parents=True)
            (sysfs / EFIVAR).write_bytes(bytes([6, 0, 0, 0, secure_boot]))
        hosts[name] = {"fake_sysfs": str(sysfs), "nvidia_driver_version": "535.261.03",
                       "nvidia_driver_load_module": True, **extra}
    return run_cases(PLAYBOOK, hosts, tmp_path, cache_dir=tmp_path / "facts").cases


def test_every_case_ran_as_a_host_of_its_own(cases):
    assert set(cases) == set(CASES)
    assert all(case.statuses for case in cases.values())


def test_secure_boot_enabled_is_refused_from_gpu_facts_without_asking_the_host_again(cases):
    out = cases["enabled"]
    assert out.failed, out.text[-3000:]
    assert "Secure Boot is enabled on enabled (the SecureBoot efivar, read by gpu_facts)" in out.text
    assert "nvidia_driver_secure_boot_signed: true" in out.text, "the fix is named"
    assert out.status(READ) == "skipped", "the host is not asked again"


def test_a_role_run_alone_reads_the_state_with_gpu_facts(cases):
    """No gpu_facts read before the role (no preflight): its assert stage reads the efivar through gpu_facts."""
    out = cases["role_alone"]
    assert out.failed, out.text[-3000:]
    assert out.status(READ) == "ok", out.statuses
    assert "Secure Boot is enabled on role_alone" in out.text


@pytest.mark.parametrize("case", ["off", "legacy_boot", "signed"])
def test_secure_boot_off_legacy_boot_or_a_signed_module_pass(cases, case):
    out = cases[case]
    assert not out.failed, out.text[-3000:]
    assert out.status("Secure Boot | the NVIDIA module will be allowed to load") == "ok", out.statuses
