"""burnin.yml's Kubernetes objects (plugins/plugin_utils/burnin_jobs.py): a Job per node and a PyTorchJob per pair,
validated strictly against the real schemas (kubernetes-validate at the pinned version; the PyTorchJob CRD of
../shared/data/crds), with the topology's NCCL settings from real `nvidia-smi topo -m` captures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))  # the collection in place
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin_jobs
from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin import pair_schedule
from conftest import SHARED_DATA
from validator import problems

CONFIG = {"burnin_namespace": "gpuops-burnin", "image": "registry.lan:5000/gpuops/nccl-tests-mpi:2.19.6",
          "nccl_tests_dir": "/opt/nccl-tests", "burnin_min_bytes": "8M", "burnin_max_bytes": "1G",
          "burnin_ssh_port": 2222, "ssh_secret": "gpuops-burnin-ssh", "burnin_shm_size": "16Gi",
          "burnin_timeout": 1800, "socket_ifname": "=ens1f0", "burnin_rdma_resource": "rdma/rdma_shared_device_a"}


def _topology(name: str) -> dict:
    path = SHARED_DATA / "nvidia-smi" / "topo" / f"{name}.txt"
    if not path.is_file():
        pytest.skip(f"real third-party data not present: {path}")
    return parse_topology(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    dgx = _topology("dgx-a100_8gpu_10nic_nps4-numa_dgx05")
    nodes = [{"name": f"dgx-{i}", "gpus": 8, "topology": dgx} for i in range(1, 6)]
    return burnin_jobs.objects(nodes, pair_schedule([n["name"] for n in nodes]), CONFIG)


def test_every_object_is_valid_against_the_real_schemas(objects) -> None:
    assert [o["kind"] for o in objects].count("Job") == 5  # noqa: PLR2004
    assert [o["kind"] for o in objects].count("PyTorchJob") == 10  # noqa: PLR2004  (5 nodes: ring + offset 2)
    for obj in objects:
        assert problems(obj) == [], obj["metadata"]["name"]


def test_the_validation_refuses_a_wrong_field(objects) -> None:
    """The schemas are really applied: a misplaced field in either kind is a problem."""
    job = next(o for o in objects if o["kind"] == "Job")
    assert problems({**job, "spec": {**job["spec"], "replicas": 1}})
    pytorch = next(o for o in objects if o["kind"] == "PyTorchJob")
    specs = pytorch["spec"]["pytorchReplicaSpecs"]
    wrong = {**specs, "Master": {**specs["Master"], "replicas": "1"}}
    assert problems({**pytorch, "spec": {**pytorch["spec"], "pytorchReplicaSpecs": wrong}})


def test_pair_job_pins_each_side_and_carries_the_topology_nccl_settings(objects) -> None:
    job = next(o for o in objects if o["kind"] == "PyTorchJob")
    master, worker = (job["spec"]["pytorchReplicaSpecs"][r]["template"]["spec"] for r in ("Master", "Worker"))
    assert master["nodeSelector"] == {"kubernetes.io/hostname": "dgx-1"}
    assert worker["nodeSelector"] == {"kubernetes.io/hostname": "dgx-2"}
    env = {e["name"]: e["value"] for e in master["containers"][0]["env"]}
    # DGX A100: the 8 compute HCAs nearest the GPUs, the storage pair left out (training_jobs.nccl_env).
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert env["NCCL_SOCKET_IFNAME"] == "=ens1f0"
    command = master["containers"][0]["command"][-1]
    assert "mpirun" in command
    assert "-np 16" in command
    assert "-x NCCL_IB_HCA==mlx5_0" in command
    assert f"{job['metadata']['name']}-worker-0" in command
    assert "sshd" in worker["containers"][0]["command"][-1]
    assert master["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}
    assert master["containers"][0]["name"] == "pytorch"


def test_single_node_job_runs_all_gpus_on_its_node(objects) -> None:
    job = next(o for o in objects if o["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "dgx-1"}
    assert pod["containers"][0]["command"][-2:] == ["-g", "8"]
    assert job["metadata"]["annotations"]["gpuops.io/node"] == "dgx-1"
