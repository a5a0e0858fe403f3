"""gpu_health_state: each GPU's health state through gpu_facts' backends -- real ``nvidia-smi -q`` captures
(../shared/data/nvidia-smi/query, read in place), real ``nvlink -s``/``nvlink -e`` outputs, and the pynvml stand-in."""

from __future__ import annotations

import csv

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_state as hs
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import GpuFactsError
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import parse_nvidia_smi_nvlink
from conftest import shared_path
from fake_pynvml import ERRORS, FakeGpu, make_fake_pynvml
from gpu_facts_helpers import Commands, no_pynvml

H100_HGX = "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt"
HEALTHY_IDLE = {
    "ecc_uncorrectable_volatile": 0,
    "ecc_uncorrectable_aggregate": 0,
    "row_remap_pending": False,
    "row_remap_failure": False,
    "retired_pages_pending": None,  # "N/A" on A100 and newer (row remapping replaced page retirement)
    "gpu_idle": True,
    "throttle_thermal": False,
    "throttle_power": False,
    "throttle_sw_power_cap": False,
    "throttle_hw_slowdown": False,
    "nvlink_crc_errors": None,
    "nvlink_replay_errors": None,
    "nvlink_recovery_errors": None,
    "nvlink_links_active": None,
    "nvlink_links_down": None,
    "persistence_mode": True,
}

# `nvidia-smi nvlink -e` on a GB300, as posted in https://github.com/NVIDIA/srt-slurm/pull/307 (header without UUID)
NVLINK_ERRORS_GB300 = (
    "GPU 0: NVIDIA GB300\n\t Link 0: Replay Errors: 0\n\t Link 0: Recovery Errors: 0\n\t Link 0: CRC Errors: 0\n"
)
# `nvidia-smi nvlink -s` on a GB200, as posted in https://github.com/NVIDIA/k8s-test-infra/issues/371 (first GPU)
NVLINK_STATUS_GB200 = "GPU 0: NVIDIA GB200 (UUID: GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde)\n" + "".join(
    f"         Link {link}: 53.125 GB/s\n" for link in range(18)
)


@pytest.mark.parametrize(
    ("name", "count", "pcie", "differs"),
    [
        (H100_HGX, 8, (5, 5, 16, 16), {}),
        # GPU 9E of this real A100 board has a correctable row remap waiting for a reset (Pending: Yes)
        ("a100-sxm4-80gb-x4_nvidia-smi-q.txt", 4, (4, 4, 16, 16), {"00000000:9E:00.0": {"row_remap_pending": True}}),
        ("h100-nvl-x2_nvidia-smi-q.txt", 2, (5, 5, 16, 16), {}),
    ],
)
def test_real_captures_read_every_state_field(capture, name, count, pcie, differs):
    records = hs.parse_health_q(capture("query", name).read_text())
    assert len(records) == count
    for record in records:
        state = record["state"]
        expected = {**HEALTHY_IDLE, **differs.get(record["pci_bus_id"], {})}
        assert {key: state[key] for key in HEALTHY_IDLE} == expected, record["pci_bus_id"]
        assert (
            state["pcie_gen_current"],
            state["pcie_gen_max"],
            state["pcie_width_current"],
            state["pcie_width_max"],
        ) == pcie


def test_older_driver_capture_with_throttle_reasons_and_na_ecc(capture):
    """R525 prints "Clocks Throttle Reasons" and N/A ECC counters (ECC off): read as reasons, and null counts."""
    (record,) = hs.parse_health_q(capture("query", "h800-sxm_x8_nvidia-smi-q-i0_fabric-completed.txt").read_text())
    state = record["state"]
    assert (state["ecc_uncorrectable_volatile"], state["ecc_uncorrectable_aggregate"]) == (None, None)
    assert (state["gpu_idle"], state["throttle_thermal"], state["row_remap_pending"]) == (True, False, False)
    assert record["fabric"]["state"] == "Completed"


