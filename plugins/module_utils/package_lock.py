# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Who holds the package manager's locks: /proc/locks, matched to the lock files by device and inode.

apt and dpkg take POSIX (fcntl) write locks on a few files while they work (dpkg's lock-frontend and lock,
apt's lists/lock during an update, archives/lock during a download). Another run (unattended-upgrades,
apt-daily, an admin's apt-get) makes ours wait and then fail with "Could not get lock" and no name. Reading
/proc/locks is read-only: nothing here takes a lock, so probing never gets in another tool's way.

Pure functions, no Ansible imports; the module ``package_lock`` is a thin wrapper.
"""

from __future__ import annotations

from typing import NamedTuple

# apt's and dpkg's lock files, in the order apt takes them.
APT_LOCK_FILES = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
)
COMMAND_LIMIT = 200  # characters of a holder's command line quoted in a message
_FIELDS = 6  # "<n>: <kind: POSIX, FLOCK, OFDLCK...> <advisory> <mode: READ, WRITE> <pid> <major:minor:inode> ..."


class Lock(NamedTuple):
    """One granted lock from /proc/locks (waiters, the "->" lines, are left out), of any kind and mode."""

    pid: int  # in the reader's PID namespace; 0 outside it, -1 for an open file description lock
    major: int
    minor: int
    inode: int


class Holder(NamedTuple):
    path: str
    pid: int
    command: str  # the command line, or "" when unknown
    unit: str  # the systemd unit it runs in (apt-daily-upgrade.service), or ""


def parse_proc_locks(text: str) -> list[Lock]:
    """Parse /proc/locks. Lines look like ``10: POSIX  ADVISORY  WRITE 6 00:68:1613865 0 EOF``
    (device major:minor in hex, then the inode); ``10: -> POSIX ...`` lines are processes waiting for it."""
    locks = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < _FIELDS or fields[1] == "->":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            locks.append(Lock(int(fields[4]), int(major, 16), int(minor, 16), int(inode)))
        except ValueError:
            continue
    return locks


def holders_of(locks: list[Lock], files: dict[str, tuple[int, int, int]]) -> list[tuple[str, int]]:
    """(path, pid) for each lock on one of ``files`` (path -> (major, minor, inode) of its stat), in files' order."""
    found = []
    for path, (major, minor, inode) in files.items():
        found.extend((path, lock.pid) for lock in locks
                     if lock.inode == inode and (lock.major, lock.minor) == (major, minor))
    return found


def unit_from_cgroup(text: str) -> str:
    """The systemd unit a process runs in, from /proc/<pid>/cgroup (``0::/system.slice/apt-daily.service``)."""
    for line in (text or "").splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part
    return ""


def command_from_cmdline(text: str) -> str:
    """/proc/<pid>/cmdline (NUL-separated) as one line (whitespace folded), cut after COMMAND_LIMIT characters."""
    text = " ".join((text or "").replace("\0", " ").split())
    return text if len(text) <= COMMAND_LIMIT else text[:COMMAND_LIMIT] + "..."


def describe(holder: Holder) -> str:
    """One held lock in words.

    ``/var/lib/dpkg/lock-frontend by pid 812 (/usr/bin/unattended-upgrade; unit apt-daily-upgrade.service)``
    """
    if holder.pid == -1:
        who = "an open file description lock (no single process; see lsof " + holder.path + ")"
    elif holder.pid == 0:
        who = "a process outside this PID namespace (the host or another container)"
    else:
        unit = f"; unit {holder.unit}" if holder.unit else ""
        who = f"pid {holder.pid} ({holder.command or 'command unknown, it may just have exited'}{unit})"
    return f"{holder.path} by {who}"


def timeout_message(holders: list[Holder], timeout: int, label: str, timeout_variable: str) -> str:
    """The failure after waiting ``timeout`` seconds: who holds what, that nothing changed, and the fix."""
    held = "; ".join(describe(holder) for holder in holders)
    return (
        f"{label}: the package manager is still locked after waiting {timeout} s: {held}. This run installed and "
        f"changed no package; expected the apt/dpkg locks to be free (another apt or dpkg run, often "
        f"unattended-upgrades or apt-daily, holds them while it works). Fix: let that run finish, or stop it "
        f"(systemctl stop unattended-upgrades apt-daily.service apt-daily-upgrade.service), or raise "
        f"{timeout_variable}; then run again."
    )
