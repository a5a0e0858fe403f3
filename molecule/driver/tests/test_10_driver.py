"""nvidia_driver in image-bake mode against a local mirror of Debian's real NVIDIA 535 packages.

The mirror offers 535.261.03 (pinned) and 535.309.01 (newer, must never be taken).
"""

from __future__ import annotations

import re

testinfra_hosts = ["gpuops-driver-deb12"]

PIN = "535.261.03"
PIN_APT = "535.261.03-1"
NEWER = "535.309.01"
MIRROR = "http://127.0.0.1:8089/debian"
# roles/nvidia_driver/vars/Debian.yml, source distro, flavour proprietary
PINNED = [
    "nvidia-kernel-dkms", "nvidia-kernel-support", "nvidia-smi", "libnvidia-ml1", "libcuda1", "libnvidia-cfg1",
    "libnvidia-ptxjitcompiler1", "libnvidia-pkcs11-openssl3", "nvidia-alternative", "nvidia-legacy-check",
    "firmware-nvidia-gsp",
]
COMPANIONS = ["nvidia-persistenced"]


def _inst_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Inst ")]


def test_every_pinned_package_is_installed_at_the_pin(host):
    wrong = {p: host.package(p).version if host.package(p).is_installed else None for p in PINNED}
    wrong = {p: v for p, v in wrong.items() if v != PIN_APT}
    assert wrong == {}, f"not at {PIN_APT}: {wrong}"


def test_the_mirror_really_offers_the_newer_version(host):
    # Precondition of the pin tests below: without it they would pass trivially.
    out = host.check_output("apt-cache madison nvidia-smi libcuda1")
    offered = {line.split("|")[1].strip() for line in out.splitlines() if MIRROR in line}
    assert any(v.startswith(NEWER) for v in offered), out
    assert PIN_APT in offered, out


def test_driver_packages_are_held(host):
    holds = set(host.check_output("apt-mark showhold").split())
    assert set(PINNED + COMPANIONS) - holds == set()


def test_apt_upgrade_would_not_move_the_driver(host):
    for cmd in ("apt-get -s upgrade", "apt-get -s dist-upgrade"):
        moved = [line for line in _inst_lines(host.check_output(cmd)) if line.split()[1] in PINNED + COMPANIONS]
        assert moved == [], f"{cmd} would move: {moved}"


def test_explicit_install_keeps_the_pinned_version(host):
    out = host.check_output("apt-get -s install nvidia-smi libcuda1 nvidia-kernel-dkms")
    assert _inst_lines(out) == [], out
    policy = host.check_output("apt-cache policy nvidia-smi")
    assert re.search(rf"Candidate: {re.escape(PIN_APT)}\n", policy), policy
    assert re.search(rf"\*\*\* {re.escape(PIN_APT)} 1001", policy), policy


def test_unattended_upgrades_skips_every_installed_driver_package(host):
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    patterns = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', dump, re.M)
    assert patterns, dump
    installed = host.check_output("dpkg-query -W -f '${Package}\\n'").split()
    nvidia = [p for p in installed if re.search(r"nvidia|cuda|fabricmanager", p) and not p.startswith("glx-")]
    assert set(PINNED + COMPANIONS) <= set(nvidia)
    # unattended-upgrades matches each entry with re.match (is_pkgname_in_blacklist in /usr/bin/unattended-upgrade).
    unprotected = [p for p in nvidia if not any(re.match(rx, p) for rx in patterns)]
    assert unprotected == [], f"unattended-upgrades would upgrade {unprotected}"
    # Merged through our own drop-in, not by editing 50unattended-upgrades.
    assert "^nvidia-" in host.file("/etc/apt/apt.conf.d/51gpuops-nvidia-driver").content_string


def test_nouveau_is_blacklisted_for_modprobe(host):
    config = host.check_output("modprobe --showconfig")
    assert re.search(r"^blacklist nouveau$", config, re.M), "modprobe would still load nouveau"
    assert "options nouveau modeset=0" in config


def test_repository_is_trusted_through_signed_by_only(host):
    sources = host.file("/etc/apt/sources.list.d/gpuops-nvidia-driver.sources").content_string
    assert f"URIs: {MIRROR}" in sources
    keyring = re.search(r"^Signed-By: (\S+)$", sources, re.M).group(1)
    ours = set(re.findall(r"^fpr:+([0-9A-F]+):", host.check_output(f"gpg --show-keys --with-colons {keyring}"), re.M))
    mirror = set(re.findall(r"^fpr:+([0-9A-F]+):", host.check_output(
        "gpg --show-keys --with-colons /srv/gpuops-mirror/keys/gpuops-test-mirror.asc"), re.M))
    assert ours
    assert ours == mirror
    global_keys = host.run("cat /etc/apt/trusted.gpg.d/* 2>/dev/null | gpg --show-keys --with-colons").stdout
    assert not ours & set(re.findall(r"^fpr:+([0-9A-F]+):", global_keys, re.M)), "mirror key is trusted globally"


def test_image_bake_mode_registered_the_module_without_building_or_loading_it(host):
    # DKMS knows the module (it builds on the first boot that has headers); nothing was built or loaded here.
    assert f"nvidia-current/{PIN}: added" in host.check_output("dkms status")
    assert not host.file("/proc/driver/nvidia/version").exists
    persistenced = host.service("nvidia-persistenced")
    assert persistenced.is_enabled
    assert not persistenced.is_running


def test_headless_set_has_no_x_libraries(host):
    for pkg in ("libx11-6", "xserver-xorg-core", "libgl1", "libegl1", "nvidia-driver"):
        assert not host.package(pkg).is_installed, f"{pkg} is installed: the set is not headless"
