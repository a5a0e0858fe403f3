"""preflight's verdict (the rules preflight_fleet judges on the plan) refuses the nodes of a Kubernetes pool whose GPU
sharing is refused, with the refusal's own words: gpu_operator's assert would refuse the pool one stage later
(preflight predicts the run). The plan part comes from gpu_sharing.plan_part on a pool of the bad-input matrix
(kube-mps-share-below-context-reserve: 16384 MiB shared by 16 MPS replicas, a 1024 MiB cap of which the CUDA context
takes 576 MiB). Likewise for a compose host whose workspaces' limits overcommit its memory (the plan's
workspaces.sizing, on the bad-input matrix's workspace-memory-overcommit case): compose_stack would deploy those
limits, so preflight refuses them first."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_sharing, plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils import preflight as P

NODES = [{"name": "gpu-01", "pool": "training", "gpu_memory_mib": 81559},
         {"name": "gpu-02", "pool": "inference", "gpu_memory_mib": 16384}]


DRIVER = {"name": "driver", "ok": True, "status": "ok", "msg": "fine"}
KUBERNETES = {"ok": True, "platform": "kubernetes", "source": "rule", "reason": "more than 16 GPUs"}


def _sharing(replicas: int) -> dict:
    pools = {"inference": {"mps_replicas": replicas}, "training": {"multi_node_training": False}}
    return gpu_sharing.plan_part(pools, NODES)


def test_a_refused_pool_refuses_its_nodes_with_the_pools_words() -> None:
    sharing = _sharing(16)
    assert sharing["inference"]["strategy"] is None, sharing["inference"]
    check = P.gpu_sharing(sharing, "gpu-02")
    judged = P.finish({"checks": [DRIVER, check]}, KUBERNETES)
    assert judged["ok"] is False
    assert judged["failed_checks"] == ["gpu_sharing"]
    assert check["status"] == "failed"
    assert check["msg"].startswith("pool inference: refused (gpu_operator's assert): ")
    assert "gpuops_mps_context_reserve" in check["msg"]


def test_nodes_of_other_pools_and_accepted_pools_pass() -> None:
    assert P.gpu_sharing(_sharing(16), "gpu-01") is None, "gpu-01 is in the training pool"
    accepted = _sharing(4)
    assert accepted["inference"]["strategy"] == "mps"
    assert P.gpu_sharing(accepted, "gpu-02") is None
    assert P.gpu_sharing(None, "gpu-02") is None, "no sharing part: not kubernetes"


BAD_INPUT = Path(__file__).resolve().parents[3] / "bad_input"
# gpu_facts' gpu_host.os of the bad-input matrix's node (a Debian 12 container on the 2-CPU VM whose /proc is
# captured in tests/unit/plugins/module_utils/fixtures/proc-debian12-2cpu-epyc-vm: MemTotal 24683792 kB)
NODE_OS = {"distribution": "Debian", "distribution_version": "12.7", "memtotal_mb": 24105, "processor_vcpus": 2}


def _compose_host(case: str | None) -> dict:
    """preflight's verdict on the compose baseline's host, with a case's variables over the baseline's."""
    hostvars = yaml.safe_load((BAD_INPUT / "inventory" / "group_vars" / "all" / "baseline.yml").read_text())
    expect = []
    if case:
        loaded = yaml.safe_load((BAD_INPUT / "cases" / f"{case}.yml").read_text())
        hostvars.update(loaded["vars"])
        expect = loaded["expect"]
    part = plan.host_part("compose", {}, hostvars, host=NODE_OS)
    check = P.workspace_sizing(part["workspaces"])
    compose = {"ok": True, "platform": "compose", "source": "explicit", "reason": "gpuops_platform: compose"}
    judged = P.finish({"checks": [DRIVER, *([check] if check else [])]}, compose)
    return {"check": check, "judged": judged, "expect": expect}


def test_workspace_limits_that_overcommit_the_host_refuse_it_with_the_matrixs_words() -> None:
    found = _compose_host("workspace-memory-overcommit")
    judged = found["judged"]
    assert judged["ok"] is False
    assert judged["failed_checks"] == ["workspace_sizing"]
    assert [c["name"] for c in judged["checks"]] == ["driver", "workspace_sizing", "platform"]
    assert found["expect"], "the case lists what the refusal must say"
    for fragment in found["expect"]:
        assert fragment in found["check"]["msg"], fragment


def test_the_baselines_workspaces_fit_and_pass() -> None:
    found = _compose_host(None)
    assert found["check"] is None
    assert found["judged"]["ok"] is True
