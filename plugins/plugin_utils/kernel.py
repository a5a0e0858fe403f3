# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Which kernel packages keep DKMS ahead of kernel upgrades, and which ones to hold (nvidia_driver role).

DKMS builds a module for a kernel only when that kernel's headers are installed. So that a kernel upgrade
never boots a node without its GPU driver, the role either installs headers for every installed kernel plus
the headers metapackage of every installed kernel metapackage (each new kernel then arrives with its headers
and DKMS builds for it at install time), or holds the kernel metapackages (nvidia_driver_hold_kernel).
Pure functions over installed package names; used by plugins/filter/driver.py.
"""

from __future__ import annotations

import re

# Debian: linux-image-6.1.0-28-amd64 (versioned), linux-image-amd64 / linux-image-cloud-amd64 (metapackages).
# Ubuntu: linux-image-6.8.0-45-generic, linux-image-unsigned-6.8.0-45-generic, linux-image-generic(-hwe-24.04).
_APT_VERSIONED = re.compile(r"^linux-image-(?:unsigned-)?(?P<release>[0-9][^ ]*?)(?:-unsigned)?$")
_APT_IMAGE_META = re.compile(r"^linux-image-(?P<flavour>[a-z][a-z0-9.+-]*)$")
# Metapackages that pull new kernels: Debian's per-architecture ones, Ubuntu's flavour (and HWE) ones.
_APT_HOLD = re.compile(
    r"^linux-(?:image-|headers-)?(?:(?:cloud-|rt-)?(?:amd64|arm64)"
    r"|(?:generic|virtual|lowlatency|aws|azure|gcp|oracle|kvm|oem|nvidia)(?:-hwe-[0-9.]+|-[0-9.]+)?)$"
)
_DNF_HOLD = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-devel")
_DNF_VERSIONED = re.compile(r"^kernel-core-(?P<release>[0-9].*)$")


def header_packages(installed, pkg_mgr: str = "apt") -> list[str]:
    """Headers to install: one per installed kernel, one per installed kernel metapackage (apt).

    For dnf, ``installed`` may also hold ``kernel-core-<version-release.arch>`` strings (from rpm -q).
    """
    names = sorted(map(str, installed))
    if pkg_mgr == "dnf":
        wanted = {f"kernel-devel-{m['release']}" for n in names if (m := _DNF_VERSIONED.match(n))}
        return sorted(wanted)
    wanted = set()
    for name in names:
        if name.endswith("-dbg"):
            continue
        versioned = _APT_VERSIONED.match(name)
        if versioned:
            wanted.add(f"linux-headers-{versioned['release']}")
            continue
        meta = _APT_IMAGE_META.match(name)
        if meta and not meta["flavour"].startswith("unsigned"):
            wanted.add(f"linux-headers-{meta['flavour']}")
    return sorted(wanted)


def hold_packages(installed, pkg_mgr: str = "apt") -> list[str]:
    """Installed kernel metapackages to hold so that no new kernel arrives (nvidia_driver_hold_kernel)."""
    names = sorted(map(str, installed))
    if pkg_mgr == "dnf":
        return [n for n in _DNF_HOLD if n in names]
    return [n for n in names if _APT_HOLD.match(n)]


def _release_key(release: str) -> list:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+~-]", release) if p]


def newest_release(releases) -> str:
    """The newest kernel release of a list such as ['6.1.0-28-amd64', '6.1.0-9-amd64'] ('' when empty)."""
    found = [str(r) for r in releases if str(r)]
    return max(found, key=_release_key) if found else ""
