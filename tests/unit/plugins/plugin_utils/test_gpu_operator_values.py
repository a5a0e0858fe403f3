"""gpu_operator: the one values document (both ownership modes, time-slicing per pool, MIG refusals), checked
against the real chart values.yaml; the ClusterPolicy it leads to validates against the real CRD."""

from __future__ import annotations

import copy
from typing import Any

import helm_chart
import jsonschema
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_operator as go
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_sharing
from conftest import shared_path

NVLINKED = "dgx-a100_8gpu_10nic_nps4-numa_dgx05"
PCIE = "a10x4_pcie_sys_2nic"


def topology(name: str) -> dict:
    return parse_topology(shared_path("nvidia-smi", "topo", f"{name}.txt").read_text(encoding="utf-8"))


def chart_values() -> dict:
    return yaml.safe_load(shared_path("gpu-operator", "values.yaml").read_text(encoding="utf-8"))


def crd_schema() -> dict:
    crd = yaml.safe_load(shared_path("gpu-operator", "nvidia.com_clusterpolicies.yaml").read_text(encoding="utf-8"))
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def config(**extra: object) -> dict:
    base = {
        "chart_version": "v26.3.2",
        "driver_owner": "host",
        "registry_mirror": "",
        "cuda_version": "12.4",
        "pools": {"inference": {"time_slicing_replicas": 4}, "training": {"multi_node_training": True}},
        "nodes": [
            {"name": "gpu-t1", "pool": "training", "gpu_model": "NVIDIA A100-SXM4-40GB",
             "topology": topology(NVLINKED)},
            {"name": "gpu-i1", "pool": "inference", "gpu_model": "NVIDIA A30", "topology": topology(PCIE)},
        ],
    }
    base.update(extra)
    return {"sharing": gpu_sharing.plan_part(base["pools"], base["nodes"]), **base}  # the plan's, as preflight makes it


def test_host_owner_default() -> None:
    result = go.plan(config())
    assert result["problems"] == []
    values = result["values"]
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False
    assert "version" not in values["driver"], "host-owned: the chart's default driver version must not appear"
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert values["nfd"]["enabled"] is True
    assert values["mig"]["strategy"] == "none"
    assert values["migManager"]["enabled"] is False


def test_operator_owner_needs_exact_driver() -> None:
    result = go.plan(config(driver_owner="operator", driver_version="580.105.08"))
    assert result["problems"] == []
    driver = result["values"]["driver"]
    assert (driver["enabled"], driver["version"], driver["repository"]) == (True, "580.105.08", "nvcr.io/nvidia")
    assert result["values"]["toolkit"]["enabled"] is True
    for version in ("", "580", "580.105", None):
        problems = go.problems(config(driver_owner="operator", driver_version=version))
        assert len(problems) == 1, problems
        assert "gpu_operator_driver_version" in problems[0] or "exact" in problems[0]


def test_operator_driver_checked_against_cuda() -> None:
    problems = go.problems(config(driver_owner="operator", driver_version="470.256.02", cuda_version="12.4"))
    assert len(problems) == 1
    assert "cannot run gpuops_cuda_version '12.4'" in problems[0]
    assert "fix: upgrade the driver" in problems[0]


@pytest.mark.parametrize("version", ["", "latest", ">=v25.0.0", "v26", "26.x", None])
def test_chart_version_must_be_pinned(version: object) -> None:
    problems = go.problems(config(chart_version=version))
    assert len(problems) == 1
    assert problems[0].startswith(f"gpu_operator_chart_version is {version!r}")