def _edited(text: str, replacements: dict) -> str:
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def test_a_failing_gpu_in_a_real_capture(capture):
    """The first GPU of the HGX capture, edited as a failing GPU prints itself: every field follows the text."""
    text = _edited(
        capture("query", H100_HGX).read_text(),
        {
            "DRAM Uncorrectable            : 0": "DRAM Uncorrectable            : 2",
            "Pending                           : No": "Pending                           : Yes",
            "HW Thermal Slowdown           : Not Active": "HW Thermal Slowdown           : Active",
            "Idle                              : Active": "Idle                              : Not Active",
            "Current                   : 16x": "Current                   : 8x",
            "Persistence Mode                      : Enabled": "Persistence Mode                      : Disabled",
        },
    )
    state = hs.parse_health_q(text)[0]["state"]
    assert (state["ecc_uncorrectable_volatile"], state["row_remap_pending"], state["throttle_thermal"]) == (
        2,
        True,
        True,
    )
    assert (state["gpu_idle"], state["pcie_width_current"], state["persistence_mode"]) == (False, 8, False)


def test_pre_r470_double_bit_layout_is_summed():
    section = {"Single Bit": {"Device Memory": "3", "Total": "3"}, "Double Bit": {"Device Memory": "1", "Total": "1"}}
    assert hs._sum_uncorrectable(section) == 1
    assert (
        hs._sum_uncorrectable(
            {
                "SRAM Uncorrectable Parity": "1",
                "SRAM Uncorrectable SEC-DED": "2",
                "DRAM Uncorrectable": "4",
                "SRAM Correctable": "9",
            }
        )
        == 1 + 2 + 4
    )
    assert hs._sum_uncorrectable({"DRAM Uncorrectable": "N/A"}) is None


def test_nvlink_outputs_fill_the_link_fields():
    records = [{"index": 0, "uuid": "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde", "state": hs.empty_state()}]
    down = 5
    status = NVLINK_STATUS_GB200.replace(f"Link {down}: 53.125 GB/s", f"Link {down}: <inactive>")
    hs.add_nvlink(records, status, NVLINK_ERRORS_GB300)
    state = records[0]["state"]
    assert state["nvlink_links_down"] == [down]
    assert state["nvlink_links_active"] == [link for link in range(18) if link != down]
    assert (state["nvlink_crc_errors"], state["nvlink_replay_errors"], state["nvlink_recovery_errors"]) == (0, 0, 0)
    assert parse_nvidia_smi_nvlink(NVLINK_ERRORS_GB300) == [
        {"index": 0, "uuid": None, "said_none": False, "links": {}, "counters": {"replay": 0, "recovery": 0, "crc": 0}}
    ]


def test_nvidia_smi_backend_runs_three_commands_once():
    text = "Driver Version : 565.57.01\nAttached GPUs : 1\nGPU 00000000:18:00.0\n    Persistence Mode : Enabled\n"
    commands = Commands(
        {"nvidia-smi -q": (0, text, ""), "nvidia-smi nvlink -s": (0, "", ""), "nvidia-smi nvlink -e": (3, "", "no")}
    )
    state = hs.gather_state("nvidia-smi", commands.run, commands.which)
    assert commands.ran == ["nvidia-smi -q", "nvidia-smi nvlink -s", "nvidia-smi nvlink -e"]
    assert any("nvlink -e' exited 3" in note for note in state["notes"])
    # this -q shows no counter at all: the backend answered, but no error counter was read
    assert (state["source"], state["read_ok"], len(state["gpus"])) == ("nvidia-smi", False, 1)
    assert state["gpus"][0]["unread"] == list(hs.COUNTERS)
    assert any(note.startswith("GPU 0: ecc_uncorrectable_volatile, ") for note in state["notes"])


