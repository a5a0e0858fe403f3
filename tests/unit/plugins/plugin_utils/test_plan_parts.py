"""gpuops_plan's pools, pins, node labels and taints, NCCL settings and member workspaces (plugin_utils/plan.py),
on the collection's own inventories (inventories/cluster, inventories/small-team, read by Ansible's inventory loader)
with GPU facts from real `nvidia-smi topo -m` captures in ../shared/data.

Each part is checked against literal values as the plan builds it; the roles compute none of it. The kubelet policy
and node registration are also checked as the rule the plan calls gives them (kube_plan.kubelet_policy and
node_registration); training_stack's job templates (pytorchjob_template) take the plan's pools as they
are; compose_stack reads the plan's workspaces, their memory and CPU limits sized in the plan.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_plan, plan, platform, training_jobs
from ansible_env import inventory_vars
from fleet_fixture import shared_path
from gpu_facts_helpers import Commands, make_pci, no_pynvml

REPO = Path(__file__).resolve().parents[4]
DRIVER = "580.65.06"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# the preflight captures stand-in for the cluster's three nodes
CAPTURES = {
    "gpu-train-01": "dgx-a100_8gpu_10nic_nps4-numa_dgx05",  # 10 NICs, mlx5_8/9 storage (SYS to all GPUs)
    "gpu-train-02": "a100x8_17nic_singleNUMA",  # 17 NICs, mlx5_bond_0 nearest to no GPU
    "gpu-infer-01": "h100x8_sxm_2numa_noNIC",  # no NIC
}
TRAINING_HCA = "=" + ",".join(f"mlx5_{n}" for n in range(18))


def _inventory(name: str) -> dict[str, dict]:
    return inventory_vars(REPO / "inventories" / name)


def _topology(name: str) -> dict:
    return parse_topology(shared_path("nvidia-smi", "topo", f"{name}.txt").read_text())


def _valid(built: dict) -> dict:
    jsonschema.Draft202012Validator(plan.SCHEMA).validate(json.loads(json.dumps(built)))
    return built


def _cluster_plan(hostvars: dict) -> dict:
    records = {
        host: {"gpu": {"count": 8, "source": "nvml", "fabric_manager": {"required": True}, "topology": _topology(name)},
               "result": {"ok": True}, "plan": {"driver_version": DRIVER, "cuda_version": "12.4"}}
        for host, name in CAPTURES.items()
    }
    fleet = {"ok": True, "platform": "kubernetes", "source": "auto", "reason": "14 people on 24 GPUs", "gpu_count": 24}
    return _valid(plan.build_plan(fleet, records, hostvars, "2026-12-02T00:00:00+00:00",
                                  "/r/20261202T000000Z"))


@pytest.fixture(name="cluster")
def _cluster() -> dict:
    return _cluster_plan(_inventory("cluster"))


def _nodes(hostvars: dict) -> list[dict]:
    """The plan's GPU nodes as training_stack reads them (kube_gpu.gpu_nodes), with the capture topologies."""
    return [{"name": host, "pool": hostvars[host]["gpuops_pool"], "topology": _topology(name)}
            for host, name in CAPTURES.items()]


def _job_env(pool: str, nodes: list[dict], **config: object) -> dict:
    job = training_jobs.pytorchjob(pool, {"nodes": nodes, "namespace": "kubeflow", "image": "pytorch:2.7.1",
                                          "shm_size": "64Gi", "mlflow_uri": "http://mlflow.mlflow.svc:5000", **config})
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("NCCL_")}


# --- fleet: pools and pins ---------------------------------------------------------------------------------------

def test_pools_and_pins_of_the_cluster_inventory(cluster):
    assert {pool: part["hosts"] for pool, part in cluster["pools"].items()} == {
        "training": ["gpu-train-01", "gpu-train-02"], "inference": ["gpu-infer-01"]}
    assert cluster["pins"]["driver"] == DRIVER
    for host in CAPTURES:
        assert cluster["hosts"][host]["packages"] == {
            "driver": DRIVER, "fabric_manager_needed": True,
            "fabric_manager_reason": "? NVSwitch device(s) found", "container_toolkit": "1.17.8",
            "dcgm_cuda_major": 13}, "group_vars/gpu_nodes/driver.yml pins the toolkit; the 580 driver runs CUDA 13"
        assert cluster["hosts"][host]["workspaces"] is None, "kubernetes members get namespaces, not workspaces"


