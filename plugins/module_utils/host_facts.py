# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The host facts preflight needs besides the GPUs, in the same remote call: gpu_facts' ``gpu_host`` (os_facts,
free_space_paths, tcp_probes), named as in ``ansible_facts`` so that no ``setup`` runs. What touches the host is
injectable (roots, ``statvfs``, ``connect``, ``uname``) for tests."""

from __future__ import annotations

import errno
import os
import re
import socket
import time

from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text

# os-release ID -> (ansible_facts['distribution'], ansible_facts['os_family'])
_DISTRIBUTIONS = {
    "debian": ("Debian", "Debian"),
    "ubuntu": ("Ubuntu", "Debian"),
    "rhel": ("RedHat", "RedHat"),
    "rocky": ("Rocky", "RedHat"),
    "almalinux": ("AlmaLinux", "RedHat"),
    "centos": ("CentOS", "RedHat"),
    "fedora": ("Fedora", "RedHat"),
    "opensuse-leap": ("openSUSE Leap", "Suse"),
    "sles": ("SLES", "Suse"),
}
# EFI_GLOBAL_VARIABLE's GUID (UEFI spec); the SecureBoot variable is 4 attribute bytes then one value byte
_SECURE_BOOT_VAR = "efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_SECURE_BOOT_LEN = 5
_DOTTED = re.compile(r"^\d+(\.\d+)*$")
PROBE_TIMEOUT_MAX = 30.0


def parse_key_values(text: str) -> dict[str, str]:
    """KEY=value lines, as os-release(5) and a sysfs ``uevent`` file hold them, quotes removed."""
    values = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":  # noqa: PLR2004 -- a quoted pair
            value = value[1:-1]
        values[key.strip()] = value
    return values


def secure_boot_state(sysfs_root: str) -> bool | None:
    """True/False from efivarfs; False on a legacy BIOS boot (no EFI); None when EFI cannot tell."""
    if not os.path.isdir(os.path.join(sysfs_root, "firmware", "efi")):
        return False
    try:
        with open(os.path.join(sysfs_root, "firmware", _SECURE_BOOT_VAR), "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if len(data) < _SECURE_BOOT_LEN:
        return None
    return data[4] == 1


def memtotal_mb(meminfo: str) -> int | None:
    """MiB of memory from /proc/meminfo's ``MemTotal: <n> kB`` line (as ansible_facts' memtotal_mb), None without it."""
    found = re.search(r"^MemTotal:\s+(\d+)\s+kB\s*$", meminfo or "", re.MULTILINE)
    return int(found.group(1)) // 1024 if found else None


def processor_count(cpuinfo: str) -> int | None:
    """The CPUs the kernel has online: the ``processor : <n>`` entries of /proc/cpuinfo, None without one."""
    return len(re.findall(r"^processor\s*:\s*\d+\s*$", cpuinfo or "", re.MULTILINE)) or None


def os_facts(root: str = "/", sysfs_root: str = "/sys", uname=os.uname, proc_root: str = "/proc") -> dict:
    """The OS facts preflight needs, named as in ansible_facts."""
    release = parse_key_values(read_text(os.path.join(root, "etc/os-release")) or "")
    os_id = release.get("ID", "").lower()
    distribution, family = _DISTRIBUTIONS.get(os_id, (release.get("NAME") or os_id or None, None))
    version = release.get("VERSION_ID") or None
    if distribution == "Debian":  # Ansible reports the point release (12.7), as /etc/debian_version has it
        point = read_text(os.path.join(root, "etc/debian_version")) or ""
        if _DOTTED.match(point):
            version = point
    info = uname()
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0] if version else None,
        "distribution_release": release.get("VERSION_CODENAME") or None,
        "os_family": family,
        "kernel": info.release,
        "architecture": info.machine,
        "secure_boot": secure_boot_state(sysfs_root),
        "memtotal_mb": memtotal_mb(read_text(os.path.join(proc_root, "meminfo")) or ""),
        "processor_vcpus": processor_count(read_text(os.path.join(proc_root, "cpuinfo")) or ""),
    }


def free_space(path: str, statvfs=os.statvfs) -> dict:
    """Free bytes (for an unprivileged writer) on the filesystem that holds ``path`` or will hold it, so that a nearly
    full data volume is refused before anything is written."""
    probe = os.path.abspath(path or "/")
    while True:
        try:
            stats = statvfs(probe)
            break
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return {"path": path, "measured_at": None, "free_bytes": None, "error": "no parent directory exists"}
            probe = parent
        except OSError as exc:
            return {"path": path, "measured_at": probe, "free_bytes": None, "error": str(exc)}
    return {
        "path": path,
        "measured_at": probe,
        "free_bytes": stats.f_bavail * stats.f_frsize,
        "total_bytes": stats.f_blocks * stats.f_frsize,
        "error": None,
    }


def tcp_probe(host: str, port: int, timeout: float, connect=socket.create_connection, clock=time.monotonic) -> dict:
    """One TCP connect, bounded by ``timeout`` seconds (capped at PROBE_TIMEOUT_MAX), so that an unreachable server
    (NFS) is refused before a ``hard`` mount can hang the run."""
    timeout = max(0.1, min(float(timeout), PROBE_TIMEOUT_MAX))
    started = clock()
    result = {"host": host, "port": int(port), "timeout": timeout, "reachable": False, "error": None}
    try:
        conn = connect((host, int(port)), timeout=timeout)
    except socket.timeout:
        result["error"] = f"no answer within {timeout:g} s"
    except OSError as exc:
        reason = errno.errorcode.get(exc.errno or 0, "") if exc.errno else ""
        result["error"] = f"{exc.strerror or exc}{f' ({reason})' if reason else ''}"
    else:
        conn.close()
        result["reachable"] = True
    result["seconds"] = round(clock() - started, 3)
    return result
