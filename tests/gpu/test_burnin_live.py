"""burnin's per-node judgements on a real GPU host, for what runs without network: the memory-bandwidth test
(nvbandwidth ``device_local_copy`` against the GPU model's HBM peak) and the single-node all_reduce_perf.

Skipped, with the reason, where there is no GPU (no ``nvidia-smi`` in PATH, or NVML cannot initialise), where
``nvbandwidth`` or ``all_reduce_perf`` is not in PATH, and (the nccl judgement) on a node with one GPU: nothing
to all-reduce across. Set ``GPUOPS_LIVE_OUT=<dir>`` to keep each raw output and its judgement for review.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin as B
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin_membw as M
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import expected_busbw, parse_all_reduce

from .live import keep, listed_nonempty, run
from .test_gpu_facts_live import NO_NVML

pytestmark = pytest.mark.skipif(NO_NVML is not None, reason=str(NO_NVML))
NVBANDWIDTH = shutil.which("nvbandwidth")
ALL_REDUCE = shutil.which("all_reduce_perf")


def execute(argv: list[str], **env: str) -> dict:
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C", **env), timeout=600, check=False
    )
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


@pytest.fixture(scope="module")
def gpus() -> list[dict]:
    facts, warnings = gf.gather_gpu_facts(backend="nvml", run=run, which=shutil.which)
    assert warnings == [], warnings
    assert facts["gpus"], "NVML initialised but listed no GPU"
    return listed_nonempty(facts["gpus"], "GPU from NVML")


@pytest.mark.skipif(NVBANDWIDTH is None, reason="no nvbandwidth in PATH: the memory-bandwidth test is not installed")
def test_memory_bandwidth_of_every_gpu_against_its_hbm_peak(gpus: list[dict]) -> None:
    result = execute([str(NVBANDWIDTH), "-t", M.TESTCASE], CUDA_DEVICE_ORDER="PCI_BUS_ID")
    keep("nvbandwidth_device_local_copy.txt", result["stdout"] + result["stderr"])
    names = [g["name"] for g in gpus]
    verdict = M.judge_membw("localhost", result, names)
    keep("burnin_membw.json", verdict)
    assert result["rc"] == 0, verdict["detail"]
    assert len(listed_nonempty(verdict["gpus"], "GPU judged by nvbandwidth")) == len(gpus), verdict["detail"]
    assert all(g["copy_gbps"] and g["copy_gbps"] > 0 for g in verdict["gpus"]), verdict["gpus"]
    if all(M.expected_membw(name) for name in names):
        assert verdict["status"] == "ok", verdict["detail"]
    else:  # a model without a datasheet peak in the table: measured and reported as skipped, with the reason
        assert verdict["status"] == "skipped", verdict["detail"]
        assert "no expected memory bandwidth" in verdict["detail"]


def _all_reduce(count: int) -> dict:
    result = execute(
        [str(ALL_REDUCE), "-b", "8M", "-e", "1G", "-f", "2", "-g", str(count)],
        NCCL_DEBUG="INFO",
        NCCL_DEBUG_SUBSYS="INIT,NET",
    )
    keep(f"all_reduce_perf_g{count}.txt", result["stdout"] + result["stderr"])
    return result


@pytest.mark.skipif(ALL_REDUCE is None, reason="no all_reduce_perf (nccl-tests) in PATH")
def test_all_reduce_perf_runs_with_no_wrong_result(gpus: list[dict]) -> None:
    result = _all_reduce(len(gpus))
    parsed = parse_all_reduce(result["stdout"])
    assert result["rc"] == 0, result["stderr"][-2000:]
    assert parsed["rows"], result["stdout"][-2000:]
    assert parsed["wrong"] == 0


@pytest.mark.skipif(ALL_REDUCE is None, reason="no all_reduce_perf (nccl-tests) in PATH")
def test_single_node_judgement_against_the_nodes_links(gpus: list[dict]) -> None:
    if len(gpus) < 2:  # noqa: PLR2004
        pytest.skip(f"{len(gpus)} GPU: nothing to all-reduce across, no bus bandwidth to judge")
    rc, matrix, err = run(["nvidia-smi", "topo", "-m"])
    assert rc == 0, err
    expected = expected_busbw(parse_topology(matrix), list(range(len(gpus))), pcie_gen=4)
    result = _all_reduce(len(gpus))
    verdict = B.judge_node("localhost", result["stdout"] + result["stderr"], result["rc"], expected)
    keep("burnin_node.json", verdict)
    assert verdict["status"] == "ok", verdict["detail"]