def test_nvml_backend_reads_every_field_in_the_facts_session():
    sick = FakeGpu(
        bus_id="00000000:18:00.0",
        nvlink_states=[1, 1, 0, 1],
        nvlink_errors={(0, 2): 3, (1, 1): 1, (1, 3): 2},
        ecc_uncorrected=(2, 5),
        remapped_rows=(0, 1, 1, 0),
        clock_reasons=0x8 | 0x40,
        pcie=(3, 5, 8, 16),
        persistence=0,
    )
    nvml = make_fake_pynvml([sick, FakeGpu(bus_id="00000000:2A:00.0", ecc_uncorrected=None, pcie=None)])
    state = hs.gather_state("auto", Commands().run, Commands().which, nvml_loader=lambda: nvml)
    assert (state["source"], state["read_ok"], state["warnings"]) == ("nvml", True, [])
    first, second = (gpu["state"] for gpu in state["gpus"])
    assert first == {
        "ecc_uncorrectable_volatile": 2,
        "ecc_uncorrectable_aggregate": 5,
        "row_remap_pending": True,
        "row_remap_failure": False,
        "retired_pages_pending": None,
        "gpu_idle": False,
        "throttle_thermal": True,
        "throttle_power": False,
        "throttle_sw_power_cap": False,
        "throttle_hw_slowdown": True,
        "nvlink_crc_errors": 5,
        "nvlink_replay_errors": 0,
        "nvlink_recovery_errors": 1,
        "nvlink_links_active": [0, 1, 3],
        "nvlink_links_down": [2],
        "pcie_gen_current": 3,
        "pcie_gen_max": 5,
        "pcie_width_current": 8,
        "pcie_width_max": 16,
        "persistence_mode": False,
    }
    assert (second["ecc_uncorrectable_volatile"], second["pcie_width_max"], second["nvlink_links_down"]) == (
        None,
        None,
        None,
    )
    assert nvml.calls.count("nvmlInit") == 1  # one NVML session for facts and health
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 2 * nvml.NVML_NVLINK_MAX_LINKS  # one walk per GPU


def test_auto_falls_back_to_nvidia_smi_then_reports_unread():
    commands = Commands(binaries=())
    state = hs.gather_state("auto", commands.run, commands.which, nvml_loader=no_pynvml)
    assert (state["source"], state["read_ok"], state["gpus"]) == ("none", False, [])
    assert [note.split(":")[0] for note in state["notes"]] == ["nvml", "nvidia-smi"]


def test_a_named_backend_that_cannot_answer_fails():
    with pytest.raises(GpuFactsError, match="backend nvml cannot answer"):
        hs.gather_state("nvml", Commands().run, Commands().which, nvml_loader=no_pynvml)


# --------------------------------------------------------------------------- not supported is not unread (issue 36)
# The H200 capture set (../shared/data/nvidia-smi/h200-driver580/SOURCES.md: one H200, driver 580.159.04, recorded
# 2026-12-04): NVML answers NotSupported for the pending page retirement (pynvml-probe.txt), nvidia-smi prints N/A
# (q-health.txt, q.txt) and [N/A] (query.csv). Row remapping replaces page retirement on A100 and newer.
H200 = ("nvidia-smi", "h200-driver580")


def _h200_nvml():
    """pynvml as pynvml-probe.txt shows it on the H200: retired pages NotSupported, no remapped row, GPU idle."""
    h200 = FakeGpu(
        name="NVIDIA H200",
        bus_id="00000000:00:06.0",
        memory_total_bytes=143771 * 1024 * 1024,
        retired_pages_pending=None,
        remapped_rows=(0, 0, 0, 0),
        ecc_uncorrected=(0, 0),
        clock_reasons=0x1,
    )
    return make_fake_pynvml([h200], driver_version="580.159.04", cuda_version=13000)


@pytest.mark.parametrize("name", ["q-health.txt", "q.txt"])
def test_h200_nvidia_smi_retired_pages_na_is_not_supported_and_read_ok(name):
    text = shared_path(*H200, name).read_text()
    state = hs.gather_state("auto", Commands().run, Commands().which, state_text=text)
    (gpu,) = state["gpus"]
    assert "retired_pages_pending" in gpu["not_supported"]
    assert gpu["state"]["retired_pages_pending"] is None
    assert (gpu["unread"], state["read_ok"]) == ([], True)
    assert {key: gpu["state"][key] for key in hs.COUNTERS if key != "retired_pages_pending"} == {
        "ecc_uncorrectable_volatile": 0,
        "ecc_uncorrectable_aggregate": 0,
        "row_remap_pending": False,
        "row_remap_failure": False,
    }


def test_h200_query_csv_na_is_what_nvidia_smi_prints_for_not_supported():
    """The query CSV's `[N/A]` and -q's `N/A` are the same answer: not supported (the health path reads -q)."""
    with shared_path(*H200, "query.csv").open(newline="") as handle:
        (row,) = list(csv.DictReader(handle, skipinitialspace=True))
    assert hs.smi_not_supported(row["retired_pages.pending"])
    assert [hs.smi_not_supported(row[key]) for key in ("remapped_rows.pending", "remapped_rows.failure")] == [
        False,
        False,
    ]
    assert not any(hs.smi_not_supported(value) for value in ("0", "No", "", "None", None))


