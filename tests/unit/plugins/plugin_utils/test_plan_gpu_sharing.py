"""gpuops_plan.gpu_sharing: how each Kubernetes pool shares its GPUs, made once by preflight (plan.build_plan) and
read by gpu_operator, which renders only the plan's part and refuses a plan without it or older than the inventory.

The cluster inventory (inventories/cluster, read by Ansible's inventory loader) with GPU facts parsed by our own
parser from real ``nvidia-smi -q`` captures in ../shared/data/nvidia-smi/query: the inference node gets the H100 NVL
capture (95830 MiB per GPU, not the 81559 MiB its host_vars declare, so the facts are seen to win), the training
nodes the A100 SXM4 80GB one (81920 MiB). Expected values are written out from those captures.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.kube import (
    gpu_operator_default_pools,
    gpu_operator_plan,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import parse_nvidia_smi_xml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils.kube_gpu import gpu_nodes as kube_gpu_nodes
from ansible_env import inventory_vars
from conftest import shared_path
from gpu.nvidia_smi_q import parse_nvidia_smi_q

REPO = Path(__file__).resolve().parents[4]
NVL = "h100-nvl-x2_nvidia-smi-q.txt"  # 2 x NVIDIA H100 NVL, FB Memory Usage / Total 95830 MiB
A100 = "a100-sxm4-80gb-x4_nvidia-smi-q.txt"  # 4 x NVIDIA A100-SXM4-80GB, 81920 MiB
A100_MIG = "a100-sxm4-80gb_mig-enabled_1of4gpus.xml"  # MIG enabled on one of four A100s
CAPTURES = {"gpu-train-01": A100, "gpu-train-02": A100, "gpu-infer-01": NVL}

INFERENCE = {
    "strategy": "mps", "replicas": 4, "memory_isolation": True, "memory_per_replica_mib": 23957,  # 95830 // 4
    "thread_percentage": 25, "mig_profile": None, "gpu_memory_mib": 95830, "nodes": ["gpu-infer-01"],
    "reason": "gpu_operator_pools.inference.mps_replicas is 4: MPS: 4 replicas per GPU, each limited to 23957 MiB "
              "and 25% of the SMs (enforced by the MPS control daemon); memory per replica from the pool's smallest "
              "GPU, 95830 MiB on gpu-infer-01, divided by 4",
}
TRAINING = {
    "strategy": "none", "replicas": 1, "memory_isolation": True, "memory_per_replica_mib": None,
    "thread_percentage": None, "mig_profile": None, "gpu_memory_mib": 81920, "nodes": ["gpu-train-01", "gpu-train-02"],
    "reason": "gpu_operator_pools.training sets neither mps_replicas nor time_slicing_replicas: whole GPUs: no sharing",
}
SHARE_KEYS = ("strategy", "replicas", "memory_isolation", "memory_per_replica_mib", "thread_percentage")


def _inventory() -> dict[str, dict]:
    return inventory_vars(REPO / "inventories" / "cluster")


def _facts(name: str) -> dict:
    text = shared_path("nvidia-smi", "query", name).read_text(encoding="utf-8")
    return parse_nvidia_smi_xml(text) if name.endswith(".xml") else parse_nvidia_smi_q(text)


def _plan(hostvars: dict, captures: dict[str, str] | None = None, platform: str = "kubernetes") -> dict:
    captures = CAPTURES if captures is None else captures
    records = {host: {"gpu": _facts(name), "result": {"ok": True}, "plan": {"driver_version": "580.65.06"}}
               for host, name in captures.items()}
    fleet = {"ok": True, "platform": platform, "source": "auto", "reason": "test", "gpu_count": 10}
    built = plan.build_plan(fleet, records, hostvars, "2026-12-02T00:00:00+00:00", "/r")
    jsonschema.Draft202012Validator(plan.SCHEMA).validate(json.loads(json.dumps(built)))
    return built


def _role_config(hostvars: dict, sharing: object = None) -> dict:
    """gpu_operator's tasks/plan.yml input, with the role's nodes (kube_gpu.gpu_nodes of the hosts with facts)."""
    hosts = [{**hostvars[host], "inventory_hostname": host, "ansible_facts": {"gpu": _facts(name)}}
             for host, name in CAPTURES.items()]
    return {"chart_version": "v26.3.2", "driver_owner": "host", "registry_mirror": "",
            "pools": hostvars["gpu-infer-01"]["gpu_operator_pools"], "nodes": kube_gpu_nodes(hosts),
            "enabled": True, "sharing": sharing}


def test_preflight_plans_each_pools_sharing_from_the_gpu_memory_it_read():
    built = _plan(_inventory())
    assert built["gpu_sharing"] == {"inference": INFERENCE, "training": TRAINING}


def test_the_inventory_plan_uses_the_declared_memory_without_facts():
    hostvars = {host: {**variables, "gpuops_platform": "kubernetes"} for host, variables in _inventory().items()}
    built = plan.inventory_plan(list(CAPTURES), hostvars)
    inference = built["gpu_sharing"]["inference"]
    assert (inference["gpu_memory_mib"], inference["memory_per_replica_mib"]) == (81559, 20389), "host_vars: 81559"
    assert built["gpu_sharing"]["training"]["gpu_memory_mib"] is None, "no facts, nothing declared"


def test_the_default_pools_when_the_inventory_sets_none():
    hostvars = _inventory()
    for variables in hostvars.values():
        variables.pop("gpu_operator_pools", None)
    assert gpu_operator_default_pools(True) == {"inference": {"mps_replicas": 4},
                                                "training": {"multi_node_training": True}}
    built = _plan(hostvars)
    assert {key: built["gpu_sharing"]["inference"][key] for key in SHARE_KEYS} == {
        key: INFERENCE[key] for key in SHARE_KEYS}
    assert built["gpu_sharing"]["inference"]["reason"].startswith(
        "gpu_operator_pools (default).inference.mps_replicas is 4: MPS")


def test_every_kubernetes_plan_with_the_gpu_operator_carries_the_part():
    """gpu_operator renders only the plan's part: a cluster without GPU nodes yet, or the switch given as -e's string,
    still gets it."""
    part = plan.gpu_sharing_part("kubernetes", [], {"kube_addons_gpu_operator": "true"})
    assert {name: entry["nodes"] for name, entry in part.items()} == {"inference": [], "training": []}
    assert plan.gpu_sharing_part("kubernetes", [], {"kube_addons_gpu_operator": "false"}) is None


def test_no_part_on_compose_or_without_the_gpu_operator():
    hostvars = _inventory()
    assert _plan(hostvars, platform="compose")["gpu_sharing"] is None
    for variables in hostvars.values():
        variables["kube_addons_gpu_operator"] = False
    assert _plan(hostvars)["gpu_sharing"] is None


def test_mps_on_a_mig_enabled_gpu_is_planned_as_refused_with_gpu_operators_message():
    built = _plan(_inventory(), {**CAPTURES, "gpu-infer-01": A100_MIG})
    inference = built["gpu_sharing"]["inference"]
    assert inference["strategy"] is None
    assert inference["reason"].startswith("refused (gpu_operator's assert): gpu_operator_pools.inference.mps_replicas "
                                          "is 4 but MIG is enabled on the GPUs of gpu-infer-01")


def test_gpu_operator_renders_what_the_plan_part_says():
    hostvars = _inventory()
    result = gpu_operator_plan(_role_config(hostvars, _plan(hostvars)["gpu_sharing"]))
    assert result["problems"] == []
    assert result["sharing"] == {"inference": {key: INFERENCE[key] for key in SHARE_KEYS},
                                 "training": {key: TRAINING[key] for key in SHARE_KEYS}}
    inference = yaml.safe_load(result["device_plugin_config"]["inference"])
    assert inference["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert inference["flags"]["migStrategy"] == "none"
    assert "sharing" not in yaml.safe_load(result["device_plugin_config"]["training"])
    assert result["device_plugin_annotations"]["gpuops.io/sharing.inference"].startswith(
        "MPS: 4 replicas per GPU, each limited to 23957 MiB and 25% of the SMs")


def test_the_plans_gpu_memory_is_used_where_the_role_has_no_facts():
    """In a later play (render, the control plane) the role may see no gpu facts: the plan's memory stands."""
    hostvars = _inventory()
    part = _plan(hostvars)["gpu_sharing"]
    config = _role_config(hostvars, part)
    config["nodes"] = kube_gpu_nodes([{**hostvars[host], "inventory_hostname": host} for host in CAPTURES])
    note = gpu_operator_plan(config)["device_plugin_annotations"]["gpuops.io/sharing.inference"]
    assert "23957 MiB" in note, f"the plan's 95830 MiB / 4, not host_vars' declared 81559 MiB / 4: {note}"


