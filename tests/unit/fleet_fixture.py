"""A fixture fleet for the fleet report, built from real `nvidia-smi topo -m` captures in ../shared/data
(parsed by the collection's own topology parser); the host facts around them are written here, labelled."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from shared_data import shared_path


def fleet() -> list[dict]:
    dgx = parse_topology(shared_path("nvidia-smi", "topo", "dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt").read_text())
    hgx = parse_topology(shared_path("nvidia-smi", "topo", "h100x8_sxm_2numa_noNIC.txt").read_text())
    pcie = parse_topology(shared_path("nvidia-smi", "topo", "a10x4_pcie_sys_2nic.txt").read_text())
    return [
        {"host": "dgx05", "pool": "train-a100",
         "gpu": {"count": 8, "driver_version": "535.261.03", "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}] * 8,
                 "fabric_manager": {"required": True, "state": "completed"}},
         "topology": dgx, "plan": {"cuda_version": "12.2"},
         "result": {"ok": True, "driver_pin": "535.261.03", "compat": {"mode": "native"},
                    "platform": {"platform": "kubernetes"}, "checks": []},
         "validate": [{"step": "nodes Ready", "status": "ok", "detail": "3/3 Ready"},
                      {"step": "GPU pod runs nvidia-smi", "status": "ok", "detail": "8 GPUs listed"}]},
        {"host": "hgx-h100-01", "pool": "train-h100",
         "gpu": {"count": 8, "driver_version": "550.90.07", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8,
                 "fabric_manager": {"required": True, "state": "in_progress"}},
         "topology": hgx, "plan": {"cuda_version": "12.4"},
         "result": {"ok": False, "driver_pin": "550.90.07", "compat": {"mode": "native"},
                    "platform": {"platform": "kubernetes"},
                    "checks": [{"name": "fabric_manager", "status": "failed", "msg": "fabric state In Progress"}]}},
        {"host": "a10-box", "gpu": {"count": 4, "driver_version": "535.261.03",
                                    "gpus": [{"name": "NVIDIA A10"}] * 4, "fabric_manager": {"required": False}},
         "topology": pcie, "plan": {"cuda_version": "12.2"},
         "result": {"ok": True, "driver_pin": "535.261.03", "compat": {"mode": "native"},
                    "platform": {"platform": "compose"}, "checks": []},
         "validate": [{"step": "CUDA container nvidia-smi", "status": "ok", "detail": "4 GPUs"},
                      {"step": "nccl all_reduce_perf", "status": "failed",
                       "detail": "busbw 9.1 GB/s, PCIe Gen4 x16 should give >= 18"}]},
        {"host": "cpu-login", "gpu": {"count": 0, "notes": ["nvml: NVML Shared Library Not Found"]},
         "topology": None, "result": {"ok": True, "platform": {"platform": "compose"}, "checks": []},
         "validate": [{"step": "CUDA container nvidia-smi", "status": "skipped", "detail": "skipped: no GPU"}]},
    ]
