"""module_utils/package_lock: who holds apt's and dpkg's locks, from /proc/locks.

PROC_LOCKS was captured in a Debian 13 container (gpuops/debian13-systemd) while one python process held
dpkg's lock-frontend and lock (fcntl.lockf, as apt does) and a second one waited for lock; FILES is what
os.stat gave for the same files there (major 0, minor 83 = "00:53" in /proc/locks' hex).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.package_lock import (
    COMMAND_LIMIT,
    Holder,
    Lock,
    command_from_cmdline,
    describe,
    holders_of,
    parse_proc_locks,
    timeout_message,
    unit_from_cgroup,
)

PROC_LOCKS = """\
1: POSIX  ADVISORY  WRITE 7 00:53:1613864 0 EOF
1: -> POSIX  ADVISORY  WRITE 9 00:53:1613864 0 EOF
2: POSIX  ADVISORY  WRITE 7 00:53:1613865 0 EOF
11: OFDLCK ADVISORY  READ -1 00:06:3 0 EOF
"""
FILES = {"/var/lib/dpkg/lock-frontend": (0, 83, 1613865), "/var/lib/dpkg/lock": (0, 83, 1613864)}


def test_parse_keeps_granted_locks_and_leaves_out_waiters():
    locks = parse_proc_locks(PROC_LOCKS)
    assert locks == [
        Lock(7, 0, 0x53, 1613864),
        Lock(7, 0, 0x53, 1613865),
        Lock(-1, 0, 6, 3),
    ]
    assert parse_proc_locks("") == []
    assert parse_proc_locks("garbage\n3: POSIX ADVISORY WRITE x 00:53:1 0 EOF\n") == []


def test_holders_match_device_and_inode_in_the_files_order():
    assert holders_of(parse_proc_locks(PROC_LOCKS), FILES) == [
        ("/var/lib/dpkg/lock-frontend", 7), ("/var/lib/dpkg/lock", 7)]
    # Same inode on another device (another container's overlay): not ours.
    assert holders_of(parse_proc_locks(PROC_LOCKS), {"/var/lib/dpkg/lock": (0, 84, 1613864)}) == []
    assert holders_of([], FILES) == []


def test_unit_and_command_line():
    assert unit_from_cgroup("0::/system.slice/apt-daily-upgrade.service\n") == "apt-daily-upgrade.service"
    assert unit_from_cgroup("9:name=systemd:/user.slice/user-0.slice/session-3.scope\n") == "session-3.scope"
    assert unit_from_cgroup("0::/docker/98b68329b0fa\n") == ""
    assert command_from_cmdline("/usr/bin/python3\0/usr/bin/unattended-upgrade\0") == (
        "/usr/bin/python3 /usr/bin/unattended-upgrade")
    assert command_from_cmdline("x" * (COMMAND_LIMIT + 5)) == "x" * COMMAND_LIMIT + "..."
    assert command_from_cmdline("") == ""
    assert command_from_cmdline("python3\0-c\0import time\ntime.sleep(9)\0") == "python3 -c import time time.sleep(9)"


def test_describe_names_pid_command_and_unit():
    holder = Holder("/var/lib/dpkg/lock-frontend", 812, "/usr/bin/python3 /usr/bin/unattended-upgrade",
                    "apt-daily-upgrade.service")
    assert describe(holder) == ("/var/lib/dpkg/lock-frontend by pid 812 (/usr/bin/python3 /usr/bin/unattended-upgrade;"
                                " unit apt-daily-upgrade.service)")
    assert "it may just have exited" in describe(Holder("/var/lib/dpkg/lock", 9, "", ""))
    assert "outside this PID namespace" in describe(Holder("/var/lib/dpkg/lock", 0, "", ""))
    assert "open file description lock" in describe(Holder("/var/lib/dpkg/lock", -1, "", ""))


def test_timeout_message_says_who_what_nothing_changed_and_the_fix():
    message = timeout_message([Holder("/var/lib/dpkg/lock-frontend", 812, "apt-get install -y foo", "")], 30,
                              "docker_engine", "docker_engine_package_lock_timeout")
    assert message.startswith("docker_engine: the package manager is still locked after waiting 30 s: ")
    assert "/var/lib/dpkg/lock-frontend by pid 812 (apt-get install -y foo)" in message
    assert "changed no package" in message
    assert "raise docker_engine_package_lock_timeout" in message
