"""upgrade_driver.yml's decisions, pure: what is installed, whether the move is an upgrade or a downgrade,
and whether the node may be touched now (GPU processes running)."""

from __future__ import annotations

import re
from functools import cmp_to_key

from ansible_collections.gpuops.cluster.plugins.module_utils.text import strip_terminal
from ansible_collections.gpuops.cluster.plugins.module_utils.versions import compare_versions
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import dcgm_cuda_major

# Packages whose version is the driver's (Debian non-free, Ubuntu, NVIDIA's CUDA repository for Debian/Ubuntu and
# for RHEL 9: there the role installs kmod-nvidia-{latest,open}-dkms and nvidia-driver-cuda).
_DRIVER_PACKAGE = re.compile(r"^(nvidia-driver(-\d+)?(-open|-server|-cuda)?|nvidia-kernel-(dkms|open-dkms)|"
                             r"kmod-nvidia-(latest|open)-dkms|"
                             r"nvidia-open(-\d+)?|cuda-drivers(-\d+)?|libnvidia-compute(-\d+)?|nvidia-driver-bin)$")


def upstream(version: str) -> str:
    """Debian/RPM package version -> the driver's own: "1:535.261.03-1~deb12u1" -> "535.261.03"."""
    return re.sub(r"^\d+:", "", (version or "").strip()).split("-")[0].split("~")[0]


def driver_package_versions(dpkg_output: str) -> set[str]:
    """`dpkg-query -W -f '${Package} ${Version}\\n' '*nvidia*' 'cuda-drivers*'`, or on an RPM host
    `rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n' '*nvidia*' 'cuda-drivers*'` (the same "name version"
    lines) -> the driver versions the driver packages carry (more than one during a partial upgrade). upgrade_driver
    and diagnose both read the host's driver packages with it."""
    versions = set()
    for line in (dpkg_output or "").splitlines():
        parts = line.split()
        if len(parts) > 1 and _DRIVER_PACKAGE.match(parts[0]) and re.match(r"\d", upstream(parts[1])):
            versions.add(upstream(parts[1]))
    return versions


def installed_driver(dpkg_output: str) -> str | None:
    """The installed driver version: the highest of ``driver_package_versions``; None when none is installed."""
    return max(driver_package_versions(dpkg_output), key=cmp_to_key(compare_versions), default=None)


def gpu_processes(query_output: str, rc: int | None) -> list[str]:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader` -> one entry per
    process. A failing nvidia-smi (no driver loaded) means no process can be on a GPU."""
    if rc not in (0, None):
        return []
    return [ln.strip() for ln in strip_terminal(query_output).splitlines()
            if ln.strip() and "No running processes found" not in ln]


def plan(dpkg_output: str, target: str, allow_downgrade: bool = False, processes: list | None = None,
         force: bool = False) -> dict:
    """{installed, target, action (install | upgrade | downgrade | none), refuse (message or None), packages}."""
    installed = installed_driver(dpkg_output)
    if installed is None:
        action = "install"
    else:
        order = compare_versions(target, installed)
        action = "upgrade" if order > 0 else "downgrade" if order < 0 else "none"
    refuse = None
    if action == "downgrade" and not allow_downgrade:
        refuse = (f"{target} is older than the installed driver {installed}: a downgrade is refused unless asked "
                  f"for. Fix: rerun with -e allow_downgrade=true (same path: drain, move, hold, reboot, verify)")
    elif processes and action != "none" and not force:
        refuse = (f"{len(processes)} GPU process(es) running ({'; '.join(processes[:5])}): the driver is not "
                  f"moved under running jobs. Fix: stop them (or wait), or rerun with -e force=true")
    return {"installed": installed, "target": target, "action": action, "refuse": refuse,
            "packages": {"driver": target, "dcgm_cuda_major": dcgm_cuda_major(target)}}  # the plan's, moved
