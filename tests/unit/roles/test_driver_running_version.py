"""nvidia_driver's running_version.yml: the loaded kernel module's version, read by gpu_facts (pci backend) from
/proc/driver/nvidia/version, '' when no module is loaded or the file cannot be parsed.

The /proc texts are the proprietary and open module lines of tests/unit/diagnose_recorded.py (provenance there).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_env import run_playbook
from diagnose_recorded import PROC_VERSION_OPEN, PROC_VERSION_PROPRIETARY

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_running_version.yml"


@pytest.mark.parametrize(
    ("proc_version", "want"),
    [
        pytest.param(PROC_VERSION_PROPRIETARY, "535.261.03", id="proprietary_535"),
        pytest.param(PROC_VERSION_OPEN, "565.57.01", id="open_565"),
        pytest.param(None, "", id="no_module_loaded"),
        pytest.param("NVRM version: unreadable\n", "", id="unparsable"),
    ],
)
def test_running_version_is_the_loaded_module(tmp_path, proc_version, want):
    proc, sysfs = tmp_path / "proc", tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    proc.mkdir()
    if proc_version is not None:
        (proc / "driver" / "nvidia").mkdir(parents=True)
        (proc / "driver" / "nvidia" / "version").write_text(proc_version)
    out = run_playbook(PLAYBOOK, {"fake_proc": str(proc), "fake_sysfs": str(sysfs)}, tmp_path,
                       cache="memory")
    assert out.returncode == 0, out.stdout[-3000:]
    assert re.findall(r"running=\[([^\]]*)\]", out.stdout) == [want]
