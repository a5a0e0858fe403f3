"""kernel: which headers keep DKMS ahead of kernel upgrades, which metapackages to hold, the newest kernel."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.filter.driver import FilterModule
from ansible_collections.gpuops.cluster.plugins.plugin_utils.kernel import (
    header_packages,
    hold_packages,
    newest_release,
)

# Package names as dpkg lists them on a Debian 12 host two kernel updates in (plus neighbours that must not match).
DEBIAN12 = [
    "linux-base",
    "linux-libc-dev",
    "linux-compiler-gcc-12-x86",
    "firmware-linux-free",
    "linux-image-6.1.0-28-amd64",
    "linux-image-6.1.0-31-amd64",
    "linux-image-6.1.0-31-amd64-dbg",
    "linux-image-amd64",
    "linux-headers-6.1.0-28-amd64",
    "linux-headers-6.1.0-28-common",
]
UBUNTU2404 = [
    "linux-generic-hwe-24.04",
    "linux-image-generic-hwe-24.04",
    "linux-headers-generic-hwe-24.04",
    "linux-image-6.8.0-45-generic",
    "linux-image-unsigned-6.11.0-19-generic",
    "linux-firmware",
    "linux-tools-common",
]


def test_debian_headers_for_every_kernel_and_the_metapackage():
    assert header_packages(DEBIAN12) == [
        "linux-headers-6.1.0-28-amd64",
        "linux-headers-6.1.0-31-amd64",
        "linux-headers-amd64",
    ]


def test_ubuntu_headers_for_versioned_unsigned_and_hwe_kernels():
    assert header_packages(UBUNTU2404) == [
        "linux-headers-6.11.0-19-generic",
        "linux-headers-6.8.0-45-generic",
        "linux-headers-generic-hwe-24.04",
    ]


def test_a_container_without_kernels_needs_nothing():
    assert header_packages(["bash", "linux-base", "linux-libc-dev"]) == []
    assert hold_packages(["bash", "linux-base", "linux-libc-dev", "linux-firmware"]) == []


def test_holds_are_the_metapackages_only():
    assert hold_packages(DEBIAN12) == ["linux-image-amd64"]
    assert hold_packages([*DEBIAN12, "linux-headers-amd64", "linux-image-cloud-amd64"]) == [
        "linux-headers-amd64",
        "linux-image-amd64",
        "linux-image-cloud-amd64",
    ]
    assert hold_packages([*UBUNTU2404, "linux-aws"]) == [
        "linux-aws",
        "linux-generic-hwe-24.04",
        "linux-headers-generic-hwe-24.04",
        "linux-image-generic-hwe-24.04",
    ]


def test_dnf_kernel_devel_per_kernel_and_versionlock_names():
    installed = [
        "kernel",
        "kernel-core",
        "kernel-core-5.14.0-427.13.1.el9_4.x86_64",
        "kernel-core-5.14.0-503.11.1.el9_5.x86_64",
        "kernel-modules",
        "kernel-tools",
    ]
    assert header_packages(installed, "dnf") == [
        "kernel-devel-5.14.0-427.13.1.el9_4.x86_64",
        "kernel-devel-5.14.0-503.11.1.el9_5.x86_64",
    ]
    assert hold_packages(installed, "dnf") == ["kernel", "kernel-core", "kernel-modules"]


def test_newest_kernel_compares_numbers_as_numbers():
    assert newest_release(["6.1.0-9-amd64", "6.1.0-28-amd64", "6.1.0-10-amd64"]) == "6.1.0-28-amd64"
    assert newest_release(["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]) == (
        "5.14.0-503.11.1.el9_5.x86_64"
    )
    assert newest_release(["6.8.0-45-generic", "6.11.0-19-generic"]) == "6.11.0-19-generic"
    assert newest_release([]) == ""


def test_filters_accept_package_facts():
    filters = FilterModule().filters()
    facts = {name: [{"version": "1"}] for name in DEBIAN12}
    assert filters["kernel_headers"](facts, "apt")[-1] == "linux-headers-amd64"
    assert filters["kernel_holds"](facts) == ["linux-image-amd64"]
    assert filters["newest_kernel"](["6.1.0-9-amd64", "6.1.0-28-amd64"]) == "6.1.0-28-amd64"