def test_the_toolkit_pin_is_the_roles_default_where_the_inventory_sets_none():
    small = plan.inventory_plan(["gpu01"], _inventory("small-team"))
    default = (REPO / "roles/nvidia_container_toolkit/defaults/main.yml").read_text(encoding="utf-8")
    pin = small["hosts"]["gpu01"]["packages"]["container_toolkit"]
    assert f'nvidia_container_toolkit_version: "{pin}"\n' in default, "nvidia_container_toolkit installs it"
    assert set(small["pins"]) == {"driver", "cuda", "registry_mirror"}, "no pin that no role reads"


def test_a_host_without_a_pool_is_in_no_pool():
    hostvars = _inventory("cluster")
    del hostvars["gpu-infer-01"]["gpuops_pool"]
    forced = {host: {**variables, "gpuops_platform": "kubernetes"} for host, variables in hostvars.items()}
    built = plan.inventory_plan(list(CAPTURES), forced)
    assert list(built["pools"]) == ["training"]
    assert built["hosts"]["gpu-infer-01"]["node"] is None, "no pool, no kubelet policy: kube_node refuses the node"


def test_a_limited_preflight_plans_the_pools_of_every_gpu_node():
    """preflight --limit gpu-train-01 judges one host, but nodes.gpu (and gpu_sharing) hold every gpu_nodes host
    and training_stack renders a job template for each of their pools: the pools are the same hosts, the unjudged
    ones on their inventory topology (gpuops_gpu_topology)."""
    hostvars = _inventory("cluster")
    record = {"gpu": {"count": 8, "source": "nvml", "fabric_manager": {"required": True},
                      "topology": _topology(CAPTURES["gpu-train-01"])},
              "result": {"ok": True}, "plan": {"driver_version": DRIVER, "cuda_version": "12.4"}}
    fleet = {"ok": True, "platform": "kubernetes", "source": "auto", "reason": "limited", "gpu_count": 8}
    built = _valid(plan.build_plan(fleet, {"gpu-train-01": record}, hostvars))
    assert list(built["hosts"]) == ["gpu-train-01"]
    assert {pool: part["hosts"] for pool, part in built["pools"].items()} == {
        "training": ["gpu-train-01", "gpu-train-02"], "inference": ["gpu-infer-01"]}
    assert {node["pool"] for node in built["nodes"]["gpu"]} == set(built["pools"])
    declared = hostvars["gpu-infer-01"]["gpuops_gpu_topology"]
    assert built["pools"]["inference"]["nccl"] == training_jobs.nccl_env([declared], "")
    for pool in built["pools"]:  # before, a pool of unjudged hosts only was missing: a bare KeyError here
        assert _job_env(pool, built["nodes"]["gpu"], plan_pools=built["pools"]) == built["pools"][
            pool]["nccl"]["env"]


# --- per host: the node's labels and taints (kube_node's render, gpu_operator's labels) --------------------------

# host -> (topology-policy, reason) of the captures' topologies
POLICIES = {
    "gpu-train-01": ("restricted", "training pool; an NVLink domain spans NUMA nodes (GPUs 0-7 on NUMA nodes 1,3,5,7): "
                     "restricted; reservedSystemCPUs: the first 2 CPUs of each GPU NUMA node"),
    "gpu-train-02": ("single-numa-node", "training pool; each NVLink domain sits in one NUMA node (GPU NUMA nodes 0): "
                     "single-numa-node; reservedSystemCPUs: the first 2 CPUs of each GPU NUMA node"),
    "gpu-infer-01": ("best-effort", "inference pool: best-effort (serving pods are not NUMA-bound); "
                     "reservedSystemCPUs: the first 2 CPUs of each GPU NUMA node"),
}