def test_time_slicing_per_pool() -> None:
    result = go.plan(config())
    data = result["device_plugin_config"]
    assert set(data) == {"inference", "training", go.WHOLE_GPU_CONFIG}
    inference = yaml.safe_load(data["inference"])
    assert inference["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert inference["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is True
    assert "sharing" not in yaml.safe_load(data["training"]), "training gets whole GPUs"
    assert go.node_labels(config()["pools"], config()["nodes"]) == {
        "gpu-t1": {"nvidia.com/device-plugin.config": "training"},
        "gpu-i1": {"nvidia.com/device-plugin.config": "inference"},
    }
    assert result["values"]["devicePlugin"]["config"] == {
        "create": False, "name": go.CONFIGMAP_NAME, "default": go.WHOLE_GPU_CONFIG}


@pytest.mark.parametrize("replicas", [0, 1, -3, "4", True])
def test_time_slicing_replicas_refused(replicas: object) -> None:
    pools = {"inference": {"time_slicing_replicas": replicas}, "training": {}}
    problems = go.problems(config(pools=pools))
    assert len(problems) == 1
    assert problems[0].startswith(f"gpu_operator_pools.inference.time_slicing_replicas is {replicas!r}")


def test_mig_allowed_on_pcie_inference_pool() -> None:
    pools = {"inference": {"mig_profile": "all-1g.6gb"}, "training": {"multi_node_training": True}}
    result = go.plan(config(pools=pools))
    assert result["problems"] == []
    assert result["values"]["mig"]["strategy"] == "single"
    assert result["values"]["migManager"]["enabled"] is True
    assert go.node_labels(pools, config()["nodes"])["gpu-i1"] == {
        "nvidia.com/device-plugin.config": "inference", "nvidia.com/mig.config": "all-1g.6gb"}
    assert yaml.safe_load(result["device_plugin_config"]["inference"])["flags"]["migStrategy"] == "single"


def test_mig_refused_on_nvlink_pool() -> None:
    pools = {"inference": {}, "training": {"mig_profile": "all-1g.5gb"}}
    problems = go.problems(config(pools=pools))
    assert len(problems) == 1
    assert "NVLink-connected" in problems[0]
    assert "gpu-t1" in problems[0]


def test_mig_refused_on_multi_node_training_pool() -> None:
    pools = {"inference": {}, "training": {"mig_profile": "all-1g.6gb", "multi_node_training": True}}
    nodes = [{"name": "gpu-t9", "pool": "training", "gpu_model": "NVIDIA A30", "topology": topology(PCIE)}]
    problems = go.problems(config(pools=pools, nodes=nodes))
    assert len(problems) == 1
    assert "multi_node_training" in problems[0]


def test_mig_refused_on_the_training_pool_of_a_multi_node_team() -> None:
    """gpuops_multi_node_training marks the training pool even where gpu_operator_pools does not (preflight's own
    MIG-across-nodes rule, retired with preflight_mig_requested, lives here now); the inference pool stays free."""
    nodes = [{"name": "gpu-t9", "pool": "training", "gpu_model": "NVIDIA A30", "topology": topology(PCIE)}]
    training = {"inference": {}, "training": {"mig_profile": "all-1g.6gb"}}
    assert go.problems(config(pools=training, nodes=nodes)) == []
    problems = go.problems(config(pools=training, nodes=nodes, multi_node_training=True))
    assert len(problems) == 1
    assert "the team runs multi-node training in this pool (gpuops_multi_node_training)" in problems[0]
    inference = {"inference": {"mig_profile": "all-1g.6gb"}, "training": {}}
    nodes = [{**nodes[0], "pool": "inference"}]
    assert go.problems(config(pools=inference, nodes=nodes, multi_node_training=True)) == []


@pytest.mark.parametrize("model", ["Tesla V100-SXM2-32GB", "NVIDIA L40S", "NVIDIA A10", "NVIDIA GeForce RTX 4090",
                                   "Tesla T4", None])
def test_mig_refused_on_incapable_gpu(model: object) -> None:
    pools = {"inference": {"mig_profile": "all-balanced"}, "training": {}}
    nodes = [{"name": "gpu-i2", "pool": "inference", "gpu_model": model, "topology": topology(PCIE)}]
    problems = go.problems(config(pools=pools, nodes=nodes))
    assert len(problems) == 1
    assert "cannot do MIG" in problems[0]


@pytest.mark.parametrize(("model", "capable"), [
    ("NVIDIA A100-SXM4-80GB", True), ("NVIDIA H100 80GB HBM3", True), ("NVIDIA H20", True), ("NVIDIA H200", True),
    ("NVIDIA A30", True), ("NVIDIA B200", True), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
    ("NVIDIA A10", False), ("NVIDIA A40", False), ("NVIDIA H100 NVL", True), ("NVIDIA L4", False),
])
def test_mig_capable_list(model: str, capable: bool) -> None:
    assert go.mig_capable(model) is capable


def test_node_in_unknown_pool() -> None:
    nodes = [{"name": "gpu-x", "pool": "batch", "gpu_model": "NVIDIA A30", "topology": None}]
    assert "pool 'batch', which gpu_operator_pools does not define" in go.problems(config(nodes=nodes))[0]


def repositories_in(values: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Every ``repository`` key at any depth: its path to the value."""
    if not isinstance(values, dict):
        return {}
    found = {path: values["repository"]} if isinstance(values.get("repository"), str) else {}
    for key, value in values.items():
        found.update(repositories_in(value, (*path, key)))
    return found


def test_every_image_through_the_mirror() -> None:
    values = go.plan(config(registry_mirror="registry.lan:5000"))["values"]
    ours = repositories_in(values)
    assert all(repo.startswith("registry.lan:5000/") for repo in ours.values()), ours
    # every image of the real chart, at any depth, is covered with the upstream path kept (<mirror>/<path>)
    chart = {where: repo for where, repo in repositories_in(chart_values()).items() if repo}
    assert set(chart) - set(ours) == set(), set(chart) - set(ours)
    for where, upstream in chart.items():
        assert ours[where] == "registry.lan:5000/" + upstream.split("/", 1)[1], where
    # vgpuManager ships with an empty repository: the site's licensed vGPU driver image, never on nvcr.io
    assert ("vgpuManager",) not in chart
    assert ("vgpuManager",) not in ours
    assert set(ours) - set(chart) == {("node-feature-discovery", "image")}  # the subchart's, not in values.yaml
    assert ours[("node-feature-discovery", "image")] == "registry.lan:5000/nfd/node-feature-discovery"
    assert "scheme" in go.problems(config(registry_mirror="https://registry.lan"))[0]


@pytest.mark.parametrize("owner", ["host", "operator"])
def test_values_keys_exist_in_the_real_chart(owner: str) -> None:
    values = go.plan(config(driver_owner=owner, driver_version="580.105.08", registry_mirror="r.lan"))["values"]
    assert helm_chart.unknown_keys(values, chart_values()) == []
    assert helm_chart.unknown_keys({"driver": {"enabeld": False}}, chart_values()) == ["driver.enabeld"]


@pytest.mark.parametrize(("owner", "pools"), [
    ("host", None),
    ("operator", {"inference": {"mig_profile": "all-1g.6gb"}, "training": {}}),
])
def test_cluster_policy_validates_against_crd(owner: str, pools: dict | None) -> None:
    extra = {"pools": pools} if pools else {}
    result = go.plan(config(driver_owner=owner, driver_version="580.105.08", registry_mirror="r.lan", **extra))
    assert result["problems"] == []
    effective = helm_chart.merge(chart_values(), result["values"])
    policy = helm_chart.cluster_policy(effective)
    schema = crd_schema()
    jsonschema.validate(policy, schema)
    spec = policy["spec"]
    assert spec["driver"]["enabled"] is (owner == "operator")
    assert spec["devicePlugin"]["config"] == {"name": go.CONFIGMAP_NAME, "default": go.WHOLE_GPU_CONFIG}
    assert spec["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    # every setting of ours reaches the ClusterPolicy (a key the CRD does not know would be pruned silently);
    # operator.* configures the operator Deployment, which the chart renders itself
    properties = schema["properties"]["spec"]["properties"]
    for section, value in result["values"].items():
        if section in helm_chart.CLUSTER_POLICY_SECTIONS and section != "operator" and isinstance(value, dict):
            for key in value:
                if section == "devicePlugin" and key == "config":
                    continue
                assert key in properties[section]["properties"], f"spec.{section}.{key} is not in the CRD"


def test_cluster_policy_schema_catches_a_bad_value() -> None:
    effective = helm_chart.merge(chart_values(), {"mig": {"strategy": "sometimes"}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(helm_chart.cluster_policy(effective), crd_schema())


def test_merge_is_helm_like() -> None:
    base = {"a": {"b": 1, "c": [1]}, "d": 1}
    out = helm_chart.merge(copy.deepcopy(base), {"a": {"c": [2]}, "e": 3})
    assert out == {"a": {"b": 1, "c": [2]}, "d": 1, "e": 3}


def test_mig_refused_on_declared_nvlink_domains() -> None:
    pools = {"inference": {"mig_profile": "all-1g.10gb"}, "training": {}}
    nodes = [{"name": "gpu-i3", "pool": "inference", "gpu_model": "NVIDIA H100 80GB HBM3",
              "topology": {"nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]]}}]
    assert "NVLink-connected" in go.problems(config(pools=pools, nodes=nodes))[0]
    nodes[0]["topology"] = {"nvlink_domains": [[0], [1]]}
    assert go.problems(config(pools=pools, nodes=nodes)) == []
