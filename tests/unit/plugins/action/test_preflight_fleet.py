"""preflight_fleet's verdict refuses the nodes of a Kubernetes pool whose GPU sharing is refused, with the refusal's
own words: gpu_operator's assert would refuse the pool one stage later (preflight predicts the run). The plan part
comes from gpu_sharing.plan_part on a pool of the bad-input matrix (kube-mps-share-below-context-reserve: 16384 MiB
shared by 16 MPS replicas, a 1024 MiB cap of which the CUDA context takes 576 MiB)."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.action.preflight_fleet import _with_sharing
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_sharing
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import finish

NODES = [{"name": "gpu-01", "pool": "training", "gpu_memory_mib": 81559},
         {"name": "gpu-02", "pool": "inference", "gpu_memory_mib": 16384}]


def _passed() -> dict:
    return finish({"checks": [{"name": "driver", "ok": True, "status": "ok", "msg": "fine"}]},
                  {"ok": True, "platform": "kubernetes", "source": "rule", "reason": "more than 16 GPUs"})


def _sharing(replicas: int) -> dict:
    pools = {"inference": {"mps_replicas": replicas}, "training": {"multi_node_training": False}}
    return gpu_sharing.plan_part(pools, NODES)


def test_a_refused_pool_refuses_its_nodes_with_the_pools_words() -> None:
    sharing = _sharing(16)
    assert sharing["inference"]["strategy"] is None, sharing["inference"]
    judged = _with_sharing(_passed(), sharing, "gpu-02")
    assert judged["ok"] is False
    assert judged["failed_checks"] == ["gpu_sharing"]
    check = judged["checks"][-1]
    assert check["status"] == "failed"
    assert check["msg"].startswith("pool inference: refused (gpu_operator's assert): ")
    assert "gpuops_mps_context_reserve" in check["msg"]


def test_nodes_of_other_pools_and_accepted_pools_pass() -> None:
    assert _with_sharing(_passed(), _sharing(16), "gpu-01") == _passed(), "gpu-01 is in the training pool"
    accepted = _sharing(4)
    assert accepted["inference"]["strategy"] == "mps"
    assert _with_sharing(_passed(), accepted, "gpu-02") == _passed()
    assert _with_sharing(_passed(), None, "gpu-02") == _passed(), "no sharing part: not kubernetes"
