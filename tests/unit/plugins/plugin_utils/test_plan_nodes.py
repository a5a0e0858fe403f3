"""gpuops_plan's node lists (plugin_utils/plan.py nodes_part): GPU nodes, control planes, workers, on the collection's
own inventories (inventories/cluster, inventories/small-team, read by Ansible's inventory loader) with GPU facts from
real `nvidia-smi topo -m` captures in ../shared/data.

gpu_operator, kube_tenancy, training_stack and grow's plan read their GPU nodes from ``nodes.gpu``; each entry must be
what kube_gpu.gpu_nodes makes of the host's variables (what those roles' defaults built from hostvars before).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils.kube_gpu import gpu_nodes as kube_gpu_nodes
from ansible_env import inventory_vars
from fleet_fixture import shared_path

REPO = Path(__file__).resolve().parents[4]
# the preflight captures stand in for the cluster's three GPU nodes
CAPTURES = {
    "gpu-train-01": "dgx-a100_8gpu_10nic_nps4-numa_dgx05",
    "gpu-train-02": "a100x8_17nic_singleNUMA",
    "gpu-infer-01": "h100x8_sxm_2numa_noNIC",
}
FLEET = {"ok": True, "platform": "kubernetes", "source": "auto", "reason": "14 people on 24 GPUs", "gpu_count": 24}


def _inventory(name: str) -> dict[str, dict]:
    return inventory_vars(REPO / "inventories" / name)


def _gpu(name: str) -> dict:
    topology = parse_topology(shared_path("nvidia-smi", "topo", f"{name}.txt").read_text())
    return {"count": len(topology["gpus"]), "source": "nvml", "topology": topology}


def _valid(built: dict) -> dict:
    jsonschema.Draft202012Validator(plan.SCHEMA).validate(json.loads(json.dumps(built)))
    return built


def _preflight_plan(hostvars: dict, judged: list[str]) -> dict:
    records = {host: {"gpu": _gpu(CAPTURES[host]), "result": {"ok": True}, "plan": {"driver_version": "580.65.06"}}
               for host in judged}
    return _valid(plan.build_plan(FLEET, records, hostvars, "2026-12-04T00:00:00+00:00", "/r/x"))


def test_preflight_plan_lists_the_cluster_nodes_with_the_gpu_facts_it_read():
    hostvars = _inventory("cluster")
    nodes = _preflight_plan(hostvars, list(CAPTURES))["nodes"]
    assert list(nodes["registration"]) == ["cp-01"], "the control plane registers by the plan; GPU nodes by their part"
    with_facts = [{**hostvars[host], "inventory_hostname": host, "ansible_facts": {"gpu": _gpu(name)}}
                  for host, name in CAPTURES.items()]
    assert nodes["gpu"] == kube_gpu_nodes(with_facts)
    assert [(n["name"], n["pool"], n["gpu_count"]) for n in nodes["gpu"]] == [
        ("gpu-train-01", "training", 8), ("gpu-train-02", "training", 8), ("gpu-infer-01", "inference", 8)]
    assert nodes["gpu"][2]["topology"] == _gpu(CAPTURES["gpu-infer-01"])["topology"], "the topology preflight read"


def test_a_limited_preflight_still_lists_every_gpu_node():
    """preflight judged one host (--limit): the others are listed from the inventory's declarations."""
    hostvars = _inventory("cluster")
    nodes = _preflight_plan(hostvars, ["gpu-train-02"])["nodes"]
    assert [n["name"] for n in nodes["gpu"]] == ["gpu-train-01", "gpu-train-02", "gpu-infer-01"]
    declared = kube_gpu_nodes([{**hostvars["gpu-infer-01"], "inventory_hostname": "gpu-infer-01"}])[0]
    assert nodes["gpu"][2] == declared
    assert declared["gpu_memory_mib"] == hostvars["gpu-infer-01"]["gpu_operator_gpu_memory_mib"]
    assert nodes["gpu"][1]["topology"] == _gpu(CAPTURES["gpu-train-02"])["topology"]


def test_inventory_plan_nodes_are_what_the_roles_defaults_built_from_hostvars():
    """render.yml's plan (no preflight): the same entries the roles' defaults built by walking hostvars."""
    hostvars = _inventory("cluster")
    built = _valid(plan.inventory_plan(list(CAPTURES), hostvars))
    walked = kube_gpu_nodes([{**hostvars[host], "inventory_hostname": host} for host in CAPTURES])
    assert built["nodes"]["gpu"] == walked
    assert sum(node["gpu_count"] for node in walked) == FLEET["gpu_count"], "the declared topologies: 8 GPUs each"


def test_cpu_workers_and_a_second_control_plane():
    hostvars = _inventory("cluster")
    groups = {**hostvars["cp-01"]["groups"], "kube_control_plane": ["cp-01", "gpu-train-02"], "kube_nodes": ["cpu-01"]}
    hostvars = {host: {**variables, "groups": groups} for host, variables in hostvars.items()}
    hostvars["cpu-01"] = {"groups": groups, "inventory_hostname": "cpu-01"}
    nodes = plan.inventory_plan(list(CAPTURES), hostvars)["nodes"]
    assert list(nodes["registration"]) == ["cp-01", "cpu-01"], "a GPU node that is a control plane registers as one"
    assert [n["name"] for n in nodes["gpu"]] == list(CAPTURES), "a schedulable control plane is still a GPU node"


def test_compose_site_lists_its_gpu_host_and_no_control_plane():
    hostvars = _inventory("small-team")
    nodes = _valid(plan.inventory_plan(["gpu01"], hostvars))["nodes"]
    assert nodes["registration"] == {}
    assert [n["name"] for n in nodes["gpu"]] == ["gpu01"]
    assert nodes["gpu"] == kube_gpu_nodes([{**hostvars["gpu01"], "inventory_hostname": "gpu01"}])


def test_the_cluster_gpu_count_is_the_plans_one():
    """A GPU node whose GPUs were neither read nor declared counts an even share of gpuops_gpu_count: the one count
    that kube_tenancy's quota check (their sum) and grow (each worker's) read. small-team declares 8 GPUs and no
    topology for gpu01; before, the plan counted 0 there and grow shared gpuops_gpu_count by a rule of its own."""
    hostvars = _inventory("small-team")
    nodes = _valid(plan.inventory_plan(["gpu01"], hostvars))["nodes"]["gpu"]
    assert [(n["name"], n["gpu_count"]) for n in nodes] == [("gpu01", 8)]
    declared = {"gpuops_gpu_count": 12, "gpuops_gpu_topology": {"gpus": [{"index": 0}, {"index": 1}]}}
    shared = kube_gpu_nodes([{"inventory_hostname": "a", **declared},
                             {"inventory_hostname": "b", "gpuops_gpu_count": 12},
                             {"inventory_hostname": "c", "gpuops_gpu_count": 12, "gpu_operator_gpu_count": 4}])
    assert [n["gpu_count"] for n in shared] == [2, 4, 4], "a topology or a declared count first, else 12 // 3"
    # shares that do not divide still add up to gpuops_gpu_count (10 over 3 nodes: 4, 3, 3; not 3 each, 9 in all)
    unread = kube_gpu_nodes([{"inventory_hostname": name, "gpuops_gpu_count": 10} for name in "abc"])
    assert [n["gpu_count"] for n in unread] == [4, 3, 3]
