"""gpu_health_log: the kernel log since a cursor, from journalctl, else dmesg, else kern.log, else none."""

from __future__ import annotations

import os

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_log as log
from gpu_facts_helpers import Commands

XID = "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
JOURNAL_ARGV = "journalctl -k -b -o short-iso --no-pager --show-cursor -q"
BOOT = "0f3cd65a-338b-4574-bba3-ecef214e1917"


def _read(commands, cursor=None, tmp_path=None, text=None):
    boot_id = (tmp_path / "boot_id") if tmp_path else None
    if boot_id:
        boot_id.write_text(BOOT + "\n")
    return log.read_kernel_log(
        cursor,
        commands.run,
        commands.which,
        text=text,
        kern_log=str(tmp_path / "kern.log") if tmp_path else "/nonexistent/kern.log",
        boot_id_path=str(boot_id) if boot_id else "/nonexistent/boot_id",
    )


def test_journal_first_with_its_cursor_and_only_lines_that_can_hold_events():
    out = (
        f"2026-02-14T05:03:41+0000 gpu-1 kernel: mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT\n"
        f"2026-02-14T05:03:42+0000 gpu-1 kernel: {XID}\n-- cursor: s=abc;i=4b2\n"
    )
    commands = Commands({JOURNAL_ARGV: (0, out, "")}, binaries=("journalctl", "dmesg"))
    found = _read(commands)
    assert (found["source"], found["cursor"], found["ok"]) == ("journalctl", "journal:s=abc;i=4b2", True)
    assert found["lines"] == [f"2026-02-14T05:03:42+0000 gpu-1 kernel: {XID}"]


def test_journal_after_cursor_with_nothing_new_keeps_the_cursor():
    commands = Commands({f"{JOURNAL_ARGV} --after-cursor s=abc;i=4b2": (0, "", "")}, binaries=("journalctl",))
    found = _read(commands, "journal:s=abc;i=4b2")
    assert (found["source"], found["cursor"], found["lines"]) == ("journalctl", "journal:s=abc;i=4b2", [])


def test_a_refused_journal_cursor_reads_the_whole_boot():
    commands = Commands(
        {
            f"{JOURNAL_ARGV} --after-cursor bad": (1, "", "Failed to seek to cursor: Invalid argument"),
            JOURNAL_ARGV: (0, f"x kernel: {XID}\n-- cursor: s=new\n", ""),
        },
        binaries=("journalctl",),
    )
    found = _read(commands, "journal:bad")
    assert (found["cursor"], len(found["lines"])) == ("journal:s=new", 1)
    assert "refused cursor" in found["notes"][0]


def test_dmesg_when_the_journal_has_no_kernel_messages(tmp_path):
    out = (
        f"[   12.000001] nvidia: loading out-of-tree module\n[ 1843.308145] {XID}\n"
        "               NVRM: continuation without stamp\n"
    )
    commands = Commands({JOURNAL_ARGV: (0, "", ""), "dmesg": (0, out, "")}, binaries=("journalctl", "dmesg"))
    found = _read(commands, tmp_path=tmp_path)
    assert (found["source"], found["cursor"]) == ("dmesg", f"dmesg:{BOOT}:1843.308145")
    assert len(found["lines"]) == 2  # noqa: PLR2004 -- the Xid line and its continuation
    again = _read(commands, found["cursor"], tmp_path=tmp_path)
    assert (again["lines"], again["cursor"]) == ([], found["cursor"])
    other_boot = _read(commands, "dmesg:another-boot:99999.0", tmp_path=tmp_path)
    assert len(other_boot["lines"]) == 2  # noqa: PLR2004


def test_kern_log_from_the_last_boot_then_from_the_cursor(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text(
        f"Jan  1 00:00:00 h kernel: [    0.000000] Linux version 6.1.0\nJan  1 00:01:00 h kernel: {XID}\n"
        f"Jan  2 00:00:00 h kernel: [    0.000000] Linux version 6.1.0\nJan  2 00:01:00 h kernel: NVRM: Xid "
        "(PCI:0000:02:00): 13, x\n"
    )
    commands = Commands(
        {"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")}, binaries=("dmesg",)
    )
    found = _read(commands, tmp_path=tmp_path)
    assert found["source"] == "kern.log"
    assert [line.split("Xid ")[1][:15] for line in found["lines"]] == ["(PCI:0000:02:00"]
    inode = os.stat(path).st_ino
    assert found["cursor"] == f"file:{inode}:{path.stat().st_size}"
    with path.open("a") as handle:
        handle.write(f"Jan  2 00:02:00 h kernel: {XID}\n")
    again = _read(commands, found["cursor"], tmp_path=tmp_path)
    assert [line[:15] for line in again["lines"]] == ["Jan  2 00:02:00"]
    assert any("journalctl is not in PATH" in note for note in found["notes"])


def test_no_source_is_not_ok_and_keeps_the_cursor():
    found = _read(Commands(binaries=()), "journal:s=abc")
    assert (found["source"], found["ok"], found["cursor"], found["lines"]) == ("none", False, "journal:s=abc", [])


def test_text_cursor_counts_lines():
    text = f"{XID}\nother\n"
    first = _read(Commands(binaries=()), text=text)
    assert (first["source"], first["cursor"], len(first["lines"])) == ("text", "text:2", 2)
    later = _read(Commands(binaries=()), "text:2", text=text + f"{XID}\n")
    assert (later["lines"], later["cursor"]) == ([XID], "text:3")
