"""nvidia_driver's running_version.yml: the loaded driver's version from one default gpu_facts read, '' when no
module is loaded or /proc/driver/nvidia/version cannot be parsed; where nvidia-smi answers, the facts it leaves are
nvidia-smi's full view (memory, MIG mode), not the PCI one (None there), since a later play may reuse them from the
fact cache.

nvidia-smi is a LABELLED TEST STAND-IN first on PATH that prints a recorded output: the failures of
tests/unit/diagnose_recorded.py (no driver, driver/library mismatch, no devices), or the real `nvidia-smi -q -x` of
../shared/data/nvidia-smi/h200-driver580/ beside that host's real /proc/driver/nvidia/version. The other /proc texts
are the proprietary and open module lines of diagnose_recorded.py (provenance there).
"""

from __future__ import annotations

import re
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


def read_running(tmp_path: Path, proc_version: str | None, smi_rc: int, smi_output: str) -> dict:
    """Run running_version.yml against a fake /proc, a /sys with the H200 host's one GPU (its bus id, NVIDIA's
    vendor id, the 3D controller class) and the nvidia-smi stand-in; what it shows."""
    proc, sysfs, bin_dir = tmp_path / "proc", tmp_path / "sys", tmp_path / "bin"
    gpu = sysfs / "bus" / "pci" / "devices" / "0000:00:06.0"
    gpu.mkdir(parents=True)
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    proc.mkdir()
    bin_dir.mkdir()
    if proc_version is not None:
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "version").write_text(proc_version)
    (tmp_path / "smi-q-x.out").write_text(smi_output)
    stand_in = bin_dir / "nvidia-smi"
    stand_in.write_text(f"#!/bin/sh\n# LABELLED TEST STAND-IN for nvidia-smi: `-q -x` prints a recorded output\n"
                        f"[ \"$1\" = -q ] && cat '{tmp_path / 'smi-q-x.out'}' && exit {smi_rc}\nexit 1\n")
    stand_in.chmod(0o755)
    out = run_playbook(PLAYBOOK, {"fake_proc": str(proc), "fake_sysfs": str(sysfs)}, tmp_path,
                       cache="memory", bin_dir=bin_dir)
    assert out.returncode == 0, out.stdout[-3000:]
    shown = re.findall(r"running=\[([^\]]*)\] source=\[([^\]]*)\] memory=\[([^\]]*)\] mig=\[([^\]]*)\]", out.stdout)
    assert len(shown) == 1, out.stdout[-3000:]
    return dict(zip(("running", "source", "memory", "mig"), shown[0], strict=True))


@pytest.mark.parametrize(
    ("proc_version", "smi_rc", "smi_output", "want"),
    [
        # the packages moved to 535.309.01 while the old module stays loaded: only /proc tells the module's version
        pytest.param(PROC_VERSION_PROPRIETARY, 18, NVIDIA_SMI_MISMATCH, "535.261.03", id="proprietary_535_mismatch"),
        pytest.param(PROC_VERSION_OPEN, 6, NVIDIA_SMI_NO_DEVICES, "565.57.01", id="open_565_no_devices"),
        pytest.param(None, 9, NVIDIA_SMI_NO_DRIVER, "", id="no_module_loaded"),
        pytest.param("NVRM version: unreadable\n", 9, NVIDIA_SMI_NO_DRIVER, "", id="unparsable"),
    ],
)
def test_without_user_space_the_version_is_the_loaded_module(tmp_path, proc_version, smi_rc, smi_output, want):
    assert read_running(tmp_path, proc_version, smi_rc, smi_output) == {
        "running": want, "source": "pci", "memory": "None", "mig": "None"}


def test_where_nvidia_smi_answers_the_facts_keep_memory_and_mig_mode_h200_driver580(tmp_path):
    capture = shared_path("nvidia-smi", "h200-driver580")
    shown = read_running(tmp_path, (capture / "proc-version.txt").read_text(), 0, (capture / "q.xml").read_text())
    assert shown == {"running": "580.159.04", "source": "nvidia-smi", "memory": "143771", "mig": "Disabled"}