def _expected_registration(host: str, pool: str, sweep: str = "daemonset") -> dict:
    policy, reason = POLICIES[host]
    return {
        "labels": {"nvidia.com/gpu": "true", "gpuops.io/pool": pool, "gpuops.io/nvlink-domains": "0-7",
                   "gpuops.io/topology-policy": policy, "gpuops.io/gpu-health-sweep": sweep},
        "annotations": {"gpuops.io/kubelet-policy": reason},
        "taints": [GPU_TAINT],
    }


@pytest.mark.parametrize("host", sorted(CAPTURES))
def test_node_labels_and_taints_in_the_plan(cluster, host):
    pool = cluster["hosts"][host]["pool"]
    expected = _expected_registration(host, pool)
    # the rule the plan calls, with kube_node's defaults (inventories/cluster sets the same reservations)
    policy = kube_plan.kubelet_policy(_topology(CAPTURES[host]), pool, 2, "", 4096, 500)
    assert kube_plan.node_registration(policy, pool, False, False, "daemonset") == expected
    # the plan: the same registration, with the GPU Operator's label (kube_addons_gpu_operator: true)
    planned = cluster["hosts"][host]["node"]
    assert planned["labels"] == {**expected["labels"], "nvidia.com/device-plugin.config": pool}
    assert planned["annotations"] == expected["annotations"]
    assert planned["taints"] == expected["taints"]


def test_a_mixed_fleet_labels_each_gpu_node_with_its_own_sweep_form(cluster):
    """One cluster, two sweep forms (issue 38): gpu-train-02 sets kube_monitoring_gpu_health_sweep: false in its
    host_vars, so its plan form is gpu_health's timer and its node label says so, while the other GPU nodes keep
    kube_monitoring's DaemonSet; the DaemonSet selects gpuops.io/gpu-health-sweep=daemonset, so no node gets both."""
    hostvars = _inventory("cluster")
    hostvars["gpu-train-02"]["kube_monitoring_gpu_health_sweep"] = False
    mixed = _cluster_plan(hostvars)
    forms = {host: part["health_sweep"]["form"] for host, part in mixed["hosts"].items()}
    assert forms == {"gpu-train-01": "daemonset", "gpu-train-02": "timer", "gpu-infer-01": "daemonset"}
    for host, part in mixed["hosts"].items():
        assert part["node"]["labels"]["gpuops.io/gpu-health-sweep"] == forms[host], host
        # the rest of the registration is the uniform cluster's
        assert part["node"]["labels"] | {"gpuops.io/gpu-health-sweep": "daemonset"} == cluster["hosts"][host]["node"][
            "labels"], host
    # the rule the plan calls gives the same label from the same form
    policy = kube_plan.kubelet_policy(_topology(CAPTURES["gpu-train-02"]), "training", 2, "", 4096, 500)
    assert kube_plan.node_registration(policy, "training", False, False, "timer") == _expected_registration(
        "gpu-train-02", "training", "timer")
    assert "gpuops.io/gpu-health-sweep" not in kube_plan.node_registration(policy, "training")["labels"]


