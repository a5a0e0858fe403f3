"""GPU sharing on Kubernetes (plugin_utils gpu_sharing through gpu_operator.plan): MPS by default for inference,
time-slicing as the explicit choice without memory isolation, and the refusals.

The GPUs come from real nvidia-smi captures (../shared/data/nvidia-smi/query) parsed by our own parsers and turned
into nodes by kube_gpu.gpu_nodes, so memory and MIG mode are what a real GPU reports. The device-plugin
config is checked by ``device_plugin_accepts``, a labelled stand-in for the device plugin's own config loading
(github.com/NVIDIA/k8s-device-plugin v0.20.0, api/config/v1: sharing.go, replicas.go, config.go, and
internal/plugin/mps.go), which cannot run here: it transcribes the rules it applies, not our code.
"""

from __future__ import annotations

import helm_chart
import jsonschema
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import parse_nvidia_smi_xml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_operator as go
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_sharing
from ansible_collections.gpuops.cluster.plugins.plugin_utils.kube_gpu import gpu_nodes as kube_gpu_nodes
from conftest import shared_path
from gpu.nvidia_smi_q import parse_nvidia_smi_q

H100 = "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt"
A100_MIG = "a100-sxm4-80gb_mig-enabled_1of4gpus.xml"
H100_MIB = 81559  # the H100 capture's "FB Memory Usage / Total"

# --- stand-in: the device plugin's config rules (NVIDIA/k8s-device-plugin v0.20.0), for what OUR output must pass
_REPLICATED_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
_RESOURCE_KEYS = {"name", "replicas", "rename", "devices"}


def device_plugin_accepts(text: str) -> list[str]:
    """Reasons the device plugin would reject (or silently weaken) a config; empty when it takes it as meant."""
    config = yaml.safe_load(text)
    errors = []
    if config.get("version") != "v1":
        errors.append("version must be v1")
    sharing = config.get("sharing") or {}
    if set(sharing) - {"timeSlicing", "mps"}:
        errors.append(f"unknown sharing keys {set(sharing) - {'timeSlicing', 'mps'}}")
    if len(sharing) > 1:
        errors.append("time-slicing and MPS are mutually exclusive (README)")
    for section, replicated in sharing.items():
        if set(replicated) - _REPLICATED_KEYS:
            errors.append(f"unknown keys in sharing.{section}")
        if not replicated.get("resources"):
            errors.append("no resources specified")  # replicas.go
        for resource in replicated.get("resources") or []:
            if set(resource) - _RESOURCE_KEYS or not resource.get("name"):
                errors.append("bad resource entry")
            if not isinstance(resource.get("replicas"), int) or resource["replicas"] < 2:  # noqa: PLR2004
                errors.append("number of replicas must be >= 2")  # replicas.go
            if section == "mps" and resource.get("name") != "nvidia.com/gpu":
                errors.append("MPS supports only nvidia.com/gpu, full GPUs (README)")
        if replicated.get("renameByDefault"):
            errors.append("renameByDefault advertises nvidia.com/gpu.shared, outside requests.nvidia.com/gpu quota")
        if replicated.get("failRequestsGreaterThanOne") is not True:
            errors.append("failRequestsGreaterThanOne must be true (a request for 2 shares must fail)")
    if "mps" in sharing and (config.get("flags") or {}).get("migStrategy", "none") != "none":
        errors.append("sharing using MPS is not supported for MIG devices")  # internal/plugin/mps.go
    return errors


def h100_node(name: str = "gpu-i1", pool: str = "inference") -> dict:
    gpu = parse_nvidia_smi_q(shared_path("nvidia-smi", "query", H100).read_text(encoding="utf-8"))
    return kube_gpu_nodes([{"inventory_hostname": name, "gpuops_pool": pool, "ansible_facts": {"gpu": gpu}}])[0]


def config(pools: dict, nodes: list[dict]) -> dict:
    """gpu_operator's input, with the plan's gpu_sharing part as preflight makes it."""
    return {"chart_version": "v26.3.2", "driver_owner": "host", "registry_mirror": "", "pools": pools, "nodes": nodes,
            "sharing": gpu_sharing.plan_part(pools, nodes)}


