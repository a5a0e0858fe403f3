"""burnin judgements over real all_reduce_perf outputs and NCCL_DEBUG=INFO lines (fixtures/nccl/SOURCES.md):
the transport NCCL used, single-node verdicts against validate.expected_busbw, the pair schedule, and the fleet
judgement on recorded pair matrices (slow node, suspect link, TCP fallback on an RDMA fabric)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin as B
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import expected_busbw
from conftest import shared_path

NCCL = Path(__file__).resolve().parent / "fixtures" / "nccl"
MATRICES = yaml.safe_load((NCCL / "pair_matrices.yml").read_text(encoding="utf-8"))


def capture(name: str) -> str:
    return (NCCL / name).read_text(encoding="utf-8")


def run(output: str, info: str | None = None, rc: int = 0) -> dict:
    return {"rc": rc, "stdout": capture(output) + (capture(info) if info else ""), "stderr": ""}


# capture -> (network NCCL used, intra-node paths seen)
TRANSPORTS = {
    "info_ib-ext-gdrdma_p2p-cumem_2node-h100_nccl1357.txt": ("IB", ["P2P"]),
    "info_ib-gdrdma_p2p_2node_nccl429.txt": ("IB", ["P2P"]),
    "info_ib-init_and_socket-init_2node_nccl-tests29.txt": ("IB", []),  # Socket init lines too: IB still wins
    "info_socket-fallback_roce-cluster_areal639.txt": ("Socket", []),
    "info_no-libibverbs_socket_t4_nccl428.txt": ("Socket", []),
    "info_socket-send_shm_2node_nccl-tests166.txt": ("Socket", ["SHM"]),
    "info_nvls_3node-h100_nccl1453.txt": (None, ["NVLS"]),
    "h100-pcie_x2_nvlink_nccl1161_EXCERPT.txt": (None, ["P2P"]),
}


@pytest.mark.parametrize("name", sorted(TRANSPORTS))
def test_transport_from_real_info_lines(name: str) -> None:
    network, intra = TRANSPORTS[name]
    found = B.transport(capture(name))
    assert found["network"] == network
    assert found["intra"] == intra
    if network:
        assert found["evidence"]
        assert found["evidence"] in capture(name)


def test_transport_hints_name_the_missing_verbs_library() -> None:
    found = B.transport(capture("info_no-libibverbs_socket_t4_nccl428.txt"))
    assert found["evidence"].endswith("Using network Socket")
    assert any("libibverbs" in h for h in found["hints"])


def test_single_node_pcie_gen3_without_p2p_is_below_the_pcie_floor() -> None:
    """2 x RTX 2080 Ti on PCIe Gen3, P2P not supported (the source's topo -p2p says NS): 4.00 GB/s."""
    expected = expected_busbw(None, [0, 1], pcie_gen=3)
    verdict = B.judge_node("autodl", capture("rtx2080ti_x2_pcie-gen3_no-p2p_autodl.txt"), 0, expected)
    assert verdict["status"] == "failed"
    assert verdict["measured"] == 4.0  # noqa: PLR2004
    assert verdict["expected"] == 15.75  # noqa: PLR2004
    assert "PCIe Gen3 x16" in verdict["detail"]
    # The same run judged as Gen3 with the floor at what it measured would pass: the floor decides, not the path.
    assert B.judge_node("autodl", capture("rtx2080ti_x2_pcie-gen3_no-p2p_autodl.txt"), 0,
                        {**expected, "floor": 4.0})["status"] == "ok"


def test_single_node_nvlink_pair_against_a_real_nv12_topology() -> None:
    """2 x H100 PCIe with NVLink bridges (NVIDIA/nccl#1161, ~116 GB/s) against what an NV12 pair should give
    (the real 2 x A100 NV12 capture): below the NVLink floor, as the issue reports."""
    topo = parse_topology(shared_path("nvidia-smi", "topo", "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK.txt")
                          .read_text(encoding="utf-8"))
    expected = expected_busbw(topo, [0, 1])
    verdict = B.judge_node("h100-pcie", capture("h100-pcie_x2_nvlink_nccl1161_EXCERPT.txt"), 0, expected)
    assert verdict["path"] == "NVLink (NV12 per pair)"
    assert verdict["measured"] == 115.93  # noqa: PLR2004
    assert verdict["status"] == "failed"
    assert verdict["transport"]["intra"] == ["P2P"]


def test_single_node_that_did_not_run() -> None:
    verdict = B.judge_node("n1", "bash: ./build/all_reduce_perf: No such file or directory", 127,
                           expected_busbw(None, [0, 1]))
    assert verdict["status"] == "failed"
    assert "did not run (exit 127)" in verdict["detail"]


@pytest.mark.parametrize(("found", "planned"), [(7, 8), (0, 8), (8, 4)])
def test_a_node_with_other_gpus_than_the_plan_holds_fails_naming_both(found: int, planned: int) -> None:
    """A GPU lost since preflight: the node fails, naming what was found and planned, even where its run passed."""
    text = capture("rtx2080ti_x2_pcie-gen3_no-p2p_autodl.txt")
    expected = {**expected_busbw(None, [0, 1], pcie_gen=3), "floor": 4.0}
    assert B.judge_node("n1", text, 0, expected, gpus=(planned, planned))["status"] == "ok"
    verdict = B.judge_node("n1", text, 0, expected, gpus=(found, planned))
    assert verdict["status"] == "failed"
    assert verdict["detail"].startswith(f"{found} GPUs found, the plan holds {planned} (gpuops_plan.hosts.n1.")


@pytest.mark.parametrize("count", range(9))
def test_pair_schedule_pairs_each_node_with_two_others(count: int) -> None:
    nodes = [f"n{i}" for i in range(count)]
    pairs = B.pair_schedule(list(reversed(nodes)))
    assert pairs == B.pair_schedule(nodes), "deterministic, whatever the input order"
    assert len({tuple(p) for p in pairs}) == len(pairs)
    for node in nodes:
        partners = {p[0] if p[1] == node else p[1] for p in pairs if node in p}
        assert len(partners) >= min(2, count - 1)
        if count >= 5:  # noqa: PLR2004
            assert len(partners) == 4  # noqa: PLR2004
    if count == 4:  # noqa: PLR2004
        assert len(pairs) == 6  # noqa: PLR2004


def _matrix(name: str, **options) -> dict:
    matrix = MATRICES[name]
    pairs = {}
    for pair in B.pair_schedule(matrix["nodes"]):
        spec = matrix["pairs"].get(",".join(pair), matrix["default"])
        pairs[",".join(pair)] = run(spec["output"], spec.get("info"))
    assert set(matrix["pairs"]) <= set(pairs), "a matrix names only scheduled pairs"
    return B.judge_fleet([], pairs, {"rdma": matrix["rdma"], **options})


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_recorded_pair_matrices(name: str) -> None:
    report = _matrix(name)
    expect = MATRICES[name]["expect"]
    assert report["status"] == "failed"
    assert report["slow_nodes"] == expect["slow_nodes"]
    assert report["suspect_links"] == expect["suspect_links"]
    assert report["tcp_fallback"] == expect.get("tcp_fallback", [])
    assert report["expected_gbps"] == 338.8  # noqa: PLR2004  (median of the pairs: the healthy A3 Mega run)


def test_slow_node_is_ranked_first_with_measured_and_expected() -> None:
    report = _matrix("slow_node")
    first = report["nodes"][0]
    assert first["node"] == "gpu-c"
    assert first["status"] == "slow"
    assert first["pair_mean"] == 41.5  # noqa: PLR2004
    assert first["pair_expected"] == 338.8  # noqa: PLR2004
    assert all(n["status"] == "ok" for n in report["nodes"][1:])
    slow_pairs = [p for p in report["pairs"] if p["status"] == "slow"]
    assert report["pairs"][:4] == slow_pairs
    assert all("gpu-c" in p["pair"] for p in slow_pairs)
    assert slow_pairs[0]["floor"] == 237.2  # noqa: PLR2004
    assert any(f.startswith("slow node gpu-c") for f in report["findings"])


def test_absolute_expectation_from_the_inventory() -> None:
    report = _matrix("suspect_link", expected_gbps=400)
    assert report["expected_gbps"] == 400  # noqa: PLR2004
    assert report["expected_source"] == "burnin_pair_expected_busbw"
    # 338.8 GB/s is below 70% of 400? No (280): healthy pairs stay ok, the 41.5 GB/s link is still suspect.
    assert report["suspect_links"] == [["gpu-d", "gpu-e"]]


def test_tcp_fallback_fails_with_reason_and_fix() -> None:
    # The HCAs in the fix are those of the nodes' topology (training_jobs.nccl_env): mlx5_0 and mlx5_1 here.
    nics = parse_topology(shared_path("nvidia-smi", "topo", "a10x4_pcie_sys_2nic.txt").read_text(encoding="utf-8"))
    report = _matrix("tcp_fallback", platform="kubernetes", topologies=[nics])
    row = next(p for p in report["pairs"] if p["pair"] == ["gpu-a", "gpu-c"])
    assert row["status"] == "tcp_fallback"
    assert row["network"] == "Socket"
    for text in ("NET/Socket", "InfiniBand/RoCE", "NCCL_IB_HCA==mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME",
                 "RDMA device plugin", "via NET/Socket/0"):
        assert text in row["detail"], text
    compose = _matrix("tcp_fallback")
    detail = next(p for p in compose["pairs"] if p["status"] == "tcp_fallback")["detail"]
    assert "--device /dev/infiniband" in detail


def test_sockets_on_a_fabric_without_rdma_are_not_a_fallback() -> None:
    report = _matrix("tcp_fallback", rdma=False)
    assert report["tcp_fallback"] == []
    assert report["status"] == "ok"


def test_every_pair_slow_blames_no_node() -> None:
    slow = "h100_1gpu-per-node_2node_ib-4nic_tree_nccl-tests232_EXCERPT.txt"
    pairs = {",".join(p): run(slow) for p in B.pair_schedule(["a", "b", "c", "d"])}
    report = B.judge_fleet([], pairs, {"expected_gbps": 100})
    assert report["slow_nodes"] == []
    assert report["status"] == "failed"
    assert any("fabric-wide" in f for f in report["findings"])


def test_a_pair_that_did_not_run_is_a_suspect_link_with_the_error() -> None:
    good = "h100x8_2node_gcp-a3mega_tcpxo.txt"
    pairs = {",".join(p): run(good) for p in B.pair_schedule(["a", "b", "c", "d", "e"])}
    pairs["a,b"] = {"rc": 1, "stdout": "", "stderr": "ssh: connect to host b port 2222: Connection refused"}
    report = B.judge_fleet([], pairs, {})
    assert report["suspect_links"] == [["a", "b"]]
    row = report["pairs"][0]
    assert row["status"] == "failed"
    assert row["measured"] is None
    assert "Connection refused" in row["detail"]
