"""burn-in's results as PASS, WARN, FAIL or UNKNOWN (thresholds.py's statuses, one mapping to gpuops-run's exit
codes), over real recordings: nccl-tests all_reduce_perf outputs and pair matrices (fixtures/nccl/SOURCES.md), the
H200's 1-GPU all_reduce_perf and nvidia-smi -q (../shared/data/nvidia-smi/h200-driver580/SOURCES.md), nvbandwidth
(fixtures/membw/SOURCES.md). And what burn-in builds on a node (burnin_jobs.tools) from the tools probe's answer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.burnin import burnin_node, burnin_report
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import parse_health_q
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin as B
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin_jobs as J
from ansible_collections.gpuops.cluster.plugins.plugin_utils import thresholds as T
from fleet_fixture import shared_path

HERE = Path(__file__).resolve().parent
NCCL = HERE / "fixtures" / "nccl"
MATRICES = yaml.safe_load((NCCL / "pair_matrices.yml").read_text(encoding="utf-8"))


def _pairs(name: str, healthy: bool = False) -> dict:
    """The recorded pair runs of a matrix; healthy: every pair gets the matrix's default (healthy) run."""
    matrix = MATRICES[name]
    pairs = {}
    for pair in B.pair_schedule(matrix["nodes"]):
        spec = matrix["default"] if healthy else matrix["pairs"].get(",".join(pair), matrix["default"])
        text = "".join((NCCL / spec[k]).read_text(encoding="utf-8") for k in ("output", "info") if k in spec)
        pairs[",".join(pair)] = {"rc": 0, "stdout": text, "stderr": ""}
    return pairs


def _h200(name: str) -> str:
    return shared_path("nvidia-smi", "h200-driver580", name).read_text(encoding="utf-8")


def test_words_of_the_older_judgements_map_to_the_four_statuses() -> None:
    assert [T.status_of(w) for w in ("ok", "healthy", "degraded", "failed", "slow", "tcp_fallback", "skipped",
                                     "not run", "unjudged", None)] == \
        ["PASS", "PASS", "WARN", "FAIL", "FAIL", "FAIL", "UNKNOWN", "UNKNOWN", "UNKNOWN", "UNKNOWN"]
    assert T.worst(["PASS", "UNKNOWN", "PASS"]) == "UNKNOWN"
    assert T.worst(["PASS", "WARN", "UNKNOWN"]) == "WARN"
    assert T.worst(["WARN", "FAIL", "PASS"]) == "FAIL"
    assert (T.worst([]), T.worst(["PASS"])) == ("UNKNOWN", "PASS")
    assert T.EXIT_CODES == {"PASS": 0, "WARN": 1, "UNKNOWN": 1, "FAIL": 2}


def test_healthy_pairs_pass_and_a_slow_node_fails_with_exit_2() -> None:
    passed = B.judge_fleet([], _pairs("slow_node", healthy=True), {"rdma": True})
    assert (passed["status"], passed["verdict"], passed["exit_code"]) == ("ok", "PASS", 0)
    assert len(passed["checks"]) == 12  # noqa: PLR2004 -- the 12 scheduled pairs of 6 nodes
    assert {(c["check"], c["status"]) for c in passed["checks"]} == {("pair_busbw", "PASS")}
    failed = B.judge_fleet([], _pairs("slow_node"), {"rdma": True})
    assert (failed["status"], failed["verdict"], failed["exit_code"]) == ("failed", "FAIL", 2)
    bad = sorted(c["node"] for c in failed["checks"] if c["status"] == "FAIL")
    assert bad == ["gpu-a-gpu-c", "gpu-b-gpu-c", "gpu-c-gpu-d", "gpu-c-gpu-e"]


def test_one_gpu_h200_is_unknown_never_pass() -> None:
    """The recorded H200 (one GPU): the single-node run skipped (nothing to reduce across), gpu_health healthy with
    its real GPU state, no nvbandwidth: row remaps PASS against Azure's H200 row, the rest UNKNOWN, exit 1."""
    records = parse_health_q(_h200("q.txt"))
    health = {"verdict": "healthy", "findings": [], "gpus": records}
    single = burnin_node({"skipped": True, "skip_reason": "one GPU: nothing to reduce across"}, node="h200",
                         gpu={"count": 1, "gpus": [{"index": 0, "name": "NVIDIA H200"}]}, health=health)
    assert (single["status"], single["measured"], single["detail"]) == \
        ("skipped", None, "one GPU: nothing to reduce across")
    report = B.judge_fleet([single], {}, {})
    statuses = {c["check"]: c["status"] for c in report["checks"]}
    assert statuses == {"health": "PASS", "single_node_busbw": "UNKNOWN", "memory_bandwidth": "UNKNOWN",
                        "row_remap_pending": "PASS", "row_remap_failure": "PASS"}
    assert (report["status"], report["verdict"], report["exit_code"]) == ("ok", "UNKNOWN", 1)


