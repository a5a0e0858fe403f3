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
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ansible_env import run_playbook
from diagnose_recorded import (
    NVIDIA_SMI_MISMATCH,
    NVIDIA_SMI_NO_DEVICES,
    NVIDIA_SMI_NO_DRIVER,
    PROC_VERSION_OPEN,
    PROC_VERSION_PROPRIETARY,
)
from shared_data import shared_path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_running_version.yml"
PLAYBOOK_FAILED = 2  # ansible-playbook's exit status when a task failed
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


def run_role(tmp_path: Path, proc_version: str | None, smi: tuple, variables: dict | None = None,
             fabric_manager: tuple | None = None) -> subprocess.CompletedProcess:
    """Run the role's ``tasks_from`` (running_version.yml unless ``variables`` say otherwise) against a fake /proc, a
    /sys with the H200 host's one GPU (its bus id, the 3D controller class) and the stand-ins: ``smi`` is ``(rc,
    output)`` of ``nvidia-smi -q -x``; ``fabric_manager``, when given, ``(is-active answer, --version output)``, with an
    NVSwitch on the bus."""
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
    variables = {"fake_proc": str(proc), "fake_sysfs": str(sysfs), **(variables or {})}
    return run_playbook(PLAYBOOK, variables, tmp_path, cache="memory", bin_dir=bin_dir)


def shown(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stdout[-3000:]
    found = re.findall(r"running=\[([^\]]*)\] source=\[([^\]]*)\] memory=\[([^\]]*)\] mig=\[([^\]]*)\]", out.stdout)
    assert len(found) == 1, out.stdout[-3000:]
    return dict(zip(("running", "source", "memory", "mig"), found[0], strict=True))


@pytest.mark.parametrize(
    ("proc_version", "smi", "want"),
    [
        # the packages moved to 535.309.01 while the old module stays loaded: only /proc tells the module's version
        pytest.param(PROC_VERSION_PROPRIETARY, (18, NVIDIA_SMI_MISMATCH), "535.261.03", id="proprietary_535_mismatch"),
        pytest.param(PROC_VERSION_OPEN, (6, NVIDIA_SMI_NO_DEVICES), "565.57.01", id="open_565_no_devices"),
        pytest.param(None, (9, NVIDIA_SMI_NO_DRIVER), "", id="no_module_loaded"),
        pytest.param("NVRM version: unreadable\n", (9, NVIDIA_SMI_NO_DRIVER), "", id="unparsable"),
    ],
)
def test_without_user_space_the_version_is_the_loaded_module(tmp_path, proc_version, smi, want):
    assert shown(run_role(tmp_path, proc_version, smi)) == {
        "running": want, "source": "pci", "memory": "None", "mig": "None"}


def h200(tmp_path: Path, **kwargs) -> subprocess.CompletedProcess:
    capture = shared_path("nvidia-smi", "h200-driver580")
    return run_role(tmp_path, (capture / "proc-version.txt").read_text(), (0, (capture / "q.xml").read_text()),
                    **kwargs)


def test_where_nvidia_smi_answers_the_facts_keep_memory_and_mig_mode_h200_driver580(tmp_path):
    assert shown(h200(tmp_path)) == {"running": H200_DRIVER, "source": "nvidia-smi", "memory": "143771",
                                     "mig": "Disabled"}


VERIFY = {"tasks_from": "verify_running.yml", "_nvidia_driver_pin": H200_DRIVER,
          "_nvidia_driver_planned": {"fabric_manager_needed": True},
          "_nvidia_driver_fm_package": "nvidia-fabricmanager-580"}


def test_verify_passes_with_fabric_manager_active_at_the_pin(tmp_path):
    out = h200(tmp_path, variables=VERIFY, fabric_manager=("active", f"Fabric Manager version is : {H200_DRIVER}"))
    assert shown(out)["running"] == H200_DRIVER
    check = out.stdout.split("Running | Fabric Manager runs at exactly the driver version]")[1].split("TASK [")[0]
    assert check.strip().splitlines()[-1] == "ok: [localhost]", check


@pytest.mark.parametrize(
    ("fabric_manager", "want"),
    [
        pytest.param(("failed", f"Fabric Manager version is : {H200_DRIVER}"),
                     f"Fabric Manager is failed at version {H200_DRIVER}; expected active at {H200_DRIVER}",
                     id="inactive"),
        pytest.param(("active", "Fabric Manager version is : 580.126.09"),
                     f"Fabric Manager is active at version 580.126.09; expected active at {H200_DRIVER}",
                     id="other_version"),
    ],
)
def test_verify_refuses_fabric_manager_not_running_at_the_pin(tmp_path, fabric_manager, want):
    out = h200(tmp_path, variables=VERIFY, fabric_manager=fabric_manager)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = " ".join(out.stdout.split())
    assert want in text, text[-2000:]
    assert "Fix: journalctl -u nvidia-fabricmanager; rerun the role so nvidia-fabricmanager-580 is at" in text


def test_verify_refuses_fabric_manager_enabled_where_gpu_facts_sees_no_nvswitch(tmp_path):
    out = h200(tmp_path, variables=VERIFY)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = " ".join(out.stdout.split())
    assert "Fabric Manager is unknown at version unknown" in text, text[-2000:]
    assert "gpu_facts saw no NVSwitch and no GPU in an NVLink fabric here" in text
    assert "Fix: set nvidia_driver_fabric_manager: auto for this host" in text
