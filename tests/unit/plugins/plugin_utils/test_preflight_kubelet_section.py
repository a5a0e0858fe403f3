"""The preflight report's kubelet section (preflight_report.kubelet_section, add_sections), on the host's plan part."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan, preflight_report

TOPOLOGY = {
    "nvlink_domains": [[0, 1, 2, 3, 4, 5, 6, 7]],
    "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3]}, {"numa_node": 1, "gpus": [4, 5, 6, 7]}],
}


def _section(platform: str, hostvars: dict, topology: dict | None = None) -> dict | None:
    """The section of a record as preflight_fleet makes it: its plan part (planned) from plan.host_part."""
    gpu = {"topology": topology}
    record = {"result": {"platform": {"platform": platform}}, "gpu": gpu,
              "planned": plan.host_part(platform, gpu, hostvars)}
    return preflight_report.kubelet_section(record, hostvars)


def test_the_preflight_report_adds_it():
    record = {"result": {"platform": {"platform": "kubernetes"}}, "gpu": {"topology": TOPOLOGY}}
    hostvars = {"group_names": ["gpu_nodes"], "gpuops_pool": "training"}
    record["planned"] = plan.host_part("kubernetes", record["gpu"], hostvars)
    preflight_report.add_sections(record, hostvars)
    assert record["sections"]["kubelet"]["data"]["topology_manager_policy"] == "restricted"


def test_training_node_gets_policy_and_reason_from_the_preflight_topology():
    section = _section("kubernetes", {"group_names": ["gpu_nodes"], "gpuops_pool": "training"}, TOPOLOGY)
    assert section["name"] == "kubelet"
    rows = dict(section["rows"])
    assert rows["topologyManagerPolicy"] == "restricted"
    assert "spans NUMA nodes" in rows["reason"]
    assert rows["topology from"] == "this preflight"


def test_inventory_topology_when_preflight_has_none():
    declared = {"nvlink_domains": [[0, 1]], "numa_groups": [{"numa_node": 0, "gpus": [0, 1], "cpus": "0-15"}]}
    hostvars = {"group_names": ["gpu_nodes"], "gpuops_pool": "training", "gpuops_gpu_topology": declared}
    section = _section("kubernetes", hostvars)
    assert section["data"]["topology_manager_policy"] == "single-numa-node"
    assert section["data"]["topology_source"] == "inventory (gpuops_gpu_topology)"


def test_no_section_off_kubernetes_or_off_gpu_nodes():
    hostvars = {"group_names": ["gpu_nodes"], "gpuops_pool": "training"}
    assert _section("compose", hostvars, TOPOLOGY) is None
    assert _section("kubernetes", {"group_names": ["kube_nodes"]}, TOPOLOGY) is None


def test_node_without_pool_says_so():
    section = _section("kubernetes", {"group_names": ["gpu_nodes"]}, TOPOLOGY)
    assert "no gpuops_pool" in section["rows"][0][1]
