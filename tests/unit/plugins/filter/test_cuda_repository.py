"""cuda_repository: NVIDIA's CUDA repository for a host, the one home of its URL, key and fingerprint.

Facts as ansible's setup module reports them (distribution, os_family, distribution_version,
distribution_major_version, architecture); the URLs are NVIDIA's published ones
(https://developer.download.nvidia.com/compute/cuda/repos/, its debian12, ubuntu2204 and rhel9 directories).
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.driver import FilterModule

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
APT_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"
DNF_KEY = "610C7B14E068A878070DA4E99CD0A493D42D0685"
cuda_repository = FilterModule().filters()["cuda_repository"]


def facts(distribution: str, family: str, version: str, arch: str = "x86_64") -> dict:
    return {"distribution": distribution, "os_family": family, "distribution_version": version,
            "distribution_major_version": version.split(".", maxsplit=1)[0], "architecture": arch}


@pytest.mark.parametrize(("host", "url", "key_file", "fingerprint", "suites"), [
    (facts("Debian", "Debian", "12"), f"{CUDA}/debian12/x86_64/", "3bf863cc.pub", APT_KEY, ["/"]),
    (facts("Debian", "Debian", "13", "aarch64"), f"{CUDA}/debian13/sbsa/", "3bf863cc.pub", APT_KEY, ["/"]),
    (facts("Ubuntu", "Debian", "22.04"), f"{CUDA}/ubuntu2204/x86_64/", "3bf863cc.pub", APT_KEY, ["/"]),
    (facts("Ubuntu", "Debian", "24.04", "aarch64"), f"{CUDA}/ubuntu2404/sbsa/", "3bf863cc.pub", APT_KEY, ["/"]),
    (facts("Rocky", "RedHat", "9.4"), f"{CUDA}/rhel9/x86_64/", "D42D0685.pub", DNF_KEY, []),
])
def test_the_repository_per_os_and_architecture(host, url, key_file, fingerprint, suites) -> None:
    assert cuda_repository(host) == {"url": url, "key_url": url + key_file, "key_fingerprint": fingerprint,
                                     "suites": suites, "components": []}


def test_the_key_id_is_the_fingerprints_tail() -> None:
    for host in (facts("Debian", "Debian", "12"), facts("AlmaLinux", "RedHat", "9.4")):
        repo = cuda_repository(host)
        assert repo["key_fingerprint"].endswith(repo["key_url"].rsplit("/", 1)[1].removesuffix(".pub").upper())


def test_another_os_family_is_refused_with_the_fix() -> None:
    with pytest.raises(AnsibleFilterError, match=r"not SLES \(Suse\).*Fix: set the role's repository URL"):
        cuda_repository(facts("SLES", "Suse", "15.5"))