def test_a_node_that_lost_a_gpu_since_the_plan_fails_the_run_with_exit_2() -> None:
    """The plan's GPU count reaches the judgement (burnin_report's nodes[].planned): one H200 found of two planned."""
    node = {"node": "h200", "gpu": {"count": 1, "gpus": [{"index": 0, "name": "NVIDIA H200"}]}, "planned": 2}
    report = burnin_report({}, nodes=[node])
    assert (report["status"], report["verdict"], report["exit_code"]) == ("failed", "FAIL", 2)
    assert report["findings"][0].startswith("h200 single-node: 1 GPUs found, the plan holds 2 ")
    assert burnin_report({}, nodes=[{**node, "planned": 1}])["verdict"] != "FAIL"


def test_the_thresholds_table_fails_a_node_the_path_expectation_passes() -> None:
    """A100 x8 nvbandwidth whose device_to_device read asserted (NVIDIA/nvbandwidth#34, recorded): the GPU<->GPU
    check has no result and FAILs, and so do the node and the run."""
    nvb = (HERE / "fixtures" / "membw" / "a100x8_d2d_read_ce_assert_nvbandwidth34.txt").read_text(encoding="utf-8")
    gpu = {"count": 8, "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB"} for i in range(8)]}
    single = burnin_node({"skipped": True, "skip_reason": "no all_reduce_perf"}, node="a100", gpu=gpu,
                         nvbandwidth={"rc": 1, "stdout": nvb, "stderr": ""})
    report = B.judge_fleet([single], {}, {})
    [check] = [c for c in report["checks"] if c["check"] == "gpu_gpu_gbps"]
    assert check["status"] == "FAIL"
    assert "nvbandwidth printed no device_to_device_memcpy_read_ce result" in check["detail"]
    assert (report["status"], report["verdict"], report["exit_code"]) == ("failed", "FAIL", 2)
    assert any(f.startswith("a100 gpu_gpu_gbps FAIL: ") for f in report["findings"])


def test_an_operator_override_that_is_no_check_is_refused_naming_the_checks() -> None:
    with pytest.raises(Exception, match="burnin_thresholds: thresholds override 'busbw' is not a check; allowed: "):
        burnin_node({"skipped": True}, node="n", gpu={"count": 8, "gpus": [{"index": 0, "name": "NVIDIA H200"}]},
                    config={"burnin_thresholds": {"busbw": 1}})


# The tools probe (roles/burnin/tasks/tools.yml) of a node like the recorded H200's, with the CUDA 13.0 toolkit.
PROBE = ("arch=x86_64\ncuda=/usr/local/cuda-13.0\ncuda_release=13.0\ncaps=9.0 9.0 \nnvbandwidth=\n"
         "all_reduce_perf=\nbuilt=\n")
CONFIG = {"burnin_tools_build": True, "burnin_tools_dir": "/var/cache/gpuops/burnin-tools",
          "burnin_cuda_home": "", "burnin_nccl_home": "",
          # the one nccl-tests release, as roles/burnin/vars (_burnin_nccl_tests) gives it to tools.yml's call
          "nccl_tests": {"tool": "nccl-tests", "version": "2.19.6",
                         "url": "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.19.6.tar.gz",
                         "checksum": "", "archive": "/var/cache/gpuops/burnin/nccl-tests-2.19.6.tar.gz", "pin": {}},
          "sources": {"nvbandwidth": {"tool": "nvbandwidth", "version": "0.8", "checksum": "", "pin": {},
                                      "url": "https://github.com/NVIDIA/nvbandwidth/archive/refs/tags/v0.8.tar.gz"}},
          "burnin_nccl_wheel_url": "", "burnin_nccl_wheel_checksum": "",
          "nccl_wheels": {"x86_64": {"url": "https://pypi.example/nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl",
                                     "checksum": "sha256:e4553a30"}}}
NCCL_TESTS = "/var/cache/gpuops/burnin-tools/nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90"


