"""burnin's memory-bandwidth test over real nvbandwidth outputs (fixtures/membw/SOURCES.md): the parse, the HBM
peak of each model, the judgement (read+write = 2 x the copy figure against the peak, a floor share), the skip
when nvbandwidth is absent, and the result in the node's verdict and the burn-in report."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.burnin import burnin_node, burnin_report
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin as B
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin_membw as M
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import expected_busbw

MEMBW = Path(__file__).resolve().parent / "fixtures" / "membw"
NCCL = Path(__file__).resolve().parent / "fixtures" / "nccl"
H20 = "h20-3e_x8_device_local_copy_nvbandwidth48_EXCERPT.txt"
H100 = "h100x8_device_local_copy_smol-playbook_EXCERPT.txt"
A100_ASSERT = "a100x8_d2d_read_ce_assert_nvbandwidth34.txt"
H100_NAMES = ["NVIDIA H100 80GB HBM3"] * 8


def capture(name: str) -> str:
    return (MEMBW / name).read_text(encoding="utf-8")


def run(name: str, rc: int = 0) -> dict:
    return {"rc": rc, "stdout": capture(name), "stderr": ""}


def test_parse_the_h20_run_with_its_devices_and_sum() -> None:
    parsed = M.parse_nvbandwidth(capture(H20))
    assert parsed["version"] == "v0.8"
    assert parsed["devices"] == dict.fromkeys(range(8), "NVIDIA H20-3e")
    result = parsed["results"]["device_local_copy"]
    assert result["title"] == "memcpy local GPU(column) bandwidth (GB/s)"
    assert result["values"] == [1116.30, 1116.30, 1115.72, 1116.16, 1116.16, 1116.88, 1117.17, 1116.30]
    assert sum(result["values"]) == pytest.approx(result["sum"], abs=0.01)  # the SUM line nvbandwidth printed
    assert parsed["errors"] == []


def test_parse_a_matrix_shown_without_its_running_line() -> None:
    parsed = M.parse_nvbandwidth(capture(H100))
    assert list(parsed["results"]) == ["device_local_copy"]
    assert len(parsed["results"]["device_local_copy"]["values"]) == 8  # noqa: PLR2004
    assert parsed["results"]["device_local_copy"]["sum"] is None


def test_parse_a_failed_run_keeps_the_assert() -> None:
    parsed = M.parse_nvbandwidth(capture(A100_ASSERT))
    assert parsed["results"] == {}
    assert parsed["devices"][7] == "NVIDIA A100-SXM4-80GB"
    assert any(line.startswith("ASSERT in expression h_errorFlag == 0") for line in parsed["errors"])


@pytest.mark.parametrize(("name", "model", "peak"), [
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM", 1555.0), ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 1555.0),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935.0), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2039.0),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350.0), ("NVIDIA H100 PCIe", "H100 PCIe", 2000.0),
    ("NVIDIA H100 NVL", "H100 NVL", 3900.0), ("NVIDIA H200", "H200 SXM", 4800.0),
    ("NVIDIA H200 NVL", "H200 NVL", 4800.0),
    ("NVIDIA B200", "B200", 8000.0),
])
def test_hbm_peak_by_model_name(name: str, model: str, peak: float) -> None:
    assert M.expected_membw(name) == {"model": model, "peak_gbps": peak}


@pytest.mark.parametrize("name", ["NVIDIA H20", "NVIDIA H20-3e", "NVIDIA H800", "Tesla T4", ""])
def test_models_not_in_the_table_have_no_peak(name: str) -> None:
    assert M.expected_membw(name) is None


def test_h100_copy_at_1519_gbps_is_91_percent_of_its_hbm_peak() -> None:
    """1519 GB/s copied = 3038 GB/s read+write of H100 SXM's 3350: ok at the default floor (0.7)."""
    result = M.judge_membw("hgx-01", run(H100), H100_NAMES)
    assert result["status"] == "ok"
    assert result["measured_gbps"] == pytest.approx(2 * 1518.86, abs=0.1)  # the lowest GPU, read+write
    assert result["expected_gbps"] == 3350.0  # noqa: PLR2004
    assert {g["share"] for g in result["gpus"]} == {0.907}
    assert "GPU 5" in result["detail"]


def test_a_floor_above_what_the_gpus_reach_fails_the_node() -> None:
    assert M.judge_membw("hgx-01", run(H100), H100_NAMES, {"floor": 0.90})["status"] == "ok"
    result = M.judge_membw("hgx-01", run(H100), H100_NAMES, {"floor": 0.91})
    assert result["status"] == "failed"
    assert result["detail"].startswith("memory bandwidth below 91% of the model's HBM peak")
    assert "GPU 0 3038.1 GB/s of 3350.0 GB/s (91%)" in result["detail"]


def test_a_model_without_a_peak_is_skipped_with_its_measurement() -> None:
    result = M.judge_membw("sglang-host", run(H20), ["NVIDIA H20-3e"] * 8)
    assert result["status"] == "skipped"
    assert "no expected memory bandwidth for NVIDIA H20-3e" in result["detail"]
    assert "2231.4 GB/s" in result["detail"]
    assert "burnin_membw_expected_gbps" in result["detail"]


def test_h20_3e_against_the_reporters_4_8_tbs_is_below_half() -> None:
    """nvbandwidth issue 48: ~1116 GB/s copied (2.2 TB/s read+write) where the reporter expected 4.8 TB/s."""
    result = M.judge_membw("sglang-host", run(H20), ["NVIDIA H20-3e"] * 8, {"expected_gbps": 4800})
    assert result["status"] == "failed"
    assert result["detail"].startswith("memory bandwidth below 70% of burnin_membw_expected_gbps")
    assert all(g["status"] == "slow" and g["share"] == pytest.approx(0.465, abs=0.001) for g in result["gpus"])


