"""validate judgements: nccl all_reduce_perf tables (layout as printed by nccl-tests 2.13, header lines as in
NVIDIA/nccl issue #1530; the numbers are recorded here, labelled so), bandwidth expectations from real
topology captures, every step's outcomes, including the no-GPU host, and the cause a failed container step names
(Docker missing or down, no NVIDIA runtime, image unreachable) on real registered results
(fixtures/validate_docker/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import validate as V
from conftest import shared_path

HEADER = (
    "# nThread 1 nGpus 8 minBytes 8388608 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0\n#\n"
    "#                                                              out-of-place                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
)


def line(size, o_time, o_alg, o_bus, i_time, i_alg, i_bus, wrong=0):
    """One result line, in all_reduce_perf's column widths."""
    return (f"{size:>12} {size // 4:>13} {'float':>9} {'sum':>7} {-1:>7} {o_time:>8} {o_alg:>7} {o_bus:>7} "
            f"{wrong:>6} {i_time:>8} {i_alg:>7} {i_bus:>7} {0:>6}\n")


A100_NVLINK = (HEADER + line(8388608, "90.12", "93.08", "162.90", "88.70", "94.57", "165.50")
               + line(67108864, "395.2", "169.81", "297.17", "393.9", "170.37", "298.15")
               + line(268435456, "1310.4", "204.85", "358.49", "1308.9", "205.09", "358.90")
               + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 273.535\n")
PCIE_SLOW = (HEADER.replace("nGpus 8", "nGpus 4") + line(8388608, "3620.1", "2.32", "3.48", "3610.7", "2.32", "3.48")
             + line(268435456, "98012.3", "2.74", "4.11", "97930.5", "2.74", "4.11")
             + "# Avg bus bandwidth    : 3.795\n")
WRONG = A100_NVLINK.replace(" 358.49      0 ", " 358.49      3 ")


def topo(name):
    return parse_topology(shared_path("nvidia-smi", "topo", name).read_text())


def reg(stdout, rc=0):
    return {"rc": rc, "stdout": stdout, "stderr": ""}


def test_parse_all_reduce():
    parsed = V.parse_all_reduce(A100_NVLINK)
    assert parsed == {"rows": 3, "peak_busbw": 358.90, "avg_busbw": 273.535, "wrong": 0}
    assert V.parse_all_reduce(WRONG)["wrong"] == 3  # noqa: PLR2004
    assert V.parse_all_reduce("")["rows"] == 0


def test_expected_bandwidth_from_real_topologies():
    dgx = V.expected_busbw(topo("dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt"), list(range(8)))
    assert dgx["path"] == "NVLink (NV12 per pair)"
    assert dgx["peak"] == 300.0  # noqa: PLR2004
    pcie = V.expected_busbw(topo("a10x4_pcie_sys_2nic.txt"), [0, 1, 2, 3])
    assert pcie["path"] == "PCIe Gen4 x16"
    # NVLink bridge pairs in a VM: GPUs 0 and 1 are bridged, 0 and 2 are not.
    vm = topo("azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK.txt")
    assert V.expected_busbw(vm, [0, 1])["path"].startswith("NVLink")
    assert V.expected_busbw(vm, [0, 1, 2, 3])["path"].startswith("PCIe")


def test_judge_nccl():
    nvlink = {"path": "NVLink (NV12 per pair)", "peak": 300.0, "floor": 180.0}
    assert V.judge_nccl(A100_NVLINK, 0, nvlink)["status"] == "ok"
    slow = V.judge_nccl(PCIE_SLOW, 0, nvlink)
    assert slow["status"] == "failed"
    assert "peak busbw 4.1 GB/s over NVLink" in slow["detail"]
    assert V.judge_nccl(WRONG, 0, nvlink)["status"] == "failed"
    assert "did not run" in V.judge_nccl("all_reduce_perf: command not found", 127, nvlink)["detail"]


def test_compose_rows_all_ok_on_an_8_gpu_box():
    uuids = {str(i): f"GPU-{i}" for i in range(8)}
    outputs = {
        "cuda_smi": reg("".join(f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: GPU-{i})\n" for i in range(8))),
        "cuda_check": reg("[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA "
                          "device\nCUDA kernel launch with 196 blocks of 256 threads\nTest PASSED\nDone\n"),
        "nccl": reg(A100_NVLINK),
        "host_uuids": uuids,
        "workspaces": {"alice": reg("GPU-0\nGPU-1\n"), "bob": reg("GPU-2\n")},
    }
    members = [{"name": "alice", "gpus": [0, 1]}, {"name": "bob", "gpus": [2, 3]}]
    rows = V.compose_rows(outputs, 8, topo("dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt"), members)
    status = {r["step"]: r["status"] for r in rows}
    assert status == {"CUDA container runs nvidia-smi": "ok", "CUDA kernel launch (vectorAdd)": "ok",
                      "NCCL all_reduce_perf": "ok", "workspaces see exactly their GPUs": "failed"}
    assert "bob: the workspace sees GPU-2; its GPUs are GPU-2, GPU-3" in rows[3]["detail"]


def test_compose_rows_one_gpu_and_failures():
    outputs = {"cuda_smi": reg("", rc=125), "cuda_check": reg("Failed to allocate device vector A", rc=1)}
    rows = V.compose_rows(outputs, 1, None, [])
    assert [r["status"] for r in rows] == ["failed", "failed", "skipped", "skipped"]


def test_no_gpu_host_is_skipped_never_ok():
    for platform in ("compose", "kubernetes"):
        rows = V.no_gpu_rows(platform, "nvml: NVML Shared Library Not Found")
        assert rows
        assert all(r["status"] == "skipped" for r in rows)
        assert all(r["detail"].startswith("skipped: no GPU") for r in rows if "GPU" in r["step"] or "CUDA" in r["step"]
                   or "NCCL" in r["step"] or "nvidia" in r["step"])


def k8s_outputs(ready="True", alloc="8", phase="Running", pod_log="GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"):
    nodes = {"items": [{"metadata": {"name": n}, "status": {"conditions": [{"type": "Ready", "status": s}]}}
                       for n, s in (("cp-1", "True"), ("gpu-01", ready))]}
    node = {"metadata": {"name": "gpu-01"}, "status": {"allocatable": {"nvidia.com/gpu": alloc}}}
    pods = {"items": [{"metadata": {"name": "nvidia-device-plugin-daemonset-x"},
                       "status": {"phase": phase, "containerStatuses": [{"ready": phase == "Running"}]}},
                      {"metadata": {"name": "nvidia-cuda-validator-y"}, "status": {"phase": "Succeeded"}}]}
    return {"nodes": reg(json.dumps(nodes)), "node": reg(json.dumps(node)), "operator_pods": reg(json.dumps(pods)),
            "gpu_pod": reg(pod_log)}


def test_kubernetes_rows():
    assert [r["status"] for r in V.kubernetes_rows(k8s_outputs(), "gpu-01", 8)] == ["ok"] * 4
    time_sliced = V.kubernetes_rows(k8s_outputs(alloc="32"), "gpu-01", 8, replicas=4)
    assert time_sliced[1]["status"] == "ok"
    bad = V.kubernetes_rows(k8s_outputs(ready="False", alloc="7", phase="CrashLoopBackOff", pod_log=""), "gpu-01", 8)
    assert [r["status"] for r in bad] == ["failed"] * 4
    assert "not Ready: gpu-01" in bad[0]["detail"]
    assert "unhealthy: nvidia-device-plugin-daemonset-x" in bad[2]["detail"]


def test_kubernetes_rows_of_a_mig_pool():
    """A MIG pool (mig.strategy single) advertises each GPU's MIG devices, several per H100 80GB with all-1g.10gb
    (the GPU Operator docs' nvidia-smi -L in ../shared/data/nvidia-smi/mig, which the test pod lists too), so at least
    one per GPU is expected, never exactly GPUs x 1."""
    listed = shared_path("nvidia-smi", "mig", "h100-80gb_mig-all-1g.10gb_nvidia-smi-L.txt").read_text()
    per_gpu = listed.count("MIG 1g.10gb")
    assert per_gpu > 1, listed
    rows = V.kubernetes_rows(k8s_outputs(alloc=str(per_gpu * 8), pod_log=listed), "gpu-01", 8, mig=True)
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert rows[1]["detail"].endswith("(expected at least 8: 8 GPUs, MIG devices of each)")
    assert V.kubernetes_rows(k8s_outputs(alloc=str(per_gpu * 8)), "gpu-01", 8)[1]["status"] == "failed", (
        "not a MIG pool: exactly 8 x 1")
    for short in ("0", "7"):
        assert V.kubernetes_rows(k8s_outputs(alloc=short), "gpu-01", 8, mig=True)[1]["status"] == "failed", short


# ---- a container step that failed names its cause and the fix ----
# Real registered results of validate.yml's probe and `docker run` (fixtures/validate_docker/SOURCES.md says where
# each was captured).
DOCKER_FIXTURES = Path(__file__).parent / "fixtures" / "validate_docker"
ONE_H200 = "GPU 0: NVIDIA H200 (UUID: GPU-283a682d-d984-3e2f-10f2-3a540656cc51)\n"


def recorded(name: str) -> dict:
    return json.loads((DOCKER_FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize(("probe", "run", "cause", "evidence", "fix"), [
    ("no-docker", "no-docker", V.DOCKER_MISSING, "no docker command on PATH (/usr/local/sbin:", "docker_engine role"),
    ("no-daemon", "no-daemon", V.DOCKER_DOWN, "Cannot connect to the Docker daemon at unix:///tmp/h3/no-docker.sock",
     "systemctl enable --now docker"),
    ("no-nvidia-runtime", "no-nvidia-runtime", V.NO_NVIDIA_RUNTIME,
     "runtimes io.containerd.runc.v2, io.containerd.runtime.v1.linux, runc, no nvidia; CDI spec directories: none",
     "nvidia_container_toolkit role"),
    ("no-nvidia-runtime", "registry-refused", V.IMAGE_UNREACHABLE,
     "127.0.0.1:5999/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0 is not on this host and its registry 127.0.0.1:5999 "
     "cannot be reached (docker: Error response from daemon: Get \"http://127.0.0.1:5999/v2/\": dial tcp "
     "127.0.0.1:5999: connect: connection refused)", "set validate_cuda_image (or gpuops_registry_mirror"),
    ("no-nvidia-runtime", "registry-no-dns", V.IMAGE_UNREACHABLE, "its registry nvcr.io cannot be reached",
     "make nvcr.io reachable from this host"),
])
def test_a_failed_container_step_names_its_cause_and_fix(probe, run, cause, evidence, fix):
    outputs = {"docker": recorded(f"{probe}.probe"), "cuda_smi": recorded(f"{run}.run"),
               "cuda_check": recorded(f"{run}.run")}
    rows = V.compose_rows(outputs, 1, None, [])
    for step in rows[:2]:
        assert step["status"] == "failed"
        assert step["detail"].startswith(f"{cause}: "), step["detail"]
        assert evidence in step["detail"]
        assert "no output" not in step["detail"]
    assert fix in rows[0]["detail"].split(" Fix: ")[1]
    assert "validate_cuda_check_image" in rows[1]["detail"] or cause != V.IMAGE_UNREACHABLE


def test_without_docker_every_container_step_and_workspace_says_so():
    # validate.yml skips the NCCL block when the probe fails: its row takes the cause from the probe.
    outputs = {"docker": recorded("no-docker.probe"), "cuda_smi": recorded("no-docker.run"),
               "cuda_check": recorded("no-docker.run"), "nccl": {"changed": False, "skipped": True},
               "host_uuids": {"0": "GPU-0", "1": "GPU-1"}, "workspaces": {"alice": recorded("no-docker.workspace")}}
    rows = V.compose_rows(outputs, 2, None, [{"name": "alice", "gpus": [0]}])
    assert [r["status"] for r in rows] == ["failed"] * 4
    assert rows[2]["detail"].startswith(f"all_reduce_perf did not run: {V.DOCKER_MISSING}: ")
    assert rows[3]["detail"].startswith(f"1 workspace(s) not probed: {V.DOCKER_MISSING}: ")


def test_the_nvidia_runtime_present_but_no_gpu_driver_says_the_hook_is_missing():
    # The recorded probe with an nvidia runtime added, as nvidia-ctk writes it into daemon.json.
    probe = recorded("no-nvidia-runtime.probe")
    info = json.loads(probe["stdout"])
    info["Runtimes"]["nvidia"] = {"path": "nvidia-container-runtime"}
    detail = V.container_failure("cuda_smi", recorded("no-nvidia-runtime.run"), dict(probe, stdout=json.dumps(info)))
    assert detail.startswith(f"{V.NO_NVIDIA_RUNTIME}: ")
    assert "found no nvidia-container-runtime-hook" in detail


def test_an_unknown_failure_keeps_its_exit_and_first_error_line():
    outputs = {"docker": recorded("no-nvidia-runtime.probe"), "cuda_smi": reg("", rc=125),
               "cuda_check": reg("Failed to allocate device vector A (error code out of memory)!", rc=1)}
    rows = V.compose_rows(outputs, 1, None, [])
    assert rows[0]["detail"] == "exit 125: no output"
    assert rows[1]["detail"] == "exit 1: Failed to allocate device vector A (error code out of memory)!"
    ok = dict(outputs, cuda_smi=reg(ONE_H200), cuda_check=reg("Test PASSED\n"))
    assert [r["status"] for r in V.compose_rows(ok, 1, None, [])[:2]] == ["ok", "ok"]
