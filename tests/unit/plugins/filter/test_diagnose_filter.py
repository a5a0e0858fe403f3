"""diagnose_chain and validate_rows filters: thin over plugin_utils/diagnose.py and validate.py; registered command
results are read as they are, the node's pool sharing from the plan's gpu_sharing."""

from __future__ import annotations

import diagnose_recorded as R
from ansible_collections.gpuops.cluster.plugins.filter.diagnose import diagnose_chain, validate_rows


def registered(stdout, rc=0, stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}


def test_compose_walk_over_registered_results_stops_at_cdi():
    outputs = {
        "workspace": registered("", rc=1, stderr="Error response from daemon: could not select device driver"),
        "docker_runtimes": registered(R.DOCKER_RUNTIMES_NVIDIA),
        "ctk_version": registered(R.CTK_VERSION),
        "cdi_list": registered(R.CDI_LIST_2),
        "gpu_facts": {"count": 4, "fabric_manager": {"required": False}},
    }
    out = diagnose_chain(outputs, platform="compose", expected_gpus=["GPU-1"])
    assert out["broken"]["link"] == "toolkit and CDI"
    assert "names 2 GPU(s), the host has 4" in out["broken"]["evidence"]


def test_nvidia_smi_not_found_is_read_from_stderr():
    outputs = {"workspace": registered("a\n"), "docker_runtimes": registered(R.DOCKER_RUNTIMES_NVIDIA),
               "ctk_version": registered(R.CTK_VERSION), "cdi_list": registered(""),
               "nvidia_smi": registered("", rc=127, stderr="/bin/bash: line 1: nvidia-smi: command not found")}
    out = diagnose_chain(outputs, platform="compose", expected_gpus=["a"])
    assert out["broken"]["link"] == "nvidia-smi"


def test_kubernetes_walk_takes_the_nodes_pool_sharing_to_the_allocatable_link():
    node = '{"metadata": {"name": "gpu-01"}, "status": {"allocatable": {"nvidia.com/gpu": "56"}}}'
    outputs = {"node": registered(node), "gpu_facts": {"count": 8, "fabric_manager": {"required": False}}}

    def link(strategy=None, replicas=1, nodes=("gpu-01",)):
        sharing = {"p": {"strategy": strategy, "replicas": replicas, "nodes": list(nodes)}} if strategy else None
        walked = diagnose_chain(outputs, platform="kubernetes", expected_gpus=8, node="gpu-01", sharing=sharing)
        return next(w for w in walked["walked"] + walked["below"] if w["link"] == "node allocatable")["status"]

    assert link("mig") == "ok", "a MIG pool: 7 MIG devices on each of 8 GPUs"
    assert link("time-slicing", 7) == "ok", "8 GPUs x 7 replicas"
    assert link() == "broken", "whole GPUs: exactly 8"
    assert link("mig", nodes=["gpu-02"]) == "broken", "another node's pool: whole GPUs here"


def test_validate_reads_the_nodes_pool_sharing_for_the_allocatable_step():
    alloc = '{"metadata": {"name": "gpu-01"}, "status": {"allocatable": {"nvidia.com/gpu": "32"}}}'
    sharing = {"inference": {"strategy": "mps", "replicas": 4, "nodes": ["gpu-01"]}}

    def step(**kwargs):
        rows = validate_rows({"node": registered(alloc)}, platform="kubernetes", gpu_count=8, node="gpu-01", **kwargs)
        return next(r for r in rows if r["step"] == "allocatable nvidia.com/gpu")

    assert step(sharing=sharing)["status"] == "ok"
    assert "(expected 8 GPUs x 4 replicas)" in step(sharing=sharing)["detail"]
    assert step()["status"] == "failed", "no pool lists the node: whole GPUs, 8 expected"