def test_a_plan_older_than_the_inventory_is_refused():
    hostvars = _inventory()
    part = _plan(hostvars)["gpu_sharing"]
    config = _role_config(hostvars, part)
    config["pools"] = {**config["pools"], "inference": {"mps_replicas": 8}}
    stale = ("the plan was made before the inventory changed; fix: run playbooks/preflight.yml again (it writes a "
             "new plan)")
    assert gpu_operator_plan(config)["problems"] == [
        "gpuops_plan.gpu_sharing.inference (strategy 'mps', replicas 4, mig_profile None) is not what "
        f"gpu_operator_pools.inference asks now (strategy 'mps', replicas 8, mig_profile None): {stale}"]
    config["pools"]["batch"] = {"time_slicing_replicas": 2}
    assert gpu_operator_plan({**config, "sharing": {**part, "inference": {**part["inference"], "replicas": 8}}})[
        "problems"] == [
        "gpuops_plan.gpu_sharing.batch (strategy None, replicas None, mig_profile None) is not what "
        f"gpu_operator_pools.batch asks now (strategy 'time-slicing', replicas 2, mig_profile None): {stale}"]


def test_a_plan_without_the_part_is_refused():
    """A plan.json written before the part existed (or without the GPU Operator): every pool is refused, nothing is
    computed in its place."""
    hostvars = _inventory()
    result = gpu_operator_plan(_role_config(hostvars, None))
    assert [problem.split(" (")[0] for problem in result["problems"]] == [
        "gpuops_plan.gpu_sharing.inference", "gpuops_plan.gpu_sharing.training"]
    assert all(problem.endswith("fix: run playbooks/preflight.yml again (it writes a new plan)")
               for problem in result["problems"])
    assert result["device_plugin_config"] == {}
    off = gpu_operator_plan({**_role_config(hostvars, None), "enabled": False})
    assert off["problems"] == [], "the inputs pass checks the role with the GPU Operator off: no part is asked for"
