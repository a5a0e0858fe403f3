"""The acceptance thresholds table (plugins/plugin_utils/gpu_models.yml, thresholds.py) over real recorded outputs:
nccl-tests (fixtures/nccl/SOURCES.md and ../shared/data/nvidia-smi/h200-driver580/SOURCES.md), nvbandwidth
(fixtures/membw/SOURCES.md) and nvidia-smi -q (h200-driver580): pass, fail, an unknown model, the figures the
sources publish, operator overrides, and docs/thresholds.md equal to the data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import parse_health_q
from ansible_collections.gpuops.cluster.plugins.plugin_utils import thresholds as T
from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin_membw import GPU_MODELS, parse_nvbandwidth
from fleet_fixture import shared_path

HERE = Path(__file__).resolve().parent
NCCL = HERE / "fixtures" / "nccl"
MEMBW = HERE / "fixtures" / "membw"
DOC = HERE.parents[3] / "docs" / "thresholds.md"


def shared(name: str) -> str:
    return shared_path("nvidia-smi", "h200-driver580", name).read_text(encoding="utf-8")


def fixture(folder: Path, name: str) -> str:
    return (folder / name).read_text(encoding="utf-8")


def by_check(verdict: dict) -> dict:
    return {c["check"]: c for c in verdict["checks"]}


def test_h200_host_with_no_row_remaps_passes_against_azures_h200_row() -> None:
    """nvidia-smi -q of the recorded H200 (driver 580): no remap pending or failed, PASS, cited."""
    records = parse_health_q(shared("q.txt"))
    assert [r["name"] for r in records] == ["NVIDIA H200"]
    verdict = T.judge(records[0]["name"], T.measure(health=records), gpu_count=len(records))
    assert verdict["model"] == "H200 SXM"
    assert (verdict["status"], verdict["exit_code"]) == ("PASS", 0)
    checks = by_check(verdict)
    assert sorted(checks) == ["row_remap_failure", "row_remap_pending"]  # no NVLink on this VM: not measured
    for check in checks.values():
        assert (check["status"], check["measured"], check["threshold"]) == ("PASS", 0, 0)
        assert check["source"] == "azure_nd_h200_v5"
        assert check["url"].endswith("/conf/nd96isr_h200_v5.conf")


def test_h200_one_gpu_nccl_run_is_not_judged_against_an_eight_gpu_figure() -> None:
    """The recorded 1-GPU all_reduce_perf (bus bandwidth 0 by definition): UNKNOWN, not FAIL and never PASS."""
    measured = T.measure(nccl=shared("nccl-tests-all_reduce_perf-g1.txt"))
    assert measured == {"values": {"nccl_busbw_gbps": 0.0}, "errors": {}}
    for count in (1, None):
        verdict = T.judge("NVIDIA H200", measured, gpu_count=count)
        check = by_check(verdict)["nccl_busbw_gbps"]
        assert (verdict["status"], check["status"], check["threshold"]) == ("UNKNOWN", "UNKNOWN", 431)
        assert "the figure is for 8 GPUs (azure_nd_h200_v5)" in check["detail"]
    assert T.judge("NVIDIA H200", measured, gpu_count=1)["exit_code"] == 1


def test_a100_nvbandwidth_run_that_asserted_fails_gpu_to_gpu() -> None:
    """nvbandwidth issue 34: device_to_device_memcpy_read_ce on 8 x A100-SXM4-80GB hit its data check and printed
    no result: FAIL against the NDm A100 v4 figure, naming the assert; host<->device was not run, so not judged."""
    text = fixture(MEMBW, "a100x8_d2d_read_ce_assert_nvbandwidth34.txt")
    name = parse_nvbandwidth(text)["devices"][0]
    verdict = T.judge(name, T.measure(nvbandwidth=text), gpu_count=8)
    assert (verdict["model"], verdict["status"], verdict["exit_code"]) == ("A100 80GB SXM", "FAIL", 2)
    check = by_check(verdict)["gpu_gpu_gbps"]
    assert list(by_check(verdict)) == ["gpu_gpu_gbps"]
    assert (check["threshold"], check["measured"], check["source"]) == (238, None, "azure_ndm_a100_v4")
    assert check["detail"].startswith("nvbandwidth printed no device_to_device_memcpy_read_ce result: ASSERT in")


def test_unknown_model_is_unknown_with_its_measured_value() -> None:
    """2 x RTX 2080 Ti all_reduce_perf (peak 4.00 GB/s): no row, UNKNOWN, the measurement still reported."""
    measured = T.measure(nccl=fixture(NCCL, "rtx2080ti_x2_pcie-gen3_no-p2p_autodl.txt"))
    verdict = T.judge("NVIDIA GeForce RTX 2080 Ti", measured, gpu_count=2)
    check = by_check(verdict)["nccl_busbw_gbps"]
    assert (verdict["model"], verdict["status"], verdict["exit_code"]) == (None, "UNKNOWN", 1)
    assert (check["status"], check["measured"], check["threshold"], check["source"]) == ("UNKNOWN", 4.0, None, None)
    assert check["detail"].startswith("GPU model not in the thresholds table")


def test_unknown_model_with_clean_counters_is_never_pass() -> None:
    records = parse_health_q(shared("q.txt"))
    verdict = T.judge("NVIDIA H20-3e", T.measure(health=records))
    assert verdict["status"] == "UNKNOWN"
    assert {c["status"] for c in verdict["checks"]} == {"UNKNOWN"}


def test_nothing_measured_is_unknown() -> None:
    """The H20-3e run printed only device_local_copy, a testcase no check reads: nothing judged, UNKNOWN."""
    text = fixture(MEMBW, "h20-3e_x8_device_local_copy_nvbandwidth48_EXCERPT.txt")
    verdict = T.judge("NVIDIA H100 80GB HBM3", T.measure(nvbandwidth=text), gpu_count=8)
    assert (verdict["checks"], verdict["status"]) == ([], "UNKNOWN")


@pytest.mark.parametrize(("override", "status"), [(None, "UNKNOWN"), (150, "FAIL"), (100, "PASS")])
def test_operator_override_judges_a_model_without_a_published_figure(override, status: str) -> None:
    """2 x H100 PCIe with NVLink bridges (NCCL issue 1161, ~116 GB/s): no published figure for H100 PCIe; the
    operator's figure is merged over the row and cited as theirs."""
    measured = T.measure(nccl=fixture(NCCL, "h100-pcie_x2_nvlink_nccl1161_EXCERPT.txt"))
    overrides = {"nccl_busbw_gbps": override} if override else None
    check = by_check(T.judge("NVIDIA H100 PCIe", measured, overrides=overrides, gpu_count=2))["nccl_busbw_gbps"]
    assert (check["status"], check["measured"]) == (status, 115.93)
    if override:
        assert (check["threshold"], check["source"], check["url"]) == (override, "operator override", None)


