"""gpu_health_events: real kernel-log lines (tests/unit/kernel_log_samples.py, each with its source) give the
right event, and lines that are not events give none."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_events as ev
from kernel_log_samples import DEVELOPMENT, HELD_OUT, Sample


def _id(sample: Sample) -> str:
    return f"{sample.kind or 'none'}-{sample.code}-{sample.line[:40]}"


@pytest.mark.parametrize("sample", DEVELOPMENT + HELD_OUT, ids=_id)
def test_real_line_gives_its_event_or_none(sample: Sample) -> None:
    events = ev.parse_events(sample.line.splitlines())
    if sample.kind is None:
        assert events == [], f"not an event ({sample.source}), got {events}"
        return
    assert len(events) == 1, f"one event expected ({sample.source}), got {events}"
    event = events[0]
    assert (event["kind"], event["code"], event["pci"], event["immediate_action"]) == (
        sample.kind,
        sample.code,
        sample.pci,
        sample.action,
    ), sample.source
    assert event["line"] == sample.line.splitlines()[-1].strip()


def test_every_format_is_covered_by_real_lines() -> None:
    """The samples hold each format the parser claims: with and without PCI:, with and without pid=/name=,
    dmesg seconds, dmesg -T, journal, ISO prefixes, SXid, and both fallen-off-the-bus forms."""
    lines = [sample.line for sample in DEVELOPMENT + HELD_OUT if sample.kind]
    checks = {
        "PCI:": any("Xid (PCI:" in line for line in lines),
        "no PCI:": any("Xid (0000:" in line for line in lines),
        "pid=/name=": any("pid=" in line and "name=" in line for line in lines),
        "no pid": any("Xid (" in line and "pid=" not in line for line in lines),
        "dmesg seconds": any(line.startswith("[ ") or line[:2].strip("[").isdigit() for line in lines),
        "dmesg -T": any(line.startswith("[Fri ") for line in lines),
        "journal": any(" kernel: NVRM" in line for line in lines),
        "sxid": any("SXid" in line for line in lines),
        "fallen multi-line": any("\n" in line and "fallen off" in line for line in lines),
        "fallen one line": any("NVRM: GPU 0000" in line and "fallen off" in line for line in lines),
    }
    assert all(checks.values()), checks


def test_a_line_is_at_most_one_event_and_xid_79_is_an_xid_only() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
    ]
    assert [event["kind"] for event in ev.parse_events(lines)] == ["xid", "fallen_off_bus"]


def test_time_stamps_as_printed() -> None:
    stamps = {
        "[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, x": "1843.308145",
        "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, x": "Fri Aug 30 11:43:09 2024",
        "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:01:00): 31, x": "May 15 08:57:36",
        "2024-11-14T07:00:14+0000 node kernel: NVRM: Xid (PCI:0000:01:00): 31, x": "2024-11-14T07:00:14+0000",
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, x": None,
    }
    assert {line: ev.parse_line(line)["time"] for line in stamps} == stamps


def test_fields_beyond_the_interface() -> None:
    fatal = ev.parse_line("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x0)")
    nonfatal = ev.parse_line("NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)")
    recovery = ev.parse_line(
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    sxid = ev.parse_line("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 10003, Fatal, Link 11 something")
    assert (fatal["fatal"], nonfatal["fatal"]) == (True, False)
    assert recovery["recovery_action"] == "Node Reboot Required"
    assert (sxid["fatal"], sxid["immediate_action"], sxid["action_source"]) == (
        True,
        "RESET_FABRIC",
        "nvsentinel-sxid-mapping",
    )


def test_codes_outside_the_catalog_or_without_an_action_are_unknown() -> None:
    unlisted = ev.parse_line("NVRM: Xid (PCI:0000:01:00): 999, something new")
    no_action = ev.parse_line("NVRM: Xid (PCI:0000:01:00): 167, PCIE_FATAL_TIMEOUT")
    unknown_sxid = ev.parse_line("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 99999, Non-fatal, x")
    assert [item["immediate_action"] for item in (unlisted, no_action, unknown_sxid)] == ["UNKNOWN"] * 3
    assert (unlisted["mnemonic"], no_action["mnemonic"]) == (None, "PCIE_FATAL_TIMEOUT")
    assert unlisted["action_source"] is None


def test_pci_addresses_map_to_gpu_indexes_in_any_form() -> None:
    gpus = [{"index": 0, "pci_bus_id": "00000000:18:00.0"}, {"index": 1, "pci_bus_id": "00000019:01:00.0"}]
    events = ev.parse_events(
        [
            "NVRM: Xid (PCI:0000:18:00): 13, x",
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0",
            "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "nvidia-nvswitch0: SXid (PCI:0000:18:00.0): 10003, Fatal, Link 11",
        ]
    )
    assert [event["gpu"] for event in ev.map_gpus(events, gpus)] == [0, 1, None, None]


# The three lines of one SXid, as NVIDIA/nvtrust issue 124 shows them (tests/unit/kernel_log_samples.py; the Data
# line's list shortened)
_SXID_HEADER = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt"
_SXID_SEVERITY = (
    "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00"
)
_SXID_DATA = "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000}"


def test_sxid_continuation_lines_after_their_header_are_part_of_it() -> None:
    events = ev.parse_events([_SXID_HEADER, _SXID_SEVERITY, _SXID_DATA])
    assert [(event["code"], event["line"], event["fatal"]) for event in events] == [(22013, _SXID_HEADER, False)]


@pytest.mark.parametrize("lone", [_SXID_SEVERITY, _SXID_DATA], ids=["severity", "data"])
def test_a_lone_sxid_continuation_line_is_an_event_of_its_own(lone: str) -> None:
    """Issue 36: the header was rotated or filtered out of the text read; the SXid must still be seen."""
    events = ev.parse_events(["[ 1.0] NVRM: loading NVIDIA UNIX Open Kernel Module", lone])
    assert [(event["kind"], event["code"], event["pci"], event["fatal"], event["line"]) for event in events] == [
        ("sxid", 22013, "0000:04:00.0", None, lone)
    ]


def test_a_continuation_belongs_only_to_a_header_of_the_same_device_and_code() -> None:
    other_device = _SXID_HEADER.replace("nvswitch3: SXid (PCI:0000:04:00.0)", "nvswitch1: SXid (PCI:0000:84:00.0)")
    other_code = _SXID_HEADER.replace("22013", "12028")
    events = ev.parse_events([other_device, other_code, _SXID_SEVERITY, _SXID_HEADER, _SXID_DATA])
    assert [(event["code"], event["pci"], event["line"]) for event in events] == [
        (22013, "0000:84:00.0", other_device),
        (12028, "0000:04:00.0", other_code),
        (22013, "0000:04:00.0", _SXID_SEVERITY),
        (22013, "0000:04:00.0", _SXID_HEADER),
    ]
