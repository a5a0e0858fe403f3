"""The default nvidia_driver_source (NVIDIA's CUDA repository layout) from LABELLED STAND-IN packages.

NVIDIA's repositories cannot be reached here. The mirror's flat cuda/ repository serves empty stand-in .debs
(build-standin-nvidia.py) that copy the names and the "= version" dependency structure of NVIDIA's packages
(files/nvidia-repo-structure.yml, with its sources), at 570.172.08 (pinned) and 570.195.03 (newer; Fabric
Manager only at 570.195.02). deb13: open flavour, with a labelled sysfs fixture that shows an NVSwitch;
deb12-cuda: proprietary flavour, no NVSwitch. Image-bake mode: nothing is loaded or started.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import testinfra
import yaml
from ci_skips import skip_by_design  # tests/ci_skips.py (pyproject's pytest pythonpath)

testinfra_hosts = ["gpuops-driver-deb13", "gpuops-driver-deb12-cuda"]

PIN = "570.172.08-1"
NEWER = "570.195.03-1"
MIRROR = "http://127.0.0.1:8089/cuda"
# roles/nvidia_driver/vars/Debian.yml (nvidia source) asks for these; the rest is the closure the probe found
# in the repository (nvidia-repo-structure.yml): kernel module -> firmware + support -> alternative + modprobe,
# libcuda1 -> ptxjitcompiler, persistenced -> cfg1.
COMMON = [
    "nvidia-driver-cuda", "nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-persistenced",
    "firmware-nvidia-gsp", "nvidia-kernel-support", "nvidia-alternative", "nvidia-modprobe",
    "libnvidia-ptxjitcompiler1", "libnvidia-cfg1",
]
EXPECTED = {
    "gpuops-driver-deb13": [*COMMON, "nvidia-kernel-open-dkms", "nvidia-fabricmanager-570"],
    "gpuops-driver-deb12-cuda": [*COMMON, "nvidia-kernel-dkms"],
}
ABSENT = {
    "gpuops-driver-deb13": ["nvidia-kernel-dkms"],
    "gpuops-driver-deb12-cuda": ["nvidia-kernel-open-dkms", "nvidia-fabricmanager-570"],
}
UU_CONF = "/etc/apt/apt.conf.d/52gpuops-test-unattended"
# deb13 also carries the toolkit's stand-ins (test_20_toolkit.py), and both nodes DCGM's (test_50_gpu_health.py);
# the driver's set is compared without them.
STRUCTURE = yaml.safe_load((Path(__file__).resolve().parents[1] / "files" / "nvidia-repo-structure.yml").read_text())
TOOLKIT = {pkg["name"] for pkg in STRUCTURE["toolkit"]} | {pkg["name"] for pkg in STRUCTURE["dcgm"]}
CONTROL = "gpuops-test-uu-control"  # the unattended-upgrades test's control package (build-mirror.sh)


def _name(host) -> str:
    return host.backend.get_hostname()


def _standins(host) -> dict[str, str]:
    """Installed driver packages that carry the stand-in label -> version (the toolkit's and DCGM's are not the
    driver's)."""
    out = host.check_output("dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'")
    # Status-Abbrev: selection (i install, h hold), then state (i installed).
    installed = {p: v for p, v, status in (line.split(" ", 2) for line in out.splitlines()) if status[1:2] == "i"}
    labelled = host.check_output("ls /usr/share/doc/*/GPUOPS-TEST-STANDIN 2>/dev/null || true").split()
    names = {path.split("/")[4] for path in labelled} - TOOLKIT
    return {p: v for p, v in installed.items() if p in names}


def test_the_mirror_offers_the_newer_version_and_the_packages_are_labelled(host):
    # Precondition of the pin tests: without a newer version they would pass trivially.
    out = host.check_output("apt-cache madison nvidia-smi libcuda1")
    assert NEWER in out, out
    assert PIN in out, out
    assert MIRROR in out
    desc = host.check_output("dpkg-query -W -f '${Description}' nvidia-smi")
    assert "TEST STAND-IN" in desc


def test_one_consistent_version_set_for_the_flavour(host):
    expected = EXPECTED[_name(host)]
    standins = _standins(host)
    assert sorted(standins) == sorted(expected), "installed stand-ins differ from the flavour's closure"
    assert {p: v for p, v in standins.items() if v != PIN} == {}, f"not all at {PIN}"
    for pkg in ABSENT[_name(host)]:
        assert not host.package(pkg).is_installed, f"{pkg} belongs to the other flavour (or needs an NVSwitch)"


def test_the_whole_set_is_held_and_pinned_at_1001(host):
    expected = EXPECTED[_name(host)]
    holds = set(host.check_output("apt-mark showhold").split())
    assert set(expected) - holds == set()
    pref = host.file("/etc/apt/preferences.d/gpuops-nvidia-driver.pref").content_string
    pinned = dict(re.findall(r"^Package: (\S+)\nPin: version (\S+)\nPin-Priority: 1001$", pref, re.M))
    assert {p: pinned.get(p) for p in expected} == dict.fromkeys(expected, PIN)


@pytest.mark.parametrize("command", ["apt-get -s upgrade", "apt-get -s dist-upgrade"])
def test_upgrade_and_dist_upgrade_move_nothing(host, command):
    expected = EXPECTED[_name(host)]
    moved = [line for line in host.check_output(command).splitlines()
             if line.startswith(("Inst ", "Remv ")) and line.split()[1] in expected]
    assert moved == [], f"{command} would move: {moved}"


def _unattended_upgrade(node: str) -> dict:
    """On ``node``: the control installed at 1-1, the driver set, one unattended-upgrade run, the set again, the
    control's version; the node put back as it was (the test below reads the result)."""
    host = testinfra.get_host(f"docker://{node}")
    host.run(f"printf '%s\\n' '#clear Unattended-Upgrade::Origins-Pattern;' "
             f"'Unattended-Upgrade::Origins-Pattern {{ \"origin=gpuops-test-mirror\"; }};' > {UU_CONF}")
    try:
        host.check_output(f"apt-get install -y -q {CONTROL}=1-1")
        before = _standins(host)
        run = host.run("unattended-upgrade -d")
        return {"before": before, "run": run, "after": _standins(host), "control": host.package(CONTROL).version}
    finally:
        host.run(f"rm -f {UU_CONF}; apt-get purge -y -q {CONTROL}")


@pytest.fixture(scope="module")
def unattended_upgrades() -> dict[str, Future]:
    """Each node's unattended-upgrade run (_unattended_upgrade), the nodes at once (a thread each): one node's run
    touches nothing of the other's, and one after the other their waits on apt and dpkg added up. A node's error is
    raised by its own test (Future.result)."""
    with ThreadPoolExecutor(len(testinfra_hosts)) as pool:
        return {node: pool.submit(_unattended_upgrade, node) for node in testinfra_hosts}


def test_unattended_upgrades_for_the_mirror_origin_moves_nothing(host, unattended_upgrades):
    """A real unattended-upgrade run allowed to take everything from the mirror's origin (and nothing else).

    Control: gpuops-test-uu-control (build-mirror.sh), installed at 1-1 from the same repository and neither
    pinned nor held, must move to 2-1 in that same run; else the run could not have moved anything."""
    case = unattended_upgrades[_name(host)].result()
    before, after, control = case["before"], case["after"], case["control"]
    assert sorted(before) == sorted(EXPECTED[_name(host)]), "the comparison needs the installed set"
    log = case["run"].stdout + case["run"].stderr
    assert case["run"].rc == 0, log[-3000:]
    assert "origin=gpuops-test-mirror" in log, "unattended-upgrade did not read the test's origin pattern"
    assert control == "2-1", f"control: unattended-upgrade left {CONTROL} at {control}\n{log[-3000:]}"
    assert after == before, f"unattended-upgrade moved {set(after.items()) ^ set(before.items())}"
    assert all(v == PIN for v in after.values())


def test_fabric_manager_at_the_driver_version_held_and_enabled(host):
    """deb13's GPU facts (labelled fixture) report an NVSwitch, so nvidia_driver_fabric_manager: auto installs it.

    What is real: apt's version, the hold and systemd's enablement, all done by the role. What stands in: the
    package (labelled, from build-standin-nvidia.py) and its unit, which runs a labelled sleep; it is enabled,
    not started (image-bake mode, no hardware), so no Fabric Manager ever runs here. The stand-in package has no
    maintainer scripts, so the unit can only have been enabled by the role."""
    if _name(host) != "gpuops-driver-deb13":
        skip_by_design("no NVSwitch in deb12-cuda's fixture: Fabric Manager absence is checked above")
    assert host.package("nvidia-fabricmanager-570").version == PIN
    assert "nvidia-fabricmanager-570" in host.check_output("apt-mark showhold").split()
    assert host.service("nvidia-fabricmanager").is_enabled
    assert "TEST STAND-IN" in host.check_output("systemctl show -p Description --value nvidia-fabricmanager")
    assert not host.file("/var/lib/dpkg/info/nvidia-fabricmanager-570.postinst").exists
