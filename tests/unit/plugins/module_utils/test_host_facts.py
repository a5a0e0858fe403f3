"""host_facts: the OS facts, free space and bounded TCP probes gpu_facts gathers for preflight."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import host_facts

PROBE_SECONDS = 2
UNAME = SimpleNamespace(release="6.1.0-25-amd64", machine="x86_64")


def make_root(tmp_path, os_release: str, debian_version: str | None = None):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text(os_release)
    if debian_version is not None:
        (tmp_path / "etc" / "debian_version").write_text(debian_version)
    return str(tmp_path)


DEBIAN12 = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    "VERSION_CODENAME=bookworm\nID=debian\n"
)
UBUNTU = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n'
ROCKY = 'NAME="Rocky Linux"\nVERSION_ID="9.4"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'


@pytest.mark.parametrize(
    ("release", "debian_version", "expected"),
    [
        (DEBIAN12, "12.7\n", ("Debian", "12.7", "12", "bookworm", "Debian")),
        (DEBIAN12, "trixie/sid\n", ("Debian", "12", "12", "bookworm", "Debian")),  # testing: not a version
        (UBUNTU, "trixie/sid\n", ("Ubuntu", "24.04", "24", "noble", "Debian")),
        (ROCKY, None, ("Rocky", "9.4", "9", None, "RedHat")),
    ],
    ids=["debian12-point", "debian-testing", "ubuntu-noble", "rocky9"],
)
def test_os_facts_match_ansible_facts_names(tmp_path, release, debian_version, expected):
    root = make_root(tmp_path, release, debian_version)
    facts = host_facts.os_facts(root, str(tmp_path / "sys"), uname=lambda: UNAME)
    got = tuple(
        facts[k]
        for k in (
            "distribution",
            "distribution_version",
            "distribution_major_version",
            "distribution_release",
            "os_family",
        )
    )
    assert got == expected
    assert (facts["kernel"], facts["architecture"]) == ("6.1.0-25-amd64", "x86_64")


# /proc/meminfo and /proc/cpuinfo as read on the Debian 12 VM this collection is developed on (2 AMD EPYC vCPUs,
# kernel 6.18, captured with cat on 2026-12-04): fixtures/proc-debian12-2cpu-epyc-vm/.
PROC_CAPTURE = Path(__file__).parent / "fixtures" / "proc-debian12-2cpu-epyc-vm"


def test_memory_and_cpus_from_a_real_proc_capture(tmp_path):
    root = make_root(tmp_path, DEBIAN12, "12.7\n")
    facts = host_facts.os_facts(root, str(tmp_path / "sys"), uname=lambda: UNAME, proc_root=str(PROC_CAPTURE))
    meminfo = (PROC_CAPTURE / "meminfo").read_text()
    assert meminfo.startswith("MemTotal:       24683792 kB\n")
    assert (facts["memtotal_mb"], facts["processor_vcpus"]) == (24683792 // 1024, 2)


@pytest.mark.parametrize(
    ("meminfo", "cpuinfo"),
    [("", ""), ("MemFree: 1 kB\n", "model name\t: AMD EPYC\n"), ("MemTotal: lots kB\n", "processor\t: x\n")],
    ids=["empty", "no-total-no-processor", "garbled"],
)
def test_memory_and_cpus_unknown_are_none_not_zero(meminfo, cpuinfo):
    assert host_facts.memtotal_mb(meminfo) is None
    assert host_facts.processor_count(cpuinfo) is None


def test_memory_and_cpus_missing_proc_files_read_as_none(tmp_path):
    facts = host_facts.os_facts(make_root(tmp_path, DEBIAN12), str(tmp_path / "sys"), uname=lambda: UNAME,
                                proc_root=str(tmp_path / "proc"))
    assert (facts["memtotal_mb"], facts["processor_vcpus"]) == (None, None)


def test_memory_and_cpus_of_this_controller_agree_with_the_os():
    facts = host_facts.os_facts()
    assert facts["processor_vcpus"] == os.cpu_count()
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert facts["memtotal_mb"] == pages // 1024 // 1024


def test_os_facts_on_this_controller_agree_with_os_release():
    facts = host_facts.os_facts()
    assert facts["kernel"] == os.uname().release
    assert facts["architecture"] == os.uname().machine
    assert facts["distribution"]  # whatever this machine runs, it has a name


@pytest.mark.parametrize(
    ("efi", "value", "expected"),
    [
        (False, None, False),
        (True, None, None),
        (True, b"\x06\x00\x00\x00\x01", True),
        (True, b"\x06\x00\x00\x00\x00", False),
    ],
    ids=["legacy-bios", "efi-unreadable", "enabled", "disabled"],
)
def test_secure_boot_from_efivarfs(tmp_path, efi, value, expected):
    sysfs = tmp_path / "sys"
    if efi:
        (sysfs / "firmware" / "efi" / "efivars").mkdir(parents=True)
    if value is not None:
        (sysfs / "firmware" / "efi" / "efivars" / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(value)
    assert host_facts.secure_boot_state(str(sysfs)) is expected


def test_free_space_measures_the_nearest_existing_parent(tmp_path):
    result = host_facts.free_space(str(tmp_path / "not" / "there" / "yet"))
    assert result["measured_at"] == str(tmp_path)
    assert result["error"] is None
    stats = os.statvfs(tmp_path)
    assert result["free_bytes"] == stats.f_bavail * stats.f_frsize


def test_free_space_error_is_reported_not_raised():
    def denied(_path):
        raise PermissionError(13, "Permission denied")

    result = host_facts.free_space("/srv/data", statvfs=denied)
    assert result["free_bytes"] is None
    assert "Permission denied" in result["error"]


def test_tcp_probe_refused_on_a_closed_loopback_port():
    with socket.socket() as sock:  # bind, never listen: a closed port that nothing else takes meanwhile
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        result = host_facts.tcp_probe("127.0.0.1", port, PROBE_SECONDS)
    assert result["reachable"] is False
    assert "ECONNREFUSED" in result["error"] or "refused" in result["error"].lower()
    assert result["seconds"] < PROBE_SECONDS


def test_tcp_probe_reaches_a_listening_loopback_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        result = host_facts.tcp_probe("127.0.0.1", server.getsockname()[1], 2)
    assert result["reachable"] is True
    assert result["error"] is None


def test_tcp_probe_timeout_is_bounded_and_capped():
    seen = {}

    def silent(address, timeout):
        seen["timeout"] = timeout
        raise socket.timeout("timed out")

    result = host_facts.tcp_probe("127.0.0.1", 2049, 3600, connect=silent)
    assert seen["timeout"] == host_facts.PROBE_TIMEOUT_MAX
    assert result["reachable"] is False
    assert result["error"] == f"no answer within {host_facts.PROBE_TIMEOUT_MAX:g} s"