def test_h200_nvml_not_supported_retired_pages_leaves_read_ok_true_and_agrees_with_nvidia_smi():
    nvml = hs.gather_state("nvml", Commands().run, Commands().which, nvml_loader=_h200_nvml)
    text = shared_path(*H200, "q-health.txt").read_text()
    smi = hs.gather_state("auto", Commands().run, Commands().which, state_text=text)
    (by_nvml,), (by_smi,) = nvml["gpus"], smi["gpus"]
    assert (nvml["read_ok"], nvml["warnings"], by_nvml["unread"]) == (True, [], [])
    assert "retired_pages_pending" in by_nvml["not_supported"]
    counters = set(hs.COUNTERS)
    assert counters & set(by_nvml["not_supported"]) == counters & set(by_smi["not_supported"])
    assert {key: by_nvml["state"][key] for key in counters} == {key: by_smi["state"][key] for key in counters}


def test_an_nvml_error_other_than_not_supported_is_unread_and_read_ok_false():
    broken = FakeGpu(errors={"nvmlDeviceGetRemappedRows": ERRORS["NVMLError_Unknown"]})
    state = hs.gather_state("nvml", Commands().run, Commands().which, nvml_loader=lambda: make_fake_pynvml([broken]))
    (gpu,) = state["gpus"]
    assert (state["read_ok"], gpu["unread"]) == (False, ["row_remap_pending", "row_remap_failure"])
    assert "row_remap_pending" not in gpu["not_supported"]
    assert any("nvmlDeviceGetRemappedRows" in warning for warning in state["warnings"])


def test_a_gpu_nvml_gives_no_handle_for_is_listed_with_every_counter_unread():
    lost = FakeGpu(errors={"nvmlDeviceGetHandleByIndex": ERRORS["NVMLError_GpuIsLost"]})
    state = hs.gather_state("nvml", Commands().run, Commands().which, nvml_loader=lambda: make_fake_pynvml([lost]))
    (gpu,) = state["gpus"]
    assert (state["read_ok"], gpu["unread"], gpu["not_supported"]) == (False, list(hs.COUNTERS), [])
    assert gpu["state"] == hs.empty_state()


def test_a_gpu_without_nvlink_and_with_ecc_off_has_those_keys_not_supported():
    """NVML answers NotSupported for ECC when ECC is off (FakeGpu ecc_uncorrected=None); no NVLink answers."""
    plain = FakeGpu(ecc_uncorrected=None, nvlink_states=[])
    state = hs.gather_state("nvml", Commands().run, Commands().which, nvml_loader=lambda: make_fake_pynvml([plain]))
    (gpu,) = state["gpus"]
    assert (state["read_ok"], gpu["unread"]) == (True, [])
    assert {"ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "nvlink_links_active"} <= set(
        gpu["not_supported"]
    )


def test_h800_capture_with_ecc_na_reports_ecc_not_supported(capture):
    """R525 on an H800 with ECC off prints N/A for every ECC counter: not supported, so still read_ok."""
    text = capture("query", "h800-sxm_x8_nvidia-smi-q-i0_fabric-completed.txt").read_text()
    state = hs.gather_state("auto", Commands().run, Commands().which, state_text=text)
    (gpu,) = state["gpus"]
    assert {"ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "retired_pages_pending"} <= set(
        gpu["not_supported"]
    )
    assert (gpu["unread"], state["read_ok"]) == ([], True)


def test_a_garbled_counter_in_nvidia_smi_q_is_unread():
    text = _edited(
        shared_path(*H200, "q-health.txt").read_text(),
        {"Remapping Failure Occurred                     : No": "Remapping Failure Occurred : ???"},
    )
    state = hs.gather_state("auto", Commands().run, Commands().which, state_text=text)
    assert (state["read_ok"], state["gpus"][0]["unread"]) == (False, ["row_remap_failure"])


def test_h200_sweep_is_healthy_with_page_retirement_not_supported():
    """The whole sweep on the H200's -q (the live run's finding: healthy, every counter read but page retirement)."""
    text = shared_path(*H200, "q-health.txt").read_text()
    result = gpu_health.sweep(Commands().run, Commands().which, kernel_log_text="", dcgm_level=0, state_text=text)
    (gpu,) = result["gpus"]
    assert (result["read_ok"], result["verdict"], gpu["unread"]) == (True, "healthy", [])
    assert "retired_pages_pending" in gpu["not_supported"]
