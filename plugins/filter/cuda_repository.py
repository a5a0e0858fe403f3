# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: cuda_repository, NVIDIA's CUDA repository for a host (documentation in cuda_repository.yml).

The one home of the repository's coordinates: nvidia_driver (nvidia_driver_source: nvidia) and gpu_health (DCGM)
install from it through gpuops.cluster._pinned_packages, each with its own override variables for a mirror.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# The signing key per package manager: file name under the repository URL and its full fingerprint (the key ID
# is the fingerprint's tail).
KEYS = {
    "apt": ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    "dnf": ("D42D0685.pub", "610C7B14E068A878070DA4E99CD0A493D42D0685"),
}


def cuda_repository(facts: dict) -> dict:
    """{url, key_url, key_fingerprint, suites, components} of the repository for ``facts`` (ansible_facts)."""
    family, major = facts.get("os_family"), str(facts.get("distribution_major_version", ""))
    if facts.get("distribution") == "Ubuntu":
        name, manager = "ubuntu" + str(facts.get("distribution_version", "")).replace(".", ""), "apt"
    elif family == "Debian":
        name, manager = f"debian{major}", "apt"
    elif family == "RedHat":
        name, manager = f"rhel{major}", "dnf"
    else:
        raise AnsibleFilterError(
            f"cuda_repository: NVIDIA's CUDA repository is known here for the Debian and RedHat OS families, not "
            f"{facts.get('distribution')} ({family}). Fix: set the role's repository URL, key URL and key fingerprint "
            "to your mirror of it."
        )
    arch = "sbsa" if facts.get("architecture") == "aarch64" else facts.get("architecture")
    url = f"{BASE}/{name}/{arch}/"
    key_file, fingerprint = KEYS[manager]
    return {"url": url, "key_url": url + key_file, "key_fingerprint": fingerprint,
            "suites": ["/"] if manager == "apt" else [], "components": []}


class FilterModule:
    """gpuops.cluster package repository filters."""

    def filters(self) -> dict:
        return {"cuda_repository": cuda_repository}
