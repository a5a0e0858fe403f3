"""training_jobs: NCCL settings on every real `nvidia-smi topo -m` capture with NIC rows, the PyTorchJob template."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_jobs import (
    mirror_manifest_images,
    nccl_env,
    pytorchjob,
)
from conftest import SHARED_DATA, shared_path

TOPO_DIR = SHARED_DATA / "nvidia-smi" / "topo"


def _mlx(*numbers: int) -> str:
    return "=" + ",".join(f"mlx5_{n}" for n in numbers)


# capture -> (NCCL_IB_HCA or None when NCCL must pick, NICs left out as not nearest to any GPU)
NIC_CAPTURES = {
    "a100x8_17nic_singleNUMA": (_mlx(*range(2, 18)), ["mlx5_bond_0"]),
    "a10x4_pcie_sys_2nic": (_mlx(0, 1), []),
    "dgx-a100_8gpu_10nic_nps4-numa_dgx05": (_mlx(*range(8)), ["mlx5_8", "mlx5_9"]),  # storage pair, SYS to all
    "dgx2-class_v100x16_nv6_10nic_TRUNCATED_nccl-tests78": (None, []),  # GPU4.. rows cut: links unknown
    "gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60": (None, []),  # no NIC Legend: NIC0.. are not device names
    "h100x4_vm_8nic_phb": (_mlx(*range(8)), []),
    "h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453": (None, []),  # legend cut off
    "h800x8_nv8_4nic_TERMINAL-TRUNCATED": (_mlx(0, 1, 2, 3), []),
    "pcie8_a5000_2socket_savio4_mlx5": (_mlx(0, 1), []),
}
NO_NIC_CAPTURES = [
    "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK",
    "azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK",
    "h100x8_sxm_2numa_noNIC",
    "rtx3090x8_pcie_pix-phb-sys_2socket_LEGEND-TRUNCATED_nccl1439",
]


def topology(name: str) -> dict:
    return parse_topology(shared_path("nvidia-smi", "topo", f"{name}.txt").read_text(encoding="utf-8"))


def test_every_capture_is_classified() -> None:
    """A new capture in ../shared/data must be added to one of the two tables above."""
    if not TOPO_DIR.is_dir():
        pytest.skip(f"real third-party data not present: {TOPO_DIR}")
    names = {path.stem for path in TOPO_DIR.glob("*.txt")}
    assert names == set(NIC_CAPTURES) | set(NO_NIC_CAPTURES)
    for name in NIC_CAPTURES:
        assert topology(name)["nics"], f"{name} is listed as having NIC rows"
    for name in NO_NIC_CAPTURES:
        assert not topology(name)["nics"], f"{name} is listed as having no NIC rows"


@pytest.mark.parametrize("name", sorted(NIC_CAPTURES))
def test_nccl_on_captures_with_nics(name: str) -> None:
    hca, skipped = NIC_CAPTURES[name]
    result = nccl_env([topology(name)], "ens1f0")
    assert result["env"]["NCCL_SOCKET_IFNAME"] == "=ens1f0"
    assert "NCCL_IB_DISABLE" not in result["env"], "a node with RDMA NICs must not disable InfiniBand"
    assert result["env"].get("NCCL_IB_HCA") == hca
    if hca is None:
        assert any("NCCL_IB_HCA not set" in note for note in result["notes"]), result["notes"]
    if skipped:
        assert any(", ".join(skipped) in note for note in result["notes"]), result["notes"]


@pytest.mark.parametrize("name", NO_NIC_CAPTURES)
def test_nccl_without_rdma_nic_disables_ib(name: str) -> None:
    result = nccl_env([topology(name)], "eth0")
    assert result["env"] == {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "1"}


def test_nccl_unions_pool_nodes_in_column_order() -> None:
    first = {"nics": ["mlx5_0", "mlx5_1"], "gpus": [{"nearest_nics": ["mlx5_1"]}]}
    second = {"nics": ["mlx5_0", "mlx5_1"], "gpus": [{"nearest_nics": ["mlx5_0"]}]}
    assert nccl_env([first, second], "")["env"] == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}


def _config(**extra: object) -> dict:
    # as gpuops_plan.nodes.gpu holds them: the GPUs the plan counted (the job takes them, never counts again)
    dgx = topology("dgx-a100_8gpu_10nic_nps4-numa_dgx05")
    nodes = [
        {"name": "gpu-a", "pool": "training", "gpu_count": 8, "topology": dgx},
        {"name": "gpu-b", "pool": "training", "gpu_count": 8, "topology": dgx},
        {"name": "gpu-c", "pool": "inference", "gpu_count": 8, "topology": topology("h100x8_sxm_2numa_noNIC")},
    ]
    config = {
        "nodes": nodes,
        # the plan's pools as plan.pools_part makes them: each pool's NCCL settings over its nodes' topologies, with
        # training_stack_socket_ifname; the template takes them as they are (no derivation of its own)
        "plan_pools": {pool: {"nccl": nccl_env([n["topology"] for n in nodes if n["pool"] == pool], "bond0")}
                       for pool in ("training", "inference")},
        "namespace": "kubeflow",
        "image": "registry.lan:5000/pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
        "shm_size": "64Gi",
        "mlflow_uri": "http://mlflow.mlflow.svc.cluster.local:5000",
    }
    config.update(extra)
    return config


def test_pytorchjob_template() -> None:
    job = pytorchjob("training", _config())
    assert job["spec"]["runPolicy"]["suspend"] is True, "a template must not start pods when applied"
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    pod = master["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}, "whole GPUs: all 8 of the node"
    assert pod["nodeSelector"] == {"gpuops.io/pool": "training"}
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["NCCL_IB_HCA"] == _mlx(*range(8)), "the plan's training pool"
    assert env["NCCL_SOCKET_IFNAME"] == "=bond0"
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.mlflow.svc.cluster.local:5000"
    assert container["securityContext"]["privileged"] is False


def test_pytorchjob_takes_the_fewest_gpus_the_plan_counted_in_the_pool() -> None:
    # the plan's gpu_count (facts first, then the topology, then gpu_operator_gpu_count): a node whose facts read 6
    # GPUs while its declared topology lists 8 gives pods of 6 GPUs, and so the pool's pods fit on either node
    config = _config()
    config["nodes"][1]["gpu_count"] = 6
    container = pytorchjob("training", config)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 6}
    assert container["args"][:2] == ["--nproc-per-node", "6"]


def test_pytorchjob_single_node_pool_without_nic() -> None:
    job = pytorchjob("inference", _config(gpus_per_node=2))
    assert "Worker" not in job["spec"]["pytorchReplicaSpecs"], "a one-node pool's job is its Master alone"
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["NCCL_IB_DISABLE"] == "1"
    assert container["resources"]["requests"] == {"nvidia.com/gpu": 2}


@pytest.mark.parametrize("declared", [None, {"nvlink_domains": [[0, 1, 2, 3]]}])
def test_nccl_without_known_nics_leaves_hca_to_nccl(declared: dict | None) -> None:
    result = nccl_env([declared], "eth0")
    assert result["env"] == {"NCCL_SOCKET_IFNAME": "=eth0"}
    assert "NCCL_IB_HCA not set" in result["notes"][0]


def test_mirror_manifest_images() -> None:
    deployment = {"kind": "Deployment", "spec": {"template": {"spec": {
        "containers": [{"name": "training-operator", "image": "kubeflow/training-operator:v1-855e096"}],
        "initContainers": [{"name": "init", "image": "registry.k8s.io/pause:3.10"}]}}}}
    service = {"kind": "Service", "spec": {"ports": [{"port": 8080}]}}
    out = mirror_manifest_images([deployment, service], "mirror.lan:5000")
    pod = out[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "mirror.lan:5000/kubeflow/training-operator:v1-855e096"
    assert pod["initContainers"][0]["image"] == "mirror.lan:5000/pause:3.10"
    assert out[1] == service
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].startswith("kubeflow/"), "input kept"
