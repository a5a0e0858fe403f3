# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The NVIDIA driver's filters:

* ``kernel_headers``, ``kernel_holds``, ``newest_kernel``: which kernel packages keep DKMS ahead of kernel upgrades
  (nvidia_driver; rules in plugins/plugin_utils/kernel.py);
* ``cuda_repository``: NVIDIA's CUDA repository for a host, the one home of its coordinates: nvidia_driver
  (nvidia_driver_source: nvidia) and gpu_health (DCGM) install from it through gpuops.cluster._pinned_packages,
  each with its own override variables for a mirror;
* ``dpkg_output | gpuops.cluster.driver_upgrade_plan(target=..., ...)``: upgrade_driver.yml's decisions (in
  plugins/plugin_utils/driver_upgrade.py).

Documentation in the .yml file of each filter next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

_rule = lazy("kernel")
driver_upgrade = lazy("driver_upgrade")

BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
# The signing key per package manager: file name under the repository URL and its full fingerprint (the key ID
# is the fingerprint's tail).
KEYS = {
    "apt": ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    "dnf": ("D42D0685.pub", "610C7B14E068A878070DA4E99CD0A493D42D0685"),
}


def kernel_headers(installed, pkg_mgr: str = "apt") -> list[str]:
    return _rule.header_packages(installed, pkg_mgr)


def kernel_holds(installed, pkg_mgr: str = "apt") -> list[str]:
    return _rule.hold_packages(installed, pkg_mgr)


def newest_kernel(releases) -> str:
    return _rule.newest_release(releases)


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


def driver_upgrade_plan(dpkg_output, target: str = "", allow_downgrade: bool = False, processes_output: str = "",
                        processes_rc=None, force: bool = False) -> dict:
    rc = None if processes_rc in (None, "") else int(processes_rc)
    processes = driver_upgrade.gpu_processes(str(processes_output or ""), rc)
    return driver_upgrade.plan(str(dpkg_output or ""), str(target), allow_downgrade, processes, force)


class FilterModule:
    """gpuops.cluster NVIDIA driver filters."""

    def filters(self) -> dict:
        return {"kernel_headers": kernel_headers, "kernel_holds": kernel_holds, "newest_kernel": newest_kernel,
                "cuda_repository": cuda_repository, "driver_upgrade_plan": driver_upgrade_plan}
