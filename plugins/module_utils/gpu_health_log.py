# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Reading the host's kernel log since a cursor: ``journalctl -k``, else ``dmesg``, else ``/var/log/kern.log``.

``read_kernel_log`` returns ``{lines, cursor, source, ok, notes}``. The cursor names its source, so a cursor from
one source is never applied to another (that source then reads the current boot from its start):

* ``journal:<journald cursor>`` -- ``journalctl -k -b --after-cursor``; journald's own cursor (``--show-cursor``);
* ``dmesg:<boot id>:<seconds>`` -- the ``[seconds]`` stamp of the last line read in boot ``<boot id>``
  (/proc/sys/kernel/random/boot_id); a later boot reads from the start;
* ``file:<inode>:<offset>`` -- byte offset in kern.log; a rotated (other inode) or shorter file reads from the start;
* ``text:<lines>`` -- for ``kernel_log_text``: the number of lines already read.

Without a cursor, the current boot: journalctl and dmesg only hold it; in kern.log the lines after its last
``Linux version`` boot banner. Only lines that can hold an event (``NVRM``, ``SXid``) are kept, so a large kern.log
is streamed, not held in memory. Everything that touches the host is injected (``run``, ``which``, paths).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text as read_host_file
from ansible_collections.gpuops.cluster.plugins.module_utils.text import one_line

SOURCE_JOURNAL = "journalctl"
SOURCE_DMESG = "dmesg"
SOURCE_FILE = "kern.log"
SOURCE_TEXT = "text"
SOURCE_NONE = "none"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"  # the host's, in a container too (not namespaced)

_JOURNAL_CURSOR_RE = re.compile(r"^-- cursor: (?P<cursor>.+)$")
_DMESG_STAMP_RE = re.compile(r"^\[\s*(?P<seconds>\d+\.\d+)\]")
_BOOT_BANNER_RE = re.compile(r"kernel: (?:\[\s*\d+\.\d+\] )?Linux version ")
_EVENT_WORDS = ("NVRM", "SXid")


def might_hold_event(line: str) -> bool:
    return any(word in line for word in _EVENT_WORDS)


def _result(source: str, lines: list, cursor: str, notes: list, ok: bool = True) -> dict:
    return {"lines": lines, "cursor": cursor, "source": source, "ok": ok, "notes": notes}


def _cursor_part(since_cursor: str | None, prefix: str) -> str | None:
    """The part after ``prefix:`` of a cursor of this source, else None."""
    if since_cursor and since_cursor.startswith(prefix + ":"):
        return since_cursor[len(prefix) + 1 :]
    return None


# --------------------------------------------------------------------------- kernel_log_text


def read_text(text: str, since_cursor: str | None, notes: list) -> dict:
    lines = text.splitlines()
    skip = 0
    part = _cursor_part(since_cursor, "text")
    if part is not None and part.isdigit() and int(part) <= len(lines):
        skip = int(part)
    elif since_cursor:
        notes.append(f"since_cursor {since_cursor!r} is not a text:<lines> cursor within this text; read all of it")
    return _result(SOURCE_TEXT, lines[skip:], f"text:{len(lines)}", notes)


# --------------------------------------------------------------------------- journalctl


def read_journal(binary: str, since_cursor: str | None, run, notes: list) -> dict | None:
    argv = [binary, "-k", "-b", "-o", "short-iso", "--no-pager", "--show-cursor", "-q"]
    after = _cursor_part(since_cursor, "journal")
    if after:
        argv += ["--after-cursor", after]
    rc, out, err = run(argv)
    if rc != 0 and after:
        notes.append(f"journalctl refused cursor {after!r} ({one_line(err or out)}); read the whole boot")
        return read_journal(binary, None, run, notes)
    if rc != 0:
        notes.append(f"journalctl -k exited {rc}: {one_line(err or out)}")
        return None
    lines, cursor = [], None
    for line in (out or "").splitlines():
        found = _JOURNAL_CURSOR_RE.match(line)
        if found:
            cursor = found.group("cursor").strip()
        elif might_hold_event(line):
            lines.append(line)
    if cursor is None and not after:
        notes.append("journalctl -k shows no kernel messages for this boot (no journal in this namespace?)")
        return None
    return _result(SOURCE_JOURNAL, lines, f"journal:{cursor}" if cursor else since_cursor, notes)


# --------------------------------------------------------------------------- dmesg


def read_dmesg(binary: str, since_cursor: str | None, run, boot_id: str, notes: list) -> dict | None:
    rc, out, err = run([binary])
    if rc != 0:
        notes.append(f"dmesg exited {rc}: {one_line(err or out)}")
        return None
    after = None
    part = _cursor_part(since_cursor, "dmesg")
    if part and part.rpartition(":")[0] == boot_id:
        try:
            after = float(part.rpartition(":")[2])
        except ValueError:
            notes.append(f"since_cursor {since_cursor!r} has no seconds; read the whole boot")
    last, keep, lines = after, after is None, []
    for line in (out or "").splitlines():
        stamp = _DMESG_STAMP_RE.match(line)
        if stamp:  # a line without a stamp continues the message before it
            seconds = float(stamp.group("seconds"))
            keep = after is None or seconds > after
            last = seconds if last is None else max(last, seconds)
        if keep and might_hold_event(line):
            lines.append(line)
    cursor = f"dmesg:{boot_id}:{last:.6f}" if last is not None else f"dmesg:{boot_id}:0"
    return _result(SOURCE_DMESG, lines, cursor, notes)


# --------------------------------------------------------------------------- /var/log/kern.log


def read_kern_log(path: str, since_cursor: str | None, notes: list) -> dict | None:
    try:
        handle = open(path, "rb")  # noqa: SIM115 -- closed below; bytes so that offsets are exact
    except OSError as err:
        notes.append(f"{path} cannot be read: {err.strerror}")
        return None
    with handle:
        stat = os.fstat(handle.fileno())
        offset, since_boot = 0, True
        part = _cursor_part(since_cursor, "file")
        if part:
            inode, _sep, position = part.partition(":")
            if inode == str(stat.st_ino) and position.isdigit() and int(position) <= stat.st_size:
                offset, since_boot = int(position), False
            else:
                notes.append(f"{path} was rotated or truncated since cursor {since_cursor!r}; read this boot")
        handle.seek(offset)
        lines: list = []
        for raw in handle:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if since_boot and _BOOT_BANNER_RE.search(line):
                lines = []  # a later boot started: only the current boot counts
            elif might_hold_event(line):
                lines.append(line)
        end = handle.tell()
    return _result(SOURCE_FILE, lines, f"file:{stat.st_ino}:{end}", notes)


def read_kernel_log(
    since_cursor: str | None,
    run,
    which,
    text: str | None = None,
    kern_log: str = "/var/log/kern.log",
    boot_id_path: str = BOOT_ID_PATH,
) -> dict:
    """The kernel-log lines since ``since_cursor`` from the first source that answers (see the module doc)."""
    notes: list = []
    if text is not None:
        return read_text(text, since_cursor, notes)
    journalctl = which("journalctl")
    if journalctl:
        found = read_journal(journalctl, since_cursor, run, notes)
        if found:
            return found
    else:
        notes.append("journalctl is not in PATH")
    dmesg = which("dmesg")
    if dmesg:
        found = read_dmesg(dmesg, since_cursor, run, read_host_file(boot_id_path) or "unknown", notes)
        if found:
            return found
    else:
        notes.append("dmesg is not in PATH")
    found = read_kern_log(kern_log, since_cursor, notes)
    if found:
        return found
    return _result(SOURCE_NONE, [], since_cursor or "", notes, ok=False)