def test_override_replaces_a_published_figure_and_drops_its_gpu_count() -> None:
    measured = T.measure(nccl=shared("nccl-tests-all_reduce_perf-g1.txt"))
    check = by_check(T.judge("NVIDIA H200", measured, overrides={"nccl_busbw_gbps": 0}, gpu_count=1))
    assert (check["nccl_busbw_gbps"]["status"], check["nccl_busbw_gbps"]["source"]) == ("PASS", "operator override")


def test_override_of_a_check_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="'nccl_busbw' is not a check; allowed: nccl_busbw_gbps"):
        T.judge("NVIDIA H200", {"values": {}}, overrides={"nccl_busbw": 400})


@pytest.mark.parametrize(("counters", "expected"), [
    ({"host_device_gbps": 47.9}, "FAIL"), ({"host_device_gbps": 49.0}, "WARN"), ({"host_device_gbps": 55.3}, "PASS"),
    ({"pcie_replays_per_min": 31}, "PASS"), ({"pcie_replays_per_min": 32}, "WARN"),
    ({"sram_correctable": 10000}, "PASS"), ({"sram_correctable": 10001}, "FAIL"), ({"sram_uncorrectable": 1}, "FAIL"),
])
def test_bounds_as_the_sources_define_them(counters: dict, expected: str) -> None:
    """Azure's nvbandwidth check warns within 5% above its figure; DCGM's PCIe replay rate is a warning; Azure's
    SRAM checks fail past their figure."""
    verdict = T.judge("NVIDIA H100 80GB HBM3", {"values": counters}, gpu_count=8)
    assert [c["status"] for c in verdict["checks"]] == [expected]
    assert verdict["status"] == expected


