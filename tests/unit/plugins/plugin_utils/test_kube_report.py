"""The preflight report's kubelet section (registered in preflight_report.SECTIONS)."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_report, preflight_report

TOPOLOGY = {
    "nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]],
    "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3]}, {"numa_node": 1, "gpus": [4, 5, 6, 7]}],
}


def _record(platform: str, topology: dict | None = None) -> dict:
    return {"result": {"platform": {"platform": platform}}, "gpu": {"topology": topology}}


def test_registered_in_the_preflight_report_hook():
    assert kube_report.kubelet_section in preflight_report.SECTIONS


def test_training_node_gets_policy_and_reason_from_the_preflight_topology():
    section = kube_report.kubelet_section(
        "gpu1", _record("kubernetes", TOPOLOGY), {"group_names": ["gpu_nodes"], "gpuops_pool": "training"}
    )
    assert section["name"] == "kubelet"
    rows = dict(section["rows"])
    assert rows["topologyManagerPolicy"] == "restricted"
    assert "spans NUMA nodes" in rows["reason"]
    assert rows["topology from"] == "this preflight"


def test_inventory_topology_when_preflight_has_none():
    declared = {"nvlink_domains": [[0, 1]], "numa_groups": [{"numa_node": 0, "gpus": [0, 1], "cpus": "0-15"}]}
    hostvars = {"group_names": ["gpu_nodes"], "gpuops_pool": "training", "gpuops_gpu_topology": declared}
    section = kube_report.kubelet_section("gpu1", _record("kubernetes"), hostvars)
    assert section["data"]["topology_manager_policy"] == "single-numa-node"
    assert section["data"]["topology_source"] == "inventory (gpuops_gpu_topology)"


def test_no_section_off_kubernetes_or_off_gpu_nodes():
    hostvars = {"group_names": ["gpu_nodes"], "gpuops_pool": "training"}
    assert kube_report.kubelet_section("h", _record("compose", TOPOLOGY), hostvars) is None
    assert kube_report.kubelet_section("h", _record("kubernetes", TOPOLOGY), {"group_names": ["kube_nodes"]}) is None


def test_node_without_pool_says_so():
    section = kube_report.kubelet_section("h", _record("kubernetes", TOPOLOGY), {"group_names": ["gpu_nodes"]})
    assert "no gpuops_pool" in section["rows"][0][1]