def test_the_h200_recipe_nccl_tests_make_mpi0_against_the_wheels_nccl() -> None:
    plan = J.tools(PROBE, CONFIG, gpus=8, platform="compose")
    nccl_home = "/var/cache/gpuops/burnin-tools/nccl-2.28.9/nvidia/nccl"
    assert plan["problems"] == []
    assert [b["tool"] for b in plan["build"]] == ["nvbandwidth", "nccl-tests"]
    # nccl-tests' release is the one file the pairs' image and validate unpack too (nccl_tests_source.yml).
    assert [b["archive"] for b in plan["build"]] == [
        "/var/cache/gpuops/burnin-tools/nvbandwidth-0.8-cuda13.0-sm90.tar.gz",
        "/var/cache/gpuops/burnin/nccl-tests-2.19.6.tar.gz"]
    assert plan["build"][1]["argv"] == [["make", "-C", NCCL_TESTS, "-j", "MPI=0", "CUDA_HOME=/usr/local/cuda-13.0",
                                         f"NCCL_HOME={nccl_home}",
                                         "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"]]
    # A source release for tasks/sources.yml: fetched with its checksum, unzipped as it is.
    assert plan["nccl_wheel"] == {"url": CONFIG["nccl_wheels"]["x86_64"]["url"], "checksum": "sha256:e4553a30",
                                  "tool": "nccl", "dir": "/var/cache/gpuops/burnin-tools/nccl-2.28.9",
                                  "version": "2.28.9", "archive": "/var/cache/gpuops/burnin-tools/nccl-2.28.9.whl",
                                  "pin": {}, "extra_opts": [], "creates": f"{nccl_home}/include/nccl.h"}
    assert (plan["all_reduce_perf"], plan["env"]) == (
        f"{NCCL_TESTS}/build/all_reduce_perf", {"LD_LIBRARY_PATH": f"{nccl_home}/lib:/usr/local/cuda-13.0/lib64"})


def test_what_is_found_or_stamped_is_not_built() -> None:
    found = PROBE.replace("nvbandwidth=\n", "nvbandwidth=/usr/bin/nvbandwidth\n")
    stamped = found.replace("built=\n", f"built={NCCL_TESTS}/.gpuops-built \n")
    plan = J.tools(stamped, CONFIG, gpus=8, platform="compose")
    assert (plan["build"], plan["nccl_wheel"], plan["nvbandwidth"]) == ([], None, "/usr/bin/nvbandwidth")
    assert plan["all_reduce_perf"] == f"{NCCL_TESTS}/build/all_reduce_perf"


@pytest.mark.parametrize(("gpus", "platform", "tools"), [(8, "kubernetes", ["nvbandwidth"]),
                                                         (1, "compose", ["nvbandwidth"])])
def test_nccl_tests_only_where_the_host_runs_it(gpus: int, platform: str, tools: list) -> None:
    plan = J.tools(PROBE, CONFIG, gpus=gpus, platform=platform)
    assert ([b["tool"] for b in plan["build"]], plan["nccl_wheel"], plan["all_reduce_perf"]) == (tools, None, "")


def test_no_nvcc_no_compute_capability_or_no_wheel_is_a_problem_naming_the_fix() -> None:
    bare = "arch=ppc64le\ncuda=\ncaps=\nnvbandwidth=\nall_reduce_perf=\n"
    [problem] = J.tools(bare, CONFIG, gpus=8, platform="compose")["problems"]
    assert problem.startswith("burn-in builds nvbandwidth and nccl-tests on this host (not found in PATH) but finds "
                              "no CUDA toolkit (bin/nvcc) at /usr/local/cuda, /usr/local/cuda-*; no compute "
                              "capability from nvidia-smi --query-gpu=compute_cap (read: ''); no NCCL: "
                              "burnin_nccl_home is unset and no wheel is pinned for the architecture 'ppc64le'")
    assert "set burnin_cuda_home" in problem
    assert "burnin_tools_build: false" in problem
    off = J.tools(bare, CONFIG | {"burnin_tools_build": "false"}, gpus=8, platform="compose")
    assert (off["problems"], off["build"], off["nvbandwidth"], off["all_reduce_perf"]) == ([], [], "", "")


def test_each_build_is_its_release_as_the_role_gives_it_with_its_pin() -> None:
    # The releases and their pins are roles/burnin/vars' (_burnin_sources); test_burnin_tools.py runs that logic.
    nvbandwidth = CONFIG["sources"]["nvbandwidth"] | {"pin": {"tag": "v0.8", "commit": "66746a3b", "tar_sha256": "88"}}
    nccl_tests = CONFIG["nccl_tests"] | {"pin": {"tag": "v2.19.6", "commit": "a0b82b22", "tar_sha256": "a8"}}
    plan = J.tools(PROBE, CONFIG | {"sources": {"nvbandwidth": nvbandwidth}, "nccl_tests": nccl_tests}, gpus=8,
                   platform="compose")
    assert [(b["url"], b["pin"]) for b in plan["build"]] == [(nvbandwidth["url"], nvbandwidth["pin"]),
                                                             (nccl_tests["url"], nccl_tests["pin"])]
