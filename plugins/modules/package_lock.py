#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.package_lock: thin wrapper over module_utils.package_lock."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: package_lock
short_description: Wait, bounded, until no other process holds apt's and dpkg's locks; fail naming the holder
version_added: "0.2.0"
description:
  - Reads C(/proc/locks) and matches each lock to apt's and dpkg's lock files (device and inode). While one is held
    it waits, at most O(timeout) seconds, looking again every 2 seconds.
  - When the locks are still held at the end, it fails naming, for each held file, the holder's PID, its command
    line and its systemd unit (such as C(apt-daily-upgrade.service)), and says that no package was changed.
  - It only reads C(/proc); it never takes a lock itself, so it never gets in the way of the other tool.
  - Run it just before the package tasks; keep their own lock timeout (C(ansible.builtin.apt) O(ignore:lock_timeout))
    for the moment between the two.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  timeout:
    description: Seconds to wait for the locks to be free; V(0) checks once.
    type: int
    default: 300
  label:
    description: Who asks, at the start of the failure message (a role and its package set).
    type: str
    default: package_lock
  timeout_variable:
    description: The caller's variable that sets O(timeout); the failure message names it in its fix.
    type: str
    default: timeout
seealso:
  - module: ansible.builtin.apt
"""

EXAMPLES = r"""
- name: The package manager is free (waits up to 5 minutes, names the holder otherwise)
  gpuops.cluster.package_lock:
    timeout: "{{ docker_engine_package_lock_timeout }}"
    label: docker_engine
    timeout_variable: docker_engine_package_lock_timeout
"""

RETURN = r"""
waited:
  description: Seconds waited until the locks were free (0 when they were free at once).
  returned: always
  type: float
  sample: 0.0
held_at_start:
  description: The held locks seen at the first look, as C(<path> by pid <pid> (<command>)).
  returned: always
  type: list
  elements: str
  sample: ["/var/lib/dpkg/lock-frontend by pid 812 (/usr/bin/python3 /usr/bin/unattended-upgrade)"]
holders:
  description: On failure, the holders at the last look (path, pid, command, unit).
  returned: failed
  type: list
  elements: dict
  sample: [{"path": "/var/lib/dpkg/lock-frontend", "pid": 812, "command": "apt-get install -y foo", "unit": ""}]
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text
from ansible_collections.gpuops.cluster.plugins.module_utils.package_lock import (
    APT_LOCK_FILES,
    Holder,
    command_from_cmdline,
    describe,
    holders_of,
    parse_proc_locks,
    timeout_message,
    unit_from_cgroup,
)

SLEEP = 2  # seconds between two looks


def _files(paths: list[str]) -> dict[str, tuple[int, int, int]]:
    found = {}
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        found[path] = (os.major(stat.st_dev), os.minor(stat.st_dev), stat.st_ino)
    return found


def look(paths: tuple[str, ...] | list[str]) -> list[Holder]:
    """The holders now, with their command line and unit."""
    held = holders_of(parse_proc_locks(read_text("/proc/locks") or ""), _files(paths))
    return [Holder(path, pid, command_from_cmdline(read_text(f"/proc/{pid}/cmdline") or "") if pid > 0 else "",
                   unit_from_cgroup(read_text(f"/proc/{pid}/cgroup") or "") if pid > 0 else "")
            for path, pid in held]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "timeout": {"type": "int", "default": 300},
            "label": {"type": "str", "default": "package_lock"},
            "timeout_variable": {"type": "str", "default": "timeout"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 0:
        module.fail_json(msg=f"timeout is {params['timeout']}; expected 0 or more seconds. Fix: set "
                         f"{params['timeout_variable']} to 0 or more.")
    if not os.path.exists("/proc/locks"):
        module.exit_json(changed=False, waited=0.0, held_at_start=[],
                         warnings=["/proc/locks is not readable here: the package manager's locks were not checked"])
    start = time.monotonic()
    holders = look(APT_LOCK_FILES)
    first = [describe(holder) for holder in holders]
    while holders and time.monotonic() - start < params["timeout"]:
        time.sleep(min(SLEEP, max(0.1, params["timeout"] - (time.monotonic() - start))))
        holders = look(APT_LOCK_FILES)
    waited = round(time.monotonic() - start, 1)
    if holders:
        module.fail_json(msg=timeout_message(holders, params["timeout"], params["label"], params["timeout_variable"]),
                         waited=waited, held_at_start=first, holders=[holder._asdict() for holder in holders])
    module.exit_json(changed=False, waited=waited if first else 0.0, held_at_start=first)


if __name__ == "__main__":
    main()
