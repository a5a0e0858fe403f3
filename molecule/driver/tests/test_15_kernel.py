"""The kernel must not outrun the driver (issue 11 part 3), on the converged Debian 12 node (image-bake mode).

This container has no kernel package and nothing under /boot, so DKMS has no kernel to build for. The role
must say so in verify, not pass silently. The rules are then proven with LABELLED TEST STAND-IN kernel
packages (empty .debs built here with dpkg-deb, no kernel inside), installed and purged by this file:
  * a versioned kernel (linux-image-6.1.0-0-gpuops-standin, with an empty /boot/vmlinuz-<release>): by default
    the install stage wants its headers, and verify refuses it as the newest kernel without a DKMS build;
  * a kernel metapackage (linux-image-amd64): nvidia_driver_hold_kernel holds it, and verify refuses it unheld.
Each step is one ansible-playbook run of nvidia_driver.yml (converge.yml's nvidia_driver play) with the role's
stage tags (molecule/resources/stage_tags.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper)

testinfra_hosts = ["gpuops-driver-deb12"]
NODE = "gpuops-driver-deb12"
VERSION = "535.261.03"  # gpuops-driver-deb12's nvidia_driver_version (molecule.yml's host_vars)
STANDIN_RELEASE = "6.1.0-0-gpuops-standin"
STANDIN_KERNEL = f"linux-image-{STANDIN_RELEASE}"
STANDIN_META = "linux-image-amd64"
STANDIN_DIR = "/root/kernel-standins"


def kernel_rules():
    """plugins/plugin_utils/kernel.py, the rules the role's filters apply (loaded from the checkout)."""
    spec = importlib.util.spec_from_file_location("gpuops_kernel", PROJECT / "plugins" / "plugin_utils" / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_packages(host) -> set[str]:
    out = host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'")
    return {line.split()[-1] for line in out.splitlines() if line.startswith("ii")}


def role(tag: str, *extra: str) -> stage_tags.TagRun:
    # gathered: a stand-in kernel package changes no fact gather_facts finds (the role reads the packages itself).
    return stage_tags.run_tag(SCENARIO / "nvidia_driver.yml", tag, "nvidia_driver", extra=("--limit", NODE, *extra),
                              gathered=True)


def build_standin(package: str, files: tuple[str, ...] = ()) -> str:
    """The shell commands that build an empty .deb named like a kernel package (LABELLED stand-in: no kernel inside)
    at <STANDIN_DIR>/<package>.deb on the node."""
    root = f"{STANDIN_DIR}/{package}"
    control = (
        f"Package: {package}\nVersion: 0.0~gpuops.standin\nArchitecture: all\nMaintainer: gpuops tests <none>\n"
        "Description: LABELLED TEST STAND-IN, no kernel inside (molecule/driver/tests/test_15_kernel.py)\n"
    )
    steps = [f"rm -rf {root}", f"mkdir -p {root}/DEBIAN", f"printf '%s' '{control}' > {root}/DEBIAN/control"]
    steps += [f"mkdir -p {root}$(dirname {path}) && : > {root}{path}" for path in files]
    steps.append(f"dpkg-deb --build {root} {root}.deb >/dev/null")
    return " && ".join(steps)


@pytest.fixture
def standin(host):
    """Installs stand-in kernel packages for one test; purges them (and their holds) afterwards."""
    installed: list[str] = []

    def install(package: str, files: tuple[str, ...] = ()) -> None:
        # Built and installed in one call on the node.
        host.run_expect([0], f"set -e; {build_standin(package, files)} && dpkg -i {STANDIN_DIR}/{package}.deb")
        installed.append(package)

    yield install
    for package in installed:
        host.run(f"apt-mark unhold {package}; dpkg --purge {package}")
    host.run(f"rm -rf {STANDIN_DIR}")
    assert not installed_packages(host) & set(installed), "stand-in kernel packages were left on the node"


def test_this_container_has_no_kernel(host):
    """Why the DKMS check cannot run here: no kernel package, nothing under /boot (image-bake mode, container)."""
    assert not [p for p in installed_packages(host) if p.startswith("linux-image-")]
    assert host.run("ls /boot/vmlinuz-* 2>/dev/null").stdout == ""


def test_headers_for_every_installed_kernel(host):
    """What the role installs by default is there (none on this node: see the stand-in tests for the real case)."""
    installed = installed_packages(host)
    wanted = kernel_rules().header_packages(installed, "apt")
    assert [p for p in wanted if p not in installed] == []


def test_dkms_registered_the_driver_without_building_it(host):
    """Image-bake mode in a container: the module is registered for DKMS, and built for no kernel."""
    status = host.check_output("dkms status")
    assert VERSION in status, status
    assert ": installed" not in status, status


def test_verify_says_it_did_not_check_a_dkms_build():
    # The very run test_80_tags_alone.py needs for nvidia_driver_verify (every node, no stand-in yet): made once.
    run = stage_tags.run_tag(SCENARIO / "nvidia_driver.yml", "nvidia_driver_verify", "nvidia_driver", reuse=True,
                             gathered=True)
    assert run.problems() == [], stage_tags.report(run)
    [said] = run.results("no kernel installed, so no DKMS build to check", NODE)
    assert not said.get("skipped"), said
    assert f"no kernel under /boot on {NODE}" in said["msg"]
    assert f"nvidia {VERSION}" in said["msg"]


def test_newest_kernel_without_a_dkms_build_fails_verify(standin):
    standin(STANDIN_KERNEL, (f"/boot/vmlinuz-{STANDIN_RELEASE}",))
    run = role("nvidia_driver_verify")
    assert run.rc != 0, stage_tags.report(run)
    [refused] = [r for r in run.results("DKMS built the driver for the newest installed kernel") if r.get("failed")]
    assert f"DKMS has not built nvidia {VERSION} for {STANDIN_RELEASE}, the newest installed kernel" in refused["msg"]
    assert f"apt-get install linux-headers-{STANDIN_RELEASE}" in refused["msg"]
    assert f"dkms autoinstall -k {STANDIN_RELEASE}" in refused["msg"]


def test_default_installs_the_headers_of_every_installed_kernel(standin):
    """Stand-in kernel: its headers exist nowhere, so apt's refusal shows the role asked for exactly them."""
    standin(STANDIN_KERNEL)
    run = role("nvidia_driver_install")
    assert run.rc != 0, stage_tags.report(run)
    [asked] = [r for r in run.results("headers of every installed kernel") if r.get("failed")]
    assert f"linux-headers-{STANDIN_RELEASE}" in asked["msg"], asked


def test_hold_kernel_holds_the_kernel_metapackage_and_verify_checks_it(host, standin):
    standin(STANDIN_META)
    hold = ("-e", "nvidia_driver_hold_kernel=true", "-e", "nvidia_driver_install_headers=false")
    # Install, then verify, in one run: the hold is made and verify finds it.
    run = role("nvidia_driver_install,nvidia_driver_verify", *hold)
    assert run.rc == 0, stage_tags.report(run)
    assert not run.failed, stage_tags.report(run)
    assert STANDIN_META in host.check_output("apt-mark showhold").split()
    [checked] = run.results("kernel metapackages held")
    assert not checked.get("skipped"), checked

    host.run_expect([0], f"apt-mark unhold {STANDIN_META}")
    run = role("nvidia_driver_verify", *hold)
    assert run.rc != 0, stage_tags.report(run)
    [refused] = [r for r in run.results("kernel metapackages held") if r.get("failed")]
    assert refused["msg"].startswith(f"not held: {STANDIN_META};"), refused