def test_nvbandwidth_peer_matrix_leaves_out_the_diagonal() -> None:
    """nvbandwidth's README prints 0.00 on a write matrix's diagonal, newer versions N/A: neither is a pair."""
    assert T._gpu_gpu([0.0, 276.07, 276.19, 0.0]) == pytest.approx(276.07)
    assert T._gpu_gpu([None, 276.07, 276.19, None]) == pytest.approx(276.07)


def test_the_figures_the_issue_quotes_are_the_table() -> None:
    """Issue 38 quotes Azure's ND H100 v5 / H200 v5 checks; the table holds exactly those, cited."""
    rows = {row["model"]: row.get("acceptance") or {} for row in GPU_MODELS["models"]}
    for model, nccl in (("H100 SXM", 460), ("H200 SXM", 431)):
        got = {check: entry["value"] for check, entry in rows[model].items()}
        assert got == {"nccl_busbw_gbps": nccl, "host_device_gbps": 48, "gpu_gpu_gbps": 335, "row_remap_pending": 0,
                       "row_remap_failure": 0, "sram_uncorrectable": 0, "sram_correctable": 10000,
                       "nvlink_inactive": 0, "pcie_replays_per_min": 31}
    assert {"A100 40GB SXM", "A100 80GB SXM", "B200"} <= set(rows)
    assert "host_device_gbps" not in rows["B200"]  # not published: UNKNOWN


def test_every_entry_names_a_known_check_and_a_cited_source() -> None:
    sources = GPU_MODELS["sources"]
    assert all(s["url"].startswith("https://") and s["says"] for s in sources.values())
    used = set()
    for row in GPU_MODELS["models"]:
        assert row["hbm_source"] in sources
        used.add(row["hbm_source"])
        for check, entry in (row.get("acceptance") or {}).items():
            assert check in T.CHECKS, (row["model"], check)
            assert entry["source"] in sources, (row["model"], check)
            assert isinstance(entry["value"], int | float)
            assert set(entry) <= {"value", "source", "gpus", "warn_within", "exceed"}
            used.add(entry["source"])
    assert set(sources) - used == {"azure_checks"}  # cited by the doc for what every Azure figure means


def _cell(check: str, entry: dict | None) -> str:
    if entry is None:
        return "—"
    marks = [f"{entry['gpus']} GPUs"] if entry.get("gpus") else []
    marks += [f"warn below +{float(entry['warn_within']):.0%}"] if entry.get("warn_within") else []
    marks += ["warn above"] if entry.get("exceed") == "warn" else []
    bound = "≥" if T.CHECKS[check][0] == "min" else "≤"
    return f"{bound} {entry['value']:g}" + (f" ({', '.join(marks)})" if marks else "") + f" [{entry['source']}]"


def markdown_table() -> str:
    """The table as docs/thresholds.md shows it: one row per model, one column per check, then the sources."""
    lines = ["| model | " + " | ".join(f"`{c}` ({T.CHECKS[c][1]})" for c in T.CHECKS) + " |",
             "|---" * (len(T.CHECKS) + 1) + "|"]
    for model in GPU_MODELS["models"]:
        acceptance = model.get("acceptance") or {}
        cells = [_cell(c, acceptance.get(c)) for c in T.CHECKS]
        lines.append(f"| {model['model']} | " + " | ".join(cells) + " |")
    lines += ["", "| source | what it says |", "|---|---|"]
    for key, source in GPU_MODELS["sources"].items():
        lines.append(f"| [{key}]({source['url']}) | {' '.join(source['says'].split())} |")
    return "\n".join(lines) + "\n"


def test_the_doc_shows_the_table_as_the_data_has_it() -> None:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- table: test_thresholds\.markdown_table\(\) -->\n(.*?)<!-- end of table -->", text, re.S)
    assert found, f"{DOC} lost its table markers"
    assert found.group(1) == markdown_table(), (
        "docs/thresholds.md differs from gpu_models.yml: paste test_thresholds.markdown_table() between the markers")
