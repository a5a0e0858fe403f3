"""diagnose_chain filter: thin over plugin_utils/diagnose.py; registered command results are read as they are."""

from __future__ import annotations

import diagnose_recorded as R
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.diagnose import diagnose_chain


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


def test_bad_arguments_are_refused():
    with pytest.raises(AnsibleFilterError, match="not compose or kubernetes"):
        diagnose_chain({}, platform="slurm")
    with pytest.raises(AnsibleFilterError, match="dict of command outputs"):
        diagnose_chain([], platform="compose")
    with pytest.raises(AnsibleFilterError, match="expected_gpus must be a number"):
        diagnose_chain({}, platform="kubernetes", expected_gpus="eight")


def test_kubernetes_walk_takes_mig_to_the_allocatable_link():
    node = '{"metadata": {"name": "gpu-01"}, "status": {"allocatable": {"nvidia.com/gpu": "56"}}}'
    outputs = {"node": registered(node), "gpu_facts": {"count": 8, "fabric_manager": {"required": False}}}

    def link(**mig):
        walked = diagnose_chain(outputs, platform="kubernetes", expected_gpus=8, node="gpu-01", **mig)
        return next(w for w in walked["walked"] + walked["below"] if w["link"] == "node allocatable")["status"]

    assert link(mig=True) == "ok", "a MIG pool: 7 MIG devices on each of 8 GPUs"
    assert link() == "broken", "whole GPUs: exactly 8"