def test_inference_shares_through_mps_with_a_quarter_of_the_memory_each() -> None:
    node = h100_node()
    assert node["gpu_memory_mib"] == H100_MIB
    assert node["mig_enabled"] is False
    pools = {"inference": {"mps_replicas": 4, "mps_memory_per_replica_mib": 16384}, "training": {}}
    result = go.plan(config(pools, [node, h100_node("gpu-t1", "training")]))
    assert result["problems"] == []
    inference = yaml.safe_load(result["device_plugin_config"]["inference"])
    assert inference["sharing"] == {"mps": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    assert device_plugin_accepts(result["device_plugin_config"]["inference"]) == []
    assert "sharing" not in yaml.safe_load(result["device_plugin_config"]["training"])
    # daemon.go: totalMemory/replicas in MiB, 100/replicas % of the SMs
    assert result["sharing"]["inference"] == {"strategy": "mps", "replicas": 4, "memory_isolation": True,
                                              "memory_per_replica_mib": H100_MIB // 4, "thread_percentage": 25}
    note = result["device_plugin_annotations"]["gpuops.io/sharing.inference"]
    assert f"{H100_MIB // 4} MiB" in note
    assert "25% of the SMs" in note
    assert result["device_plugin_annotations"]["gpuops.io/sharing.training"] == "whole GPUs: no sharing"


def test_time_slicing_stays_explicit_and_says_it_isolates_no_memory() -> None:
    pools = {"inference": {"time_slicing_replicas": 4}, "training": {}}
    result = go.plan(config(pools, [h100_node()]))
    assert result["problems"] == []
    text = result["device_plugin_config"]["inference"]
    assert device_plugin_accepts(text) == []
    assert yaml.safe_load(text)["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert result["sharing"]["inference"]["memory_isolation"] is False
    assert "no memory isolation" in result["device_plugin_annotations"]["gpuops.io/sharing.inference"]


def test_the_stand_in_rejects_what_the_device_plugin_rejects() -> None:
    """The checker can fail: MPS with MIG, one replica, both strategies, renamed resources."""
    bad = {
        "version: v1\nflags:\n  migStrategy: single\nsharing:\n  mps:\n    failRequestsGreaterThanOne: true\n"
        "    resources:\n      - {name: nvidia.com/gpu, replicas: 4}\n": "not supported for MIG",
        "version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: true\n    resources:\n"
        "      - {name: nvidia.com/gpu, replicas: 1}\n": ">= 2",
        "version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: true\n    resources: [{name: nvidia.com/gpu, "
        "replicas: 2}]\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources: [{name: nvidia.com/gpu, "
        "replicas: 2}]\n": "mutually exclusive",
        "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    failRequestsGreaterThanOne: true\n"
        "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n": "quota",
    }
    for text, reason in bad.items():
        assert any(reason in error for error in device_plugin_accepts(text)), text


def test_the_pinned_chart_ships_a_device_plugin_with_mps() -> None:
    """MPS sharing exists from device plugin v0.15.0 (README "With CUDA MPS"); the pinned chart's must be newer."""
    values = yaml.safe_load(shared_path("gpu-operator", "values.yaml").read_text(encoding="utf-8"))
    version = values["devicePlugin"]["version"]
    assert tuple(int(part) for part in version.lstrip("v").split(".")) >= (0, 15, 0), version


def test_cluster_policy_with_mps_validates_against_the_crd() -> None:
    pools = {"inference": {"mps_replicas": 4}, "training": {"multi_node_training": True}}
    result = go.plan(config(pools, [h100_node()]))
    values = yaml.safe_load(shared_path("gpu-operator", "values.yaml").read_text(encoding="utf-8"))
    crd = yaml.safe_load(shared_path("gpu-operator", "nvidia.com_clusterpolicies.yaml").read_text(encoding="utf-8"))
    assert helm_chart.unknown_keys(result["values"], values) == []
    policy = helm_chart.cluster_policy(helm_chart.merge(values, result["values"]))
    jsonschema.validate(policy, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert policy["spec"]["devicePlugin"]["config"]["name"] == go.CONFIGMAP_NAME
    assert policy["spec"]["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}, "the chart's MPS root, unchanged"


def test_mps_refused_on_mig_enabled_gpus() -> None:
    """A real capture with MIG enabled on one of four A100s: the node's facts say MIG, so MPS is refused."""
    gpu = parse_nvidia_smi_xml(shared_path("nvidia-smi", "query", A100_MIG).read_text(encoding="utf-8"))
    node = kube_gpu_nodes([{"inventory_hostname": "gpu-i9", "gpuops_pool": "inference",
                            "ansible_facts": {"gpu": gpu}}])[0]
    assert node["mig_enabled"] is True
    problems = go.problems(config({"inference": {"mps_replicas": 4}, "training": {}}, [node]))
    assert len(problems) == 1, problems
    assert problems[0].startswith("gpu_operator_pools.inference.mps_replicas is 4 but MIG is enabled on the GPUs "
                                  "of gpu-i9")
    assert "fix: disable MIG" in problems[0]


@pytest.mark.parametrize(("pools", "wanted"), [
    ({"inference": {"mps_replicas": 4, "mig_profile": "all-1g.10gb"}, "training": {}},
     "gpu_operator_pools.inference sets both mps_replicas (4) and mig_profile ('all-1g.10gb')"),
    ({"inference": {}, "training": {"mps_replicas": 4}},
     "gpu_operator_pools.training.mps_replicas is 4 on the training pool"),
    ({"inference": {"mps_replicas": 49}, "training": {}},
     "gpu_operator_pools.inference.mps_replicas is 49 but an MPS server on node gpu-i1 (NVIDIA H100 80GB HBM3) "
     "takes at most 48 clients per GPU"),
    ({"inference": {"mps_replicas": 1}, "training": {}},
     "gpu_operator_pools.inference.mps_replicas is 1: the device plugin needs >= 2"),
    ({"inference": {"mps_replicas": 8, "mps_memory_per_replica_mib": 16384}, "training": {}},
     "gpu_operator_pools.inference: each replica's MPS cap on node gpu-i1's GPUs (NVIDIA H100 80GB HBM3, 81559 MiB "
     "/ mps_replicas 8: the MPS daemon's default pinned device memory limit) is 10194 MiB, but the client's CUDA "
     "context takes 576 MiB of every MPS cap (gpuops_mps_context_reserve), which leaves 9618 MiB to allocate; "
     "expected at least 16384 MiB left (gpu_operator_pools.inference.mps_memory_per_replica_mib), a cap of 16960 MiB "
     "or more; fix: lower mps_replicas to 4 or fewer"),
    ({"inference": {"time_slicing_replicas": 4, "memory_isolation": True}, "training": {}},
     "gpu_operator_pools.inference.memory_isolation is true but the pool time-slices"),
    ({"inference": {"time_slicing_replicas": 4, "mps_replicas": 4}, "training": {}},
     "gpu_operator_pools.inference sets both mps_replicas (4) and time_slicing_replicas (4)"),
])
def test_refusals(pools: dict, wanted: str) -> None:
    nodes = [h100_node(), h100_node("gpu-t1", "training")]
    problems = go.problems(config(pools, nodes))
    assert len(problems) == 1, problems
    assert problems[0].startswith(wanted), problems[0]
    assert "fix:" in problems[0]
    assert go.plan(config(pools, nodes))["device_plugin_config"] == {}


def test_memory_need_refused_when_the_gpu_memory_is_unknown() -> None:
    node = kube_gpu_nodes([{"inventory_hostname": "gpu-i2", "gpuops_pool": "inference"}])[0]
    assert node["gpu_memory_mib"] is None
    pools = {"inference": {"mps_replicas": 4, "mps_memory_per_replica_mib": 8192}, "training": {}}
    problems = go.problems(config(pools, [node]))
    assert len(problems) == 1
    assert "GPU memory of gpu-i2 is unknown" in problems[0]
    assert "gpu_operator_gpu_memory_mib" in problems[0]
    # declared in the inventory instead of read by preflight: checked the same way
    node = kube_gpu_nodes([{"inventory_hostname": "gpu-i2", "gpuops_pool": "inference",
                            "gpu_operator_gpu_memory_mib": 24576}])[0]
    # the need is what a replica can allocate: its share (24576 / 4) less the CUDA context's reserve (576 MiB)
    pools["inference"]["mps_memory_per_replica_mib"] = 6144 - 576
    assert go.problems(config(pools, [node])) == []
    pools["inference"]["mps_memory_per_replica_mib"] = 6144 - 576 + 1
    assert "24576 MiB / mps_replicas 4: the MPS daemon's default pinned device memory limit) is 6144 MiB" in (
        go.problems(config(pools, [node]))[0])


@pytest.mark.parametrize(("model", "limit"), [
    ("Tesla V100-SXM2-32GB", 16), ("Tesla P40", 16), ("Tesla T4", 48), ("NVIDIA A10", 48),
    ("NVIDIA H100 80GB HBM3", 48), (None, 48), ("NVIDIA L4", 48),
])
def test_mps_client_limit_by_compute_capability(model: str | None, limit: int) -> None:
    assert gpu_sharing.max_mps_clients(model) == limit