def test_a_run_without_result_fails_with_its_error_line() -> None:
    result = M.judge_membw("dgx-a100", run(A100_ASSERT, rc=134), ["NVIDIA A100-SXM4-80GB"] * 8)
    assert result["status"] == "failed"
    assert "(exit 134)" in result["detail"]
    assert "ASSERT in expression h_errorFlag == 0" in result["detail"]


def test_no_nvbandwidth_is_skipped_never_ok() -> None:
    result = M.judge_membw("n1", {"skipped": True, "changed": False}, H100_NAMES, {"binary": "/opt/nvbw/nvbandwidth"})
    assert result["status"] == "skipped"
    assert result["detail"].startswith("skipped: nvbandwidth not found (/opt/nvbw/nvbandwidth;")
    assert M.judge_membw("n1", None, H100_NAMES)["detail"].startswith("skipped: nvbandwidth not found")


def test_fewer_gpus_measured_than_the_node_has_fails() -> None:
    result = M.judge_membw("hgx-01", run(H100), [*H100_NAMES, "NVIDIA H100 80GB HBM3"])
    assert result["status"] == "failed"
    assert result["detail"] == "nvbandwidth measured 8 of the node's 9 GPUs"


def test_the_node_filter_judges_its_nvbandwidth_run() -> None:
    gpu = {"count": 8, "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(8)]}
    config = {"burnin_membw_floor": "0.7", "burnin_membw_expected_gbps": "0",
              "burnin_nvbandwidth": "/opt/nvbw/nvbandwidth"}
    node = burnin_node({"skipped": True}, node="hgx-01", gpu=gpu, config=config, nvbandwidth=run(H100))
    assert node["membw"]["status"] == "ok", node["membw"]["detail"]
    assert burnin_node({"skipped": True}, node="hgx-01", gpu=gpu, config=config)["membw"]["detail"].startswith(
        "skipped: nvbandwidth not found (/opt/nvbw/nvbandwidth;")


def test_the_report_judges_each_node_from_its_runs_and_says_why_a_run_is_missing() -> None:
    """burnin_report judges the nodes it is given (burnin_node over each node's runs): a Compose node with one GPU
    or no all_reduce_perf is skipped with the reason, a Kubernetes node whose Job left no log is failed."""
    gpu = {"count": 8, "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(8)], "topology": None}
    config = {"burnin_membw_floor": 0.7, "burnin_nvbandwidth": "", "socket_ifname": "=ens1f0"}
    one = {"node": "one", "gpu": {**gpu, "count": 1, "gpus": gpu["gpus"][:1]}, "run": {"skipped": True}}
    nodes = [one, {"node": "hgx-01", "gpu": gpu, "run": None, "nvbandwidth": run(H100)}]
    singles = {s["node"]: s for s in burnin_report({}, nodes=nodes, config=config)["singles"]}
    assert singles["one"]["status"] == "skipped"
    assert singles["one"]["detail"].startswith("one GPU: all_reduce_perf has nothing to reduce across")
    assert singles["hgx-01"]["detail"] == "no all_reduce_perf: not in PATH, and burnin_tools_build is false"
    assert singles["hgx-01"]["membw"]["status"] == "ok"
    kube = burnin_report({}, nodes=nodes[1:], config=config, platform="kubernetes")["singles"][0]
    assert kube["status"] == "failed"
    assert "no Job ran" in kube["detail"]


def test_the_pair_expectation_and_floor_are_the_settings_as_given() -> None:
    """The role hands burnin_report its settings by their names (_burnin_config), -e strings included."""
    report = burnin_report({}, nodes=[], config={"burnin_pair_expected_busbw": "180", "burnin_pair_floor": "0.8"})
    assert (report["expected_gbps"], report["expected_source"], report["floor_share"]) == (
        180.0, "burnin_pair_expected_busbw", 0.8)
    assert burnin_report({}, nodes=[], config={"burnin_pair_expected_busbw": "0"})["expected_gbps"] is None


def _single(membw: dict | None) -> dict:
    """A node whose single-node all_reduce_perf passed (2 x H100 PCIe over NVLink, nccl issue 1161)."""
    text = (NCCL / "h100-pcie_x2_nvlink_nccl1161_EXCERPT.txt").read_text(encoding="utf-8")
    return B.judge_node("hgx-01", text, 0, expected_busbw(None, [0, 1], pcie_gen=5), membw=membw)


def test_memory_bandwidth_in_the_node_verdict_and_the_report() -> None:
    skipped = M.judge_membw("hgx-01", {"skipped": True}, H100_NAMES)
    failed = M.judge_membw("hgx-01", run(H100), H100_NAMES, {"expected_gbps": 4800})
    base = _single(None)
    assert base["membw"]["status"] == "not run"
    assert _single(skipped)["status"] == base["status"]  # a skip does not decide the node
    node = _single(failed)
    assert node["status"] == "failed"
    assert node["detail"].startswith("memory bandwidth: memory bandwidth below 70% of burnin_membw_expected_gbps")
    report = B.judge_fleet([node], {}, {})
    assert report["status"] == "failed"
    assert any(f.startswith("hgx-01 single-node: memory bandwidth:") for f in report["findings"])
    assert report["nodes"][0]["membw"]["measured_gbps"] == pytest.approx(3037.7)
    assert "| failed 3037.7/4800.0 |" in B.markdown(report)
    text = B.markdown(B.judge_fleet([_single(skipped)], {}, {}))
    assert "| skipped: nvbandwidth not found (nvbandwidth in PATH; set burnin_nvbandwidth to its path) |" in text