def test_mig_label_and_control_plane_taint_from_the_inventory():
    hostvars = _inventory("cluster")
    for host in ("gpu-infer-01", "gpu-train-02"):
        hostvars[host]["gpu_operator_pools"] = {"inference": {"mig_profile": "all-1g.10gb"}, "training": {}}
    hostvars["gpu-train-02"]["group_names"] = [*hostvars["gpu-train-02"]["group_names"], "kube_control_plane"]
    built = _cluster_plan(hostvars)
    assert built["nodes"]["registration"] == {"cp-01": {"labels": {}, "annotations": {}, "taints": [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}, "the control plane's, in the plan"
    assert built["hosts"]["gpu-infer-01"]["node"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert "nvidia.com/mig.config" not in built["hosts"]["gpu-train-02"]["node"]["labels"]
    assert built["hosts"]["gpu-train-02"]["node"]["taints"] == [
        GPU_TAINT, {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    hostvars["gpu-train-02"]["kube_control_plane_schedulable"] = True
    hostvars["gpu-infer-01"]["kube_addons_gpu_operator"] = False
    hostvars["cp-01"]["kube_control_plane_schedulable"] = True
    built = _cluster_plan(hostvars)
    assert built["hosts"]["gpu-train-02"]["node"]["taints"] == [GPU_TAINT]
    assert built["nodes"]["registration"]["cp-01"]["taints"] == [], "schedulable: no control-plane taint"
    assert built["hosts"]["gpu-infer-01"]["node"]["labels"] == _expected_registration("gpu-infer-01", "inference")[
        "labels"], "without the GPU Operator no device-plugin label"


def test_no_node_part_on_compose_or_with_an_unusable_policy():
    gpu = {"count": 2, "topology": _topology("a10x4_pcie_sys_2nic")}
    assert plan.host_part("compose", gpu, {"gpuops_pool": "training"})["node"] is None
    broken = {"gpuops_pool": "training", "kube_node_reserved_memory_mib": "lots"}  # not an int (the spec refuses it)
    part = plan.host_part("kubernetes", gpu, broken)
    assert "error" in part["kubelet_policy"]
    assert part["node"] is None


def test_unset_reservations_are_kube_node_s_defaults(tmp_path, monkeypatch):
    """Left unset in the inventory, a kubelet reservation is what kube_node's defaults file says: the plan reads it
    there (_setting, platform.role_defaults); neither it nor kube_plan keeps a copy of its own."""
    kube_node = platform.role_defaults("kube_node")
    assert set(kube_plan.RESERVATIONS.values()) <= {(name, type(value)) for name, value in kube_node.items()}
    for defaults in (REPO / "roles").glob("*/defaults/main.yml"):
        copy = tmp_path / defaults.relative_to(REPO)
        copy.parent.mkdir(parents=True)
        copy.write_text(defaults.read_text())
    (tmp_path / "roles" / "kube_node" / "defaults" / "main.yml").write_text(yaml.safe_dump(
        {**kube_node, "kube_node_reserved_memory_mib": 8192, "kube_node_eviction_memory_mib": 1000}))
    monkeypatch.setattr(platform, "COLLECTION_ROOT", tmp_path)
    platform.role_defaults.cache_clear()
    try:
        gpu = {"count": 2, "topology": _topology("a10x4_pcie_sys_2nic")}
        policy = plan.host_part("kubernetes", gpu, {"gpuops_pool": "training"})["kubelet_policy"]
    finally:
        platform.role_defaults.cache_clear()
    assert policy["system_reserved_memory"] == "7192Mi"  # 8192 reserved less the 1000 eviction threshold


# --- the kubelet policy kube_node renders: the plan's, as kube_plan.kubelet_policy gives it ---------------------

@pytest.mark.parametrize(("host", "reserved"), [("gpu-train-01", "16-17,48-49,80-81,112-113"),
                                                ("gpu-train-02", "0-1"), ("gpu-infer-01", "0-1,52-53")])
def test_kubelet_policy_in_the_plan(cluster, host, reserved):
    pool = cluster["hosts"][host]["pool"]
    ruled = kube_plan.kubelet_policy(_topology(CAPTURES[host]), pool, 2, "", 4096, 500)
    for policy in (ruled, cluster["hosts"][host]["kubelet_policy"]):
        assert policy["topology_manager_policy"] == POLICIES[host][0]
        assert policy["reserved_system_cpus"] == reserved
        assert policy["memory_manager_policy"] == ("Static" if host == "gpu-train-02" else "None")
        assert policy["system_reserved_memory"] == "3596Mi"


# --- NCCL: per host and per pool; training_stack_socket_ifname is taken into account ------------------------------

def test_pool_nccl_in_the_plan_and_the_job_template(cluster):
    hostvars = _inventory("cluster")
    assert cluster["pools"]["training"]["nccl"] == {
        "env": {"NCCL_IB_HCA": TRAINING_HCA},
        "notes": ["not nearest to any GPU, left out of NCCL_IB_HCA: mlx5_bond_0"],
    }, "mlx5_8/9 are storage NICs on gpu-train-01 but nearest to GPUs on gpu-train-02"
    assert cluster["pools"]["inference"]["nccl"]["env"] == {"NCCL_IB_DISABLE": "1"}
    # training_stack's job templates take the plan's pools as they are: no NCCL_SOCKET_IFNAME in a plan made
    # without training_stack_socket_ifname (facts never choose it), none added by the role
    config = {"plan_pools": cluster["pools"]}
    assert _job_env("training", _nodes(hostvars), **config) == {"NCCL_IB_HCA": TRAINING_HCA}
    assert _job_env("inference", _nodes(hostvars), **config) == {"NCCL_IB_DISABLE": "1"}


def test_the_job_template_takes_the_plans_nccl_not_a_second_derivation():
    nodes = [{"name": "a", "pool": "training", "topology": None}]
    planned = {"training": {"hosts": ["a"], "nccl": {"env": {"NCCL_IB_HCA": "=mlx5_0"}, "notes": ["from the plan"]}}}
    assert _job_env("training", nodes, plan_pools=planned) == {"NCCL_IB_HCA": "=mlx5_0"}
    with pytest.raises(KeyError):  # no second derivation: a pool the plan lacks (the role's inputs refuse it first)
        _job_env("training", nodes, plan_pools={})


def test_training_stack_socket_ifname_reaches_the_plan():
    hostvars = _inventory("cluster")
    for host in CAPTURES:
        hostvars[host]["training_stack_socket_ifname"] = "bond0"
    built = _cluster_plan(hostvars)
    assert built["hosts"]["gpu-train-01"]["nccl"]["env"] == {
        "NCCL_SOCKET_IFNAME": "=bond0", "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{n}" for n in range(8))}
    assert built["hosts"]["gpu-infer-01"]["nccl"]["env"] == {"NCCL_SOCKET_IFNAME": "=bond0", "NCCL_IB_DISABLE": "1"}
    assert built["pools"]["training"]["nccl"]["env"] == {"NCCL_SOCKET_IFNAME": "=bond0", "NCCL_IB_HCA": TRAINING_HCA}
    # the job template takes the plan's env as it is
    assert _job_env("training", _nodes(hostvars), plan_pools=built["pools"]) == (
        built["pools"]["training"]["nccl"]["env"])


def test_gathered_facts_never_choose_the_socket_interface_only_the_setting_does():
    # facts (ansible.cfg's fact cache supplies them even to gather_facts: false plays) never choose the interface:
    # a host's default route is not the pods' interface (no hostNetwork) nor a Compose peer's, so only
    # training_stack_socket_ifname sets NCCL_SOCKET_IFNAME, the same on every host; unset, NCCL picks its own
    hostvars = _inventory("cluster")
    hostvars["gpu-train-01"]["ansible_facts"] = {"default_ipv4": {"interface": "ens1f0"}}
    hostvars["gpu-train-02"]["ansible_facts"] = {"default_ipv4": {"interface": "ens2f0"}}
    built = _cluster_plan(hostvars)
    assert {host: "NCCL_SOCKET_IFNAME" in built["hosts"][host]["nccl"]["env"] for host in CAPTURES} == dict.fromkeys(
        CAPTURES, False)
    assert {pool: "NCCL_SOCKET_IFNAME" in part["nccl"]["env"] for pool, part in built["pools"].items()} == {
        "training": False, "inference": False}
    for host in CAPTURES:
        hostvars[host]["training_stack_socket_ifname"] = "bond0"
    built = _cluster_plan(hostvars)
    assert {host: built["hosts"][host]["nccl"]["env"]["NCCL_SOCKET_IFNAME"] for host in CAPTURES} == dict.fromkeys(
        CAPTURES, "=bond0")
    assert {pool: part["nccl"]["env"]["NCCL_SOCKET_IFNAME"] for pool, part in built["pools"].items()} == {
        "training": "=bond0", "inference": "=bond0"}


# --- compose: the member workspaces each host runs ---------------------------------------------------------------

# inventories/small-team on the HGX H100 capture: GPUs 0-3 on NUMA 0 (CPUs 0-51,104-155), 4-7 on NUMA 1
WORKSPACES = {
    "alice": {"gpus": [0, 1], "cpuset": "0-25,104-129", "memory_mb": None, "numa_nodes": [0]},
    "bob": {"gpus": [2, 3], "cpuset": "26-51,130-155", "memory_mb": None, "numa_nodes": [0]},
    "carol": {"gpus": [4, 5, 6], "cpuset": "52-90,156-194", "memory_mb": None, "numa_nodes": [1]},
    "dave": {"gpus": [7], "cpuset": "91-103,195-207", "memory_mb": None, "numa_nodes": [1]},
}
# no shared GPUs and no limits of their own in the small team's list: without the host's memory and CPUs, no limits;
# each workspace carries its member's own keys (uid 2001.., gid the uid, carol's mounts)
for _uid, (_name, _ws) in enumerate(WORKSPACES.items(), start=2001):
    _ws.update(cpus=None, shared_gpus=[], mps=None, name=_name, uid=_uid, gid=_uid, image=None, shm_size=None,
               mounts=["/srv/code/carol:/code:rw"] if _name == "carol" else None)
UNKNOWN_POOLS = {
    "memory_pool_mb": 0, "cpus_pool": 0, "problems": [],
    "source": "memory: unknown: no gpu_facts of this host and compose_stack_member_memory_pool_mb unset, so no "
              "default limits; cpus: unknown: no gpu_facts of this host and compose_stack_member_cpus_pool unset, so "
              "no default limits"}
# the OS facts gpu_facts reads beside the GPUs (gpu_host.os): a host of the HGX H100's size, 1000 GiB and 208 CPUs
HOST = {"distribution": "Ubuntu", "distribution_version": "22.04", "memtotal_mb": 1024000, "processor_vcpus": 208}


def _compose_plan(hostvars: dict, host: dict | None = None) -> dict:
    records = {"gpu01": {"gpu": {"count": 8, "source": "nvml", "fabric_manager": {"required": True},
                                 "topology": _topology("h100x8_sxm_2numa_noNIC")},
                         "host_facts": {"os": host},
                         "result": {"ok": True}, "plan": {"driver_version": "535.261.03", "cuda_version": "12.2"}}}
    fleet = {"ok": True, "platform": "compose", "source": "auto", "reason": "4 people on 8 GPUs", "gpu_count": 8}
    return _valid(plan.build_plan(fleet, records, hostvars, "2026-12-02T00:00:00+00:00",
                                  "/r/x"))


def test_member_workspaces_in_the_plan():
    hostvars = _inventory("small-team")
    built = _compose_plan(hostvars)
    expected = {"members": WORKSPACES, "shared": {}, "problems": [], "warnings": [], "gpu_total": 8,
                "sizing": UNKNOWN_POOLS}
    assert built["hosts"]["gpu01"]["workspaces"] == expected
    assert built["hosts"]["gpu01"]["node"] is None
    assert built["hosts"]["gpu01"]["kubelet_policy"] is None
    assert built["pools"] == {}, "the small team sets no gpuops_pool"


def test_the_nfs_servers_compose_stack_probes_are_in_the_plan_with_their_port_and_ipv6_host():
    """compose_stack probes the plan's servers (tasks/install.yml), parsed once: the port= of opts, an IPv6 src's host
    without its brackets; a dataset on the host's own disk or of another fstype has no server."""
    hostvars = _inventory("small-team")
    hostvars["gpu01"] = {**hostvars["gpu01"], "compose_stack_datasets": [
        {"name": "imagenet", "src": "nas.lan:/export/imagenet"},
        {"name": "coco", "src": "10.0.0.5:/coco", "fstype": "nfs", "opts": "ro,hard,port=20490"},
        {"name": "v6", "src": "[fd00::5]:/export/v6", "opts": "ro,port=2050"},
        {"name": "local", "src": ""}, {"name": "bind", "src": "/srv/x", "fstype": "none"}]}
    assert _compose_plan(hostvars)["hosts"]["gpu01"]["nfs_servers"] == [
        {"dataset": "imagenet", "host": "nas.lan", "port": 2049},
        {"dataset": "coco", "host": "10.0.0.5", "port": 20490},
        {"dataset": "v6", "host": "fd00::5", "port": 2050},
    ]


def test_member_workspaces_are_sized_on_the_hosts_memory_and_cpus():
    # the default shares of 80% of the host's memory and all its CPUs (gpu_facts' memtotal_mb, processor_vcpus), in
    # proportion to each member's GPUs; nothing else changes
    sized = _compose_plan(_inventory("small-team"), HOST)["hosts"]["gpu01"]["workspaces"]
    assert {name: (ws["memory_mb"], ws["cpus"]) for name, ws in sized["members"].items()} == {
        "alice": (204800, 52.0), "bob": (204800, 52.0), "carol": (307200, 78.0), "dave": (102400, 26.0)}
    assert {name: {**ws, "memory_mb": None, "cpus": None} for name, ws in sized["members"].items()} == WORKSPACES
    assert sized["sizing"] == {
        "memory_pool_mb": 819200, "cpus_pool": 208.0, "problems": [],
        "source": "memory: 80% of the host's 1024000 MiB (gpu_facts in preflight); cpus: 100% of the host's 208 "
                  "CPUs (gpu_facts in preflight)"}


def test_member_workspaces_pools_the_inventory_sets_win_and_an_overcommit_is_a_sizing_problem():
    hostvars = _inventory("small-team")
    hostvars["gpu01"].update(compose_stack_member_memory_pool_mb=409600, compose_stack_member_cpus_pool=0.02)
    too_small = _compose_plan(hostvars, HOST)["hosts"]["gpu01"]["workspaces"]
    assert too_small["members"] == {}
    assert too_small["sizing"]["problems"] == too_small["problems"]
    assert len(too_small["problems"]) == 1
    assert "the workspaces' cpus limits overcommit this host" in too_small["problems"][0]
    assert (too_small["sizing"]["memory_pool_mb"], too_small["sizing"]["cpus_pool"]) == (409600, 0.02)
    assert too_small["sizing"]["source"] == (
        "memory: compose_stack_member_memory_pool_mb; cpus: compose_stack_member_cpus_pool")


@pytest.mark.parametrize("value", ["lots", -1])
def test_member_workspaces_pool_that_is_not_an_amount_is_a_problem(value):
    hostvars = _inventory("small-team")
    hostvars["gpu01"]["compose_stack_member_memory_pool_mb"] = value
    part = _compose_plan(hostvars, HOST)["hosts"]["gpu01"]["workspaces"]
    assert part["members"] == {}
    assert part["problems"] == [
        f"compose_stack_member_memory_pool_mb is {value!r}; expected a number, 0 or more (0: no default limits). "
        "Fix: set compose_stack_member_memory_pool_mb to the MiB for workspaces, or leave it unset for the host's"]


def test_member_workspaces_say_what_is_wrong_on_this_host():
    hostvars = _inventory("small-team")
    hostvars["gpu01"]["gpuops_members"] = [{"name": "alice", "uid": 2001, "team": "vision", "gpus": [0, 9]}]
    part = _compose_plan(hostvars)["hosts"]["gpu01"]["workspaces"]
    assert part["members"] == {}
    assert len(part["problems"]) == 1
    assert "member alice is given GPU 9, but this host has GPUs 0, 1, 2, 3, 4, 5, 6, 7" in part["problems"][0]


def test_member_workspaces_of_a_team_no_one_checked_are_a_problem_not_a_crash():
    """A platform playbook run alone plans from the inventory without site.yml's boilerplate team check: a member
    entry the planning cannot read is one problem that points at the check."""
    hostvars = _inventory("small-team")
    hostvars["gpu01"]["gpuops_members"] = [{"uid": 2001, "team": "vision", "gpus": [0]}]
    part = _compose_plan(hostvars)["hosts"]["gpu01"]["workspaces"]
    assert part["members"] == {}
    assert part["problems"] == ["gpuops_members cannot be planned into workspaces (KeyError('name')). Fix: correct "
                                "gpuops_members; site.yml's boilerplate play names what is wrong "
                                "(gpuops.cluster.team_problems)"]


# One H200 (../shared/data/nvidia-smi/h200-driver580): its `-q -x` and `topo -m` as recorded, header underlined by
# driver 580; CPU Affinity 0-15, NUMA 0. One member on its one GPU.
H200 = ("nvidia-smi", "h200-driver580")
ONE_MEMBER = [{"name": "alice", "uid": 2001, "team": "vision", "gpus": [0]}]
ALICE_ON_H200 = {"name": "alice", "uid": 2001, "gid": 2001, "image": None, "shm_size": None, "mounts": None,
                 "gpus": [0], "cpuset": "0-15", "memory_mb": None, "numa_nodes": [0], "cpus": None,
                 "shared_gpus": [], "mps": None}


def _h200_facts(matrix: str | None, sysfs=None) -> dict:
    """The GPU facts preflight gathers on the H200 host (topology=true), ``matrix`` its `topo -m` (None: no driver,
    the PCI bus of ``sysfs`` only)."""
    outputs = {}
    if matrix is not None:
        outputs = {"nvidia-smi -q -x": (0, shared_path(*H200, "q.xml").read_text(), ""),
                   "nvidia-smi nvlink -s": (0, "", ""), "nvidia-smi topo -m": (0, matrix, "")}
    commands = Commands(outputs, binaries=("nvidia-smi",) if outputs else ())
    facts, _warnings = gpu_facts.gather_gpu_facts(nvml_loader=no_pynvml, run=commands.run, which=commands.which,
                                                  sysfs_root=str(sysfs or "/nonexistent/sys"),
                                                  proc_root="/nonexistent/proc", topology=True)
    return facts


def _one_member_workspaces(facts: dict) -> dict:
    hostvars = _inventory("small-team")["gpu01"]
    hostvars["gpuops_members"] = ONE_MEMBER
    return plan.host_part("compose", facts, hostvars)["workspaces"]


def test_one_gpu_host_h200_driver580_gets_a_cpuset_from_its_topology():
    facts = _h200_facts(shared_path(*H200, "topo-m.pipe.txt").read_text())
    assert (facts["count"], facts["topology_error"]) == (1, None)
    assert facts["gpus"][0]["cpu_affinity"] is None  # no sysfs here: the cpuset can only come from the topology
    assert _one_member_workspaces(facts) == {"members": {"alice": ALICE_ON_H200}, "shared": {}, "problems": [],
                                             "warnings": [], "gpu_total": 1, "sizing": UNKNOWN_POOLS}


def test_one_gpu_host_without_driver_gets_a_cpuset_from_sysfs(tmp_path):
    """Before the driver (source pci): the GPU's NUMA node and local_cpulist, a stand-in sysfs for the H200 host."""
    sysfs = tmp_path / "sys"
    make_pci(sysfs, "0000:00:06.0", "0x10de", "0x030200", device="0x2335", numa="0", cpus="0-15")
    facts = _h200_facts(None, sysfs)
    assert (facts["source"], facts["topology"], facts["topology_error"]) == ("pci", None, None)
    assert _one_member_workspaces(facts)["members"] == {"alice": ALICE_ON_H200}


def test_topology_without_cpu_affinity_takes_the_gpu_facts(tmp_path):
    """A matrix whose CPU Affinity is N/A (as some VMs print): the GPU facts' sysfs affinity fills in."""
    sysfs = tmp_path / "sys"
    make_pci(sysfs, "0000:00:06.0", "0x10de", "0x030200", device="0x2335", numa="0", cpus="0-15")
    matrix = shared_path(*H200, "topo-m.pipe.txt").read_text()
    assert "\t0-15\t" in matrix
    facts = _h200_facts(matrix.replace("\t0-15\t", "\tN/A\t"), sysfs)
    assert facts["topology"]["gpus"][0]["cpu_affinity"] is None
    assert _one_member_workspaces(facts)["members"] == {"alice": ALICE_ON_H200}


def test_a_plan_written_before_these_parts_is_not_a_plan_of_this_version():
    """A key is added with a new SCHEMA_VERSION (playbooks/tasks/plan.yml refuses a plan of another), so the parts
    the roles read are required: a plan.json without one of them does not validate."""
    built = _valid(_cluster_plan(_inventory("cluster")))
    host = next(iter(built["hosts"]))
    for path in (("pools",), ("gpu_sharing",), ("nodes", "registration"), ("hosts", host, "node"),
                 ("hosts", host, "workspaces"), ("hosts", host, "health_sweep"), ("hosts", host, "nfs_servers")):
        stale = json.loads(json.dumps(built))
        *parent, key = path
        node = stale
        for step in parent:
            node = node[step]
        del node[key]
        with pytest.raises(jsonschema.ValidationError, match=f"'{key}' is a required property"):
            _valid(stale)
