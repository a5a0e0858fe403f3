"""nvidia_driver's running_version.yml: the loaded driver's version from one default gpu_facts read, '' when no
module is loaded or /proc/driver/nvidia/version cannot be parsed; where nvidia-smi answers, the facts it leaves are
nvidia-smi's full view (memory, MIG mode), not the PCI one (None there), since a later play may reuse them from the
fact cache. And verify_running.yml's Fabric Manager check, judged on what that same read found.

nvidia-smi is a LABELLED TEST STAND-IN first on PATH that prints a recorded output: the failures of
tests/unit/diagnose_recorded.py (no driver, driver/library mismatch, no devices), or the real `nvidia-smi -q -x` of
../shared/data/nvidia-smi/h200-driver580/ beside that host's real /proc/driver/nvidia/version. The other /proc texts
are the proprietary and open module lines of diagnose_recorded.py (provenance there). For Fabric Manager, systemctl
and nv-fabricmanager are LABELLED stand-ins too (the version line as tests/unit/plugins/module_utils/test_gpu_facts.py
records it), and an NVSwitch (NVIDIA's vendor id, class 0x068000) is added to the fake /sys.

Every case is a host of one run (the ``cases`` fixture, case_hosts.py), with its own fake /proc, /sys and stand-ins:
a refusal stops its own host only. The H200 cases are hosts of it where ../shared/data holds the capture.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from case_hosts import Case, run_cases
from diagnose_recorded import (
    NVIDIA_SMI_MISMATCH,
    NVIDIA_SMI_NO_DEVICES,
    NVIDIA_SMI_NO_DRIVER,
    PROC_VERSION_OPEN,
    PROC_VERSION_PROPRIETARY,
)
from shared_data import SHARED_DATA, shared_path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_running_version.yml"
H200_DRIVER = "580.159.04"


def stand_in(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n# LABELLED TEST STAND-IN for {name}\n{script}")
    path.chmod(0o755)


def pci_device(sysfs: Path, bus_id: str, pci_class: str) -> None:
    device = sysfs / "bus" / "pci" / "devices" / bus_id
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text(f"{pci_class}\n")


def case_host(tmp_path: Path, proc_version: str | None, smi: tuple, variables: dict | None = None,
              fabric_manager: tuple | None = None) -> dict:
    """The host variables of a case that runs the role's running_version.yml (verify_running.yml where ``variables``
    say verify) against a fake /proc, a /sys with the H200 host's one GPU (its bus id, the 3D controller class) and
    the stand-ins: ``smi`` is ``(rc, output)`` of ``nvidia-smi -q -x``; ``fabric_manager``, when given, ``(is-active
    answer, --version output)``, with an NVSwitch on the bus."""
    proc, sysfs, bin_dir = tmp_path / "proc", tmp_path / "sys", tmp_path / "bin"
    pci_device(sysfs, "0000:00:06.0", "0x030200")
    proc.mkdir()
    bin_dir.mkdir()
    if proc_version is not None:
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "version").write_text(proc_version)
    (tmp_path / "smi-q-x.out").write_text(smi[1])
    stand_in(bin_dir, "nvidia-smi", f"[ \"$1\" = -q ] && cat '{tmp_path / 'smi-q-x.out'}' && exit {smi[0]}\nexit 1\n")
    if fabric_manager is not None:
        pci_device(sysfs, "0000:0a:00.0", "0x068000")
        stand_in(bin_dir, "systemctl", f"echo {fabric_manager[0]}\n")
        stand_in(bin_dir, "nv-fabricmanager", f"echo '{fabric_manager[1]}'\n")
    return {"fake_proc": str(proc), "fake_sysfs": str(sysfs), "fake_bin": str(bin_dir), **(variables or {})}


def shown(out: Case) -> dict:
    assert not out.failed, out.text[-3000:]
    found = re.findall(r"running=\[([^\]]*)\] source=\[([^\]]*)\] memory=\[([^\]]*)\] mig=\[([^\]]*)\]", out.text)
    assert len(found) == 1, out.text[-3000:]
    return dict(zip(("running", "source", "memory", "mig"), found[0], strict=True))


VERIFY = {"verify": True, "_nvidia_driver_pin": H200_DRIVER,
          "_nvidia_driver_planned": {"fabric_manager_needed": True},
          "_nvidia_driver_fm_package": "nvidia-fabricmanager-580"}
# Without user space: case -> the /proc text, nvidia-smi's (rc, output), the version the read gives.
NO_USER_SPACE = {
    # the packages moved to 535.309.01 while the old module stays loaded: only /proc tells the module's version
    "proprietary_535_mismatch": (PROC_VERSION_PROPRIETARY, (18, NVIDIA_SMI_MISMATCH), "535.261.03"),
    "open_565_no_devices": (PROC_VERSION_OPEN, (6, NVIDIA_SMI_NO_DEVICES), "565.57.01"),
    "no_module_loaded": (None, (9, NVIDIA_SMI_NO_DRIVER), ""),
    "unparsable": ("NVRM version: unreadable\n", (9, NVIDIA_SMI_NO_DRIVER), ""),
}
# Fabric Manager refused: case -> (is-active answer, --version output), the refusal.
FM_REFUSED = {
    "inactive": (("failed", f"Fabric Manager version is : {H200_DRIVER}"),
                 f"Fabric Manager is failed at version {H200_DRIVER}; expected active at {H200_DRIVER}"),
    "other_version": (("active", "Fabric Manager version is : 580.126.09"),
                      f"Fabric Manager is active at version 580.126.09; expected active at {H200_DRIVER}"),
}


H200_CAPTURE = ("nvidia-smi", "h200-driver580")
H200_CASES = {"h200", "fm_active", *(f"fm_{name}" for name in FM_REFUSED), "fm_no_nvswitch"}


def h200_case(tmp_path: Path, **kwargs) -> dict:
    capture = SHARED_DATA.joinpath(*H200_CAPTURE)
    return case_host(tmp_path, (capture / "proc-version.txt").read_text(), (0, (capture / "q.xml").read_text()),
                     **kwargs)


def h200_outcome(cases: dict[str, Case], case: str) -> Case:
    shared_path(*H200_CAPTURE)  # skips the test where the capture is absent
    return cases[case]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    tmp_path = tmp_path_factory.mktemp("running_version")
    hosts = {name: case_host(tmp_path / name, proc_version, smi)
             for name, (proc_version, smi, _want) in NO_USER_SPACE.items()}
    if SHARED_DATA.joinpath(*H200_CAPTURE).exists():  # else the H200 tests skip
        hosts["h200"] = h200_case(tmp_path / "h200")
        hosts["fm_active"] = h200_case(tmp_path / "fm_active", variables=VERIFY,
                                       fabric_manager=("active", f"Fabric Manager version is : {H200_DRIVER}"))
        for name, (fabric_manager, _want) in FM_REFUSED.items():
            hosts[f"fm_{name}"] = h200_case(tmp_path / f"fm_{name}", variables=VERIFY, fabric_manager=fabric_manager)
        hosts["fm_no_nvswitch"] = h200_case(tmp_path / "fm_no_nvswitch", variables=VERIFY)
    return run_cases(PLAYBOOK, hosts, tmp_path, cache="memory").cases


def test_every_case_ran_as_a_host_of_its_own(cases):
    assert set(cases) - H200_CASES == set(NO_USER_SPACE)
    assert set(cases) & H200_CASES in (set(), H200_CASES)
    assert all(case.statuses for case in cases.values())


@pytest.mark.parametrize("case", list(NO_USER_SPACE))
def test_without_user_space_the_version_is_the_loaded_module(cases, case):
    assert shown(cases[case]) == {"running": NO_USER_SPACE[case][2], "source": "pci", "memory": "None", "mig": "None"}


def test_where_nvidia_smi_answers_the_facts_keep_memory_and_mig_mode_h200_driver580(cases):
    assert shown(h200_outcome(cases, "h200")) == {"running": H200_DRIVER, "source": "nvidia-smi",
                                                  "memory": "143771", "mig": "Disabled"}


def test_verify_passes_with_fabric_manager_active_at_the_pin(cases):
    out = h200_outcome(cases, "fm_active")
    assert shown(out)["running"] == H200_DRIVER
    assert out.status("Running | Fabric Manager runs at exactly the driver version") == "ok", out.statuses


@pytest.mark.parametrize("case", list(FM_REFUSED))
def test_verify_refuses_fabric_manager_not_running_at_the_pin(cases, case):
    out = h200_outcome(cases, f"fm_{case}")
    assert out.failed, out.text[-3000:]
    assert FM_REFUSED[case][1] in out.text, out.text[-2000:]
    assert "Fix: journalctl -u nvidia-fabricmanager; rerun the role so nvidia-fabricmanager-580 is at" in out.text


def test_verify_refuses_fabric_manager_enabled_where_gpu_facts_sees_no_nvswitch(cases):
    out = h200_outcome(cases, "fm_no_nvswitch")
    assert out.failed, out.text[-3000:]
    text = out.text
    assert "Fabric Manager is unknown at version unknown" in text, text[-2000:]
    assert "gpu_facts saw no NVSwitch and no GPU in an NVLink fabric here" in text
    assert "Fix: set nvidia_driver_fabric_manager: auto for this host" in text
