"""gpu_health_verdict: every bucket of the collection's Xid table gets its documented severity, NVIDIA's workflows
are followed, and each state, DCGM and missing-GPU check gives its finding."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_verdict as vd
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_events import map_gpus, parse_events
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import empty_state
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_xid_table import XID_TABLE

# the documented severity of each bucket when its Xid is alone on a GPU (module doc of gpu_health_verdict)
SEVERITY = {
    "IGNORE": None,
    "RESTART_APP": "degraded",
    "CHECK_UVM": "degraded",
    "UNKNOWN": "degraded",
    "RESET_GPU": "failed",
    "RESTART_BM": "failed",
    "RESTART_VM": "failed",
    "CONTACT_SUPPORT": "failed",
    "CHECK_MECHANICALS": "failed",
    "UPDATE_SWFW": "failed",
    "WORKFLOW_NVLINK_ERR": "failed",
    "WORKFLOW_NVLINK5_ERR": "failed",  # no Fatal/Nonfatal word in the line: failed
    "WORKFLOW_XID_45": "degraded",
    "WORKFLOW_XID_48": "failed",
    "XID_154": "degraded",  # no recovery action in the line
}
GPUS = [{"index": 0, "pci_bus_id": "00000000:01:00.0"}, {"index": 1, "pci_bus_id": "00000000:02:00.0"}]


def _findings(*lines: str) -> list:
    return vd.event_findings(map_gpus(parse_events(lines), GPUS))


@pytest.mark.parametrize("code", sorted(XID_TABLE))
def test_every_code_of_the_table_gets_its_buckets_severity(code):
    found = _findings(f"NVRM: Xid (PCI:0000:01:00): {code}, pid=1, name=x, something")
    bucket = XID_TABLE[code][1] or "UNKNOWN"
    assert [item["severity"] for item in found] == ([SEVERITY[bucket]] if SEVERITY[bucket] else [])
    for item in found:
        assert (item["gpu"], item["check"], item["action"]) == (0, "xid", bucket)


def test_xid_45_is_ignored_next_to_another_xid_on_the_same_gpu_only():
    found = _findings(
        "NVRM: Xid (PCI:0000:01:00): 62, 1 2 3",
        "NVRM: Xid (PCI:0000:01:00): 45, pid=1, Ch 00000008",
        "NVRM: Xid (PCI:0000:02:00): 45, pid=1, Ch 00000008",
    )
    assert [(item["gpu"], item["action"], item["step"]) for item in found] == [
        (0, "RESET_GPU", "RESET_GPU"),
        (1, "WORKFLOW_XID_45", "RESTART_FM"),
    ]


def test_xid_48_drains_and_resets_with_a_row_remap_event_else_resets():
    alone = _findings("NVRM: Xid (PCI:0000:01:00): 48, An uncorrectable double bit error")
    with_63 = _findings("NVRM: Xid (PCI:0000:01:00): 48, DBE", "NVRM: Xid (PCI:0000:01:00): 63, row remapping")
    assert [(item["severity"], item["step"]) for item in alone] == [("failed", "RESET_GPU")]
    assert [(item["severity"], item["step"]) for item in with_63] == [("failed", "DRAIN_AND_RESET")]


@pytest.mark.parametrize(
    ("recovery", "expected"),
    [
        ("None", []),
        ("Drain P2P", [("degraded", "DRAIN_P2P")]),
        ("Drain and Reset", [("failed", "DRAIN_AND_RESET")]),
        ("GPU Reset Required", [("failed", "RESET_GPU")]),
        ("Node Reboot Required", [("failed", "RESTART_BM")]),
        ("PF FLR", [("degraded", None)]),  # not one of the catalog's values: reported, not acted on
    ],
)
def test_xid_154_follows_the_recovery_action_it_prints(recovery, expected):
    found = _findings(
        f"NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 ({recovery})"
    )
    assert [(item["severity"], item["step"]) for item in found] == expected


def test_nvlink5_xids_by_the_fatality_they_print():
    found = _findings(
        "NVRM: Xid (PCI:0000:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2)",
        "NVRM: Xid (PCI:0000:02:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6)",
    )
    assert [(item["gpu"], item["severity"]) for item in found] == [(0, "degraded"), (1, "failed")]


def test_sxids_are_host_level_and_graded_by_the_line_and_nvsentinels_mapping():
    found = _findings(
        "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt",
        "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine instance 00",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 46 egress non-posted PRIV error",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack timeout",
    )
    assert [(item["gpu"], item["severity"], item["action"]) for item in found] == [
        (None, "degraded", "RESET_FABRIC"),
        (None, "failed", "RESET_GPU"),
    ]


def test_like_events_are_one_finding_with_a_count_and_an_unmapped_gpu_is_host_level():
    line = "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    found = _findings(line, line, line, "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    assert [(item["gpu"], item["check"], item["severity"], item["action"]) for item in found] == [
        (None, "xid", "failed", "RESTART_BM"),
        (None, "fallen_off_bus", "failed", "RESTART_BM"),
    ]
    assert " x3 on PCI 0000:3b:00, last at 1843.308145: " in found[0]["evidence"]


def _record(index=0, fabric=None, **state) -> dict:
    return {"index": index, "fabric": {"state": fabric}, "state": {**empty_state(), **state}}


# state -> the findings of a GPU in that state (check, severity, action)
STATE_CASES = [
    (
        {"ecc_uncorrectable_volatile": 2, "ecc_uncorrectable_aggregate": 5},
        [("ecc_dbe", "failed", "WORKFLOW_XID_48")],
    ),
    ({"ecc_uncorrectable_volatile": 0, "ecc_uncorrectable_aggregate": 5}, []),
    ({"row_remap_failure": True}, [("row_remap_failure", "failed", "CONTACT_SUPPORT")]),
    ({"row_remap_pending": True}, [("row_remap_pending", "degraded", "RESET_GPU")]),
    ({"retired_pages_pending": True}, [("retired_pages_pending", "degraded", "RESET_GPU")]),
    ({"throttle_thermal": True, "throttle_hw_slowdown": True}, [("throttle_thermal", "degraded", "INVESTIGATE")]),
    ({"throttle_power": True, "throttle_hw_slowdown": True}, [("throttle_power", "degraded", "INVESTIGATE")]),
    ({"throttle_hw_slowdown": True}, [("throttle_hw_slowdown", "degraded", "INVESTIGATE")]),
    ({"throttle_sw_power_cap": True, "gpu_idle": False}, []),
    ({"nvlink_replay_errors": 3, "nvlink_crc_errors": 0}, [("nvlink_errors", "degraded", "INVESTIGATE")]),
    ({"nvlink_links_active": [0, 1], "nvlink_links_down": [2]}, [("nvlink_down", "degraded", "INVESTIGATE")]),
    ({"nvlink_links_active": [], "nvlink_links_down": [0, 1, 2]}, []),  # a PCIe card without a bridge
    ({"pcie_width_current": 8, "pcie_width_max": 16}, [("pcie_degraded", "degraded", "CHECK_MECHANICALS")]),
    ({"pcie_gen_current": 1, "pcie_gen_max": 5, "gpu_idle": True}, []),  # an idle GPU slows its link
    (
        {"pcie_gen_current": 3, "pcie_gen_max": 5, "gpu_idle": False},
        [("pcie_degraded", "degraded", "CHECK_MECHANICALS")],
    ),
    ({"persistence_mode": False}, [("persistence_off", "degraded", "INVESTIGATE")]),
    ({"persistence_mode": None}, []),
]


@pytest.mark.parametrize(("state", "expected"), STATE_CASES)
def test_state_checks(state, expected):
    assert [
        (item["check"], item["severity"], item["action"]) for item in vd.state_findings(_record(**state))
    ] == expected


def test_checks_are_every_check_the_verdict_makes():
    """CHECKS, the names health_action_overrides may give (plugin_utils/health.py), are exactly the checks the verdict
    makes in STATE_CASES, the missing-GPU check and DCGM's: a new state check tested there but not added to CHECKS
    fails here, as does a name in CHECKS that no case sees the verdict make."""
    made = {check for _state, expected in STATE_CASES for check, _severity, _action in expected}
    assert made | {"gpu_missing", "dcgm_diag"} == set(vd.CHECKS)
    assert len(vd.CHECKS) == len(set(vd.CHECKS))


def test_links_down_count_in_an_nvswitch_fabric_even_with_none_up():
    record = _record(fabric="Completed", nvlink_links_active=[], nvlink_links_down=list(range(18)))
    assert [item["check"] for item in vd.state_findings(record)] == ["nvlink_down"]


def test_missing_gpus_name_the_devices_the_driver_does_not_list():
    pci = [{"pci_bus_id": "00000000:01:00.0"}, {"pci_bus_id": "00000000:02:00.0"}]
    (found,) = vd.missing_findings(2, GPUS[:1], True, pci)
    assert (found["gpu"], found["check"], found["severity"], found["action"]) == (
        None,
        "gpu_missing",
        "failed",
        "RESTART_BM",
    )
    assert "expected 2 GPUs (expected_gpus), the driver lists 1" in found["evidence"]
    assert "['00000000:02:00.0']" in found["evidence"]
    assert vd.missing_findings(2, GPUS, True, pci) == []
    assert vd.missing_findings(2, [], False, pci) == []  # state not read: no claim about missing GPUs
    assert vd.missing_findings(None, [], True, pci) == []


def test_dcgm_fail_and_warn_land_on_their_gpus():
    results = [
        {"category": "Custom", "test": "software", "gpus": [1], "status": "fail", "warnings": ["bad"], "info": []},
        {"category": "Deployment", "test": "Inforom", "gpus": [0, 1], "status": "warn", "warnings": [], "info": []},
        {"category": "Custom", "test": "software", "gpus": [0], "status": "pass", "warnings": [], "info": []},
    ]
    found = vd.dcgm_findings({"level": 1, "results": results}, {0, 1})
    assert [(item["gpu"], item["severity"], item["action"]) for item in found] == [
        (1, "failed", "CONTACT_SUPPORT"),
        (0, "degraded", "INVESTIGATE"),
        (1, "degraded", "INVESTIGATE"),
    ]
    assert found[0]["evidence"] == "DCGM diag level 1 Custom software: FAIL (bad)"


def test_worst_verdict():
    assert vd.worst([]) == "healthy"
    assert vd.worst(["degraded", "healthy"]) == "degraded"
    assert vd.worst(["degraded", "failed", "healthy"]) == "failed"


def test_a_lone_sxid_continuation_first_does_not_hide_a_fatal_header_after_it():
    """Issue 36: the group's first line is a continuation with no header before it (fatal unknown); the Fatal
    header later in the text still makes the SXid failed."""
    found = _findings(
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Data {0x00000000, 0x00000000}",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack timeout",
    )
    assert [(item["gpu"], item["severity"], item["action"]) for item in found] == [(None, "failed", "RESET_GPU")]
    assert " x2 " in found[0]["evidence"]


def test_the_sheets_other_xid_45_and_154_rows_follow_the_same_workflows():
    """NVIDIA's resolution-buckets sheet (../shared/data/xid/resolution-buckets.csv) spells Xid 45's workflow a
    second way and has an XID_154_EVAL row; the health plan asks this module for their steps too."""
    solo = "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)"
    assert vd.xid_judgement(solo, {45}, None, None) == ("degraded", "RESTART_FM")
    assert vd.xid_judgement(solo, {45, 62}, None, None) == (None, "IGNORE")
    assert vd.xid_judgement("XID_154_EVAL", {119}, None, None) == ("degraded", "RESTART_APP")
    assert vd.xid_judgement("XID_154_EVAL", {119, 154}, "Node Reboot Required", None) == ("failed", "RESTART_BM")
