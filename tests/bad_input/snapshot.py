"""Run INSIDE the bad-input node, by one `docker exec -i NODE python3 - BOOT_FILES_JSON` per snapshot: prints one
JSON object with what `docker diff` cannot see (tests/bad_input/test_bad_input.py compares these):

* tmpfs: every path under /run and /tmp (tmpfs mounts: docker diff never lists them), with its type and mode, and
  a regular file's sha256;
* units: `systemctl list-units --all`, each unit with its load, active and sub state;
* sysctl: `sysctl -a`, less the counters the kernel moves on its own (VOLATILE);
* boot files: the sha256 of each file in the boot diff (a file the boot already changed stays in `docker diff`
  whatever is written to it later), less the journal, which records every module Ansible runs.

Python's standard library only: the node has python3 (Ansible needs it) and nothing else is installed for this.
"""

import hashlib
import json
import os
import re
import stat
import subprocess
import sys

TMPFS = ("/run", "/tmp")
# Counters and values the kernel changes by itself between two reads, or that count what is in use at that moment
# (kernel.pty.nr: ptys open, such as a concurrent case's docker exec; fs.quota.*: the whole machine's quota
# statistics, moved by any sync on it): not host state a case could set.
VOLATILE = re.compile(
    r"^(fs\.(dentry-state|file-nr|inode-nr|inode-state)|fs\.quota\.[a-z_]+|kernel\.ns_last_pid|kernel\.pty\.nr"
    r"|kernel\.random\.(uuid|entropy_avail)"
    r"|net\.netfilter\.nf_conntrack_count)$"
)
JOURNAL = "/var/log/journal/"


def sha256(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as err:
        return f"unreadable: {err.__class__.__name__}"


def describe(path):
    try:
        info = os.lstat(path)
    except OSError:
        return None  # gone between listing and reading
    mode = f"{stat.S_IMODE(info.st_mode):o}"
    if stat.S_ISREG(info.st_mode):
        return f"file {mode} {sha256(path)}"
    if stat.S_ISLNK(info.st_mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISDIR(info.st_mode):
        return f"dir {mode}"
    return f"other {mode}"


def tmpfs():
    found = {}
    for top in TMPFS:
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(root, name)
                found[path] = describe(path)
    return {path: what for path, what in found.items() if what is not None}


def units():
    out = subprocess.run(["systemctl", "list-units", "--all", "--no-legend", "--plain", "--no-pager"],
                         capture_output=True, text=True, check=True).stdout
    return {fields[0]: " ".join(fields[1:4]) for fields in (line.split() for line in out.splitlines()) if fields}


def sysctls():
    out = subprocess.run(["sysctl", "-a"], capture_output=True, text=True, check=False).stdout
    pairs = (line.split(" = ", 1) for line in out.splitlines() if " = " in line)
    return {key: value for key, value in pairs if not VOLATILE.match(key)}


def boot_files(paths):
    return {path: sha256(path) for path in paths if not path.startswith(JOURNAL) and os.path.isfile(path)
            and not os.path.islink(path)}


if __name__ == "__main__":
    print(json.dumps({"tmpfs": tmpfs(), "units": units(), "sysctl": sysctls(),
                      "boot files": boot_files(json.loads(sys.argv[1]))}))
