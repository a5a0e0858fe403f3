"""nvidia_driver's verify step on a real GPU host: the running driver is the pin, and Fabric Manager runs at it.

Set GPUOPS_EXPECT_DRIVER=<version> (the nvidia_driver_version the role pinned, e.g. 535.261.03) to compare
with the pin; without it only the internal agreement checks run. Skipped, with the reason, where no NVIDIA
kernel module is loaded, and the Fabric Manager checks where no NVSwitch is on the PCI bus.

The hold test runs only where the nvidia_driver role installed the driver. It knows by the apt pin file the role
writes through _pinned_packages, ``/etc/apt/preferences.d/<_nvidia_driver_repo_name>.pref`` (the name from
roles/nvidia_driver/vars/main.yml): its ``Package:``/``Pin: version`` stanzas are the driver packages the role
installed and must hold. A driver installed some other way (a cloud image, a mounted driver, the .run installer)
has no such file: the test is skipped, saying so (issue 36: it failed on such a host).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_sysfs as gfs

ROOT = Path(__file__).resolve().parents[2]
PROC_VERSION = "/proc/driver/nvidia/version"
EXPECT = os.environ.get("GPUOPS_EXPECT_DRIVER", "").strip()

NO_MODULE = (
    None if os.path.exists(PROC_VERSION) else f"no NVIDIA kernel module loaded ({PROC_VERSION} absent): not a GPU host"
)
needs_module = pytest.mark.skipif(NO_MODULE is not None, reason=str(NO_MODULE))
needs_pin = pytest.mark.skipif(
    not EXPECT, reason="GPUOPS_EXPECT_DRIVER is not set: give the nvidia_driver_version the role pinned"
)


def run(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C")
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


def running_module_version() -> str:
    with open(PROC_VERSION, encoding="utf-8") as handle:
        text = handle.read()
    version = gfs.parse_proc_driver_version(text)
    assert version, f"cannot parse the module version from {PROC_VERSION}: {text!r}"
    return version


@needs_module
@needs_pin
def test_running_kernel_module_is_the_pin():
    running = running_module_version()
    assert running == EXPECT, f"mismatch: {running} vs {EXPECT} (running kernel module vs pin): reboot required?"


@needs_module
def test_nvidia_smi_and_the_kernel_module_agree():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not in PATH")
    proc = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    assert proc.returncode == 0, f"nvidia-smi failed ({proc.returncode}): {proc.stderr or proc.stdout}"
    versions = {line.strip() for line in proc.stdout.splitlines() if line.strip()}
    assert versions == {running_module_version()}, f"user space {versions} vs kernel module {running_module_version()}"


def role_pin_file() -> Path:
    """The apt pin file the nvidia_driver role writes (_pinned_packages: /etc/apt/preferences.d/<name>.pref)."""
    role_vars = yaml.safe_load((ROOT / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text())
    return Path("/etc/apt/preferences.d") / f"{role_vars['_nvidia_driver_repo_name']}.pref"


def pinned_packages(text: str) -> dict:
    """``{package: version}`` of an apt preferences file (``Package:`` then ``Pin: version``)."""
    return dict(re.findall(r"^Package:\s*(\S+)\s*\nPin:\s*version\s+(\S+)", text, re.M))


@needs_module
def test_driver_packages_the_role_installed_are_held_on_apt_hosts():
    if shutil.which("apt-mark") is None:
        pytest.skip("not an apt host (dnf hosts: dnf versionlock list)")
    pin_file = role_pin_file()
    if not pin_file.exists():
        pytest.skip(
            f"the nvidia_driver role did not install this host's driver: no {pin_file}, the pin file it writes "
            "(a driver from the image or installed by hand is not the role's to hold)"
        )
    pins = pinned_packages(pin_file.read_text())
    assert pins, f"{pin_file} pins no package: expected the driver set the role installed"
    held = set(run(["apt-mark", "showhold"]).stdout.split())
    installed = dict(
        line.split()[:2]
        for line in run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\n"]).stdout.splitlines()
        if line.endswith(" installed")
    )
    version = running_module_version()
    assert {name: installed.get(name) for name in pins} == pins, f"{pin_file}: installed versions differ from pins"
    assert any(version in pinned for pinned in pins.values()), f"no pinned package is at the running {version}"
    assert set(pins) - held == set(), f"pinned by the role but not held: {sorted(set(pins) - held)}"


NVSWITCHES = gfs.scan_pci("/sys")["nvswitches"]
needs_nvswitch = pytest.mark.skipif(not NVSWITCHES, reason="no NVSwitch on the PCI bus: Fabric Manager is not needed")


@needs_module
@needs_nvswitch
def test_fabric_manager_runs_at_the_driver_version():
    active = run(["systemctl", "is-active", "nvidia-fabricmanager"]).stdout.strip()
    assert active == "active", f"nvidia-fabricmanager is {active} on an NVSwitch host ({len(NVSWITCHES)} NVSwitch)"
    fm = run(["nv-fabricmanager", "--version"])
    fm_version = gfs.parse_fabricmanager_version(fm.stdout + fm.stderr)
    assert fm_version == running_module_version(), (
        f"Fabric Manager {fm_version} vs driver {running_module_version()}: FM refuses any other version"
    )


@needs_module
@needs_nvswitch
def test_fabric_state_is_completed():
    proc = run(["nvidia-smi", "-q"])
    assert proc.returncode == 0, proc.stderr
    # one "Fabric" block per GPU, its first line "State : Completed" (see ../shared/data/rules.md, section 1.1)
    states = [s.strip() for s in re.findall(r"^\s*Fabric\s*\n\s+State\s+:\s+(.+)$", proc.stdout, re.M)]
    assert states, "nvidia-smi -q reports no Fabric section"
    assert set(states) == {"Completed"}, f"fabric states {states}, expected Completed on every GPU"
