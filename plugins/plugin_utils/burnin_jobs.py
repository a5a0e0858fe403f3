# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""burnin.yml's launch: the all_reduce_perf command lines and the Kubernetes objects, pure builders.

nccl-tests runs more than one process only under MPI (NVIDIA/nccl-tests#121), so a pair is launched with
``mpirun`` from the first node's container to an ``sshd`` in the second node's container (its own port and a
key made for the run). On Kubernetes: a Job per node (single-node run over all its GPUs) and a PyTorchJob per
pair (Master runs mpirun, Worker runs sshd), each pinned to its node(s), with the topology's NCCL settings
(training_jobs.nccl_env).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_jobs import nccl_env

SSH_DIR = "/burnin-ssh"


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", str(name).lower()).strip("-")[:40] or "node"


def single_command(config: dict, gpus: int) -> list[str]:
    """all_reduce_perf over every GPU of one node, one process (``-g``)."""
    return [f"{config['nccl_tests_dir']}/build/all_reduce_perf", "-b", str(config["min_bytes"]),
            "-e", str(config["max_bytes"]), "-f", "2", "-g", str(int(gpus))]


def sshd_command(config: dict) -> str:
    """The second node's side of a pair: sshd on burnin_ssh_port, the run's public key only."""
    port = int(config["ssh_port"])
    return (f"mkdir -p /run/sshd /root/.ssh && cp {SSH_DIR}/id.pub /root/.ssh/authorized_keys && "
            f"chmod 600 /root/.ssh/authorized_keys && exec /usr/sbin/sshd -D -e -p {port} "
            "-o PasswordAuthentication=no -o PermitRootLogin=prohibit-password")


def mpirun_command(config: dict, hosts: list[str], gpus: int, env: dict[str, str]) -> str:
    """The first node's side: wait for the peer's sshd, then one rank per GPU on both nodes."""
    port = int(config["ssh_port"])
    rsh = f"ssh -p {port} -i {SSH_DIR}/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    exports = " ".join(f"-x {name}={shlex.quote(str(value))}" for name, value in sorted(env.items()))
    peer = shlex.quote(hosts[1])
    argv = " ".join(shlex.quote(a) for a in single_command(config, 1))
    return (f"for i in $(seq 60); do (exec 3<>/dev/tcp/{peer}/{port}) 2>/dev/null && break; sleep 2; done; "
            f"exec mpirun --allow-run-as-root --bind-to none -np {2 * int(gpus)} "
            f"-H {shlex.quote(hosts[0])}:{int(gpus)},{peer}:{int(gpus)} --mca plm_rsh_args {shlex.quote(rsh[4:])} "
            f"-x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET {exports} {argv}".replace("  ", " "))


def pair_env(topologies: list[dict | None], socket_ifname: str) -> dict[str, Any]:
    """The pair's NCCL settings: training_jobs.nccl_env over both nodes' topologies."""
    return nccl_env(topologies, socket_ifname)


def _container(config: dict, gpus: int, command: list[str], env: dict[str, str]) -> dict:
    limits: dict[str, Any] = {"nvidia.com/gpu": int(gpus)}
    if config.get("rdma_resource"):
        limits[str(config["rdma_resource"])] = 1
    container: dict[str, Any] = {
        "name": "pytorch" if config.get("_pytorch") else "nccl-tests",
        "image": str(config["image"]),
        "command": command,
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if config.get("rdma_resource"):
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return container


def _pod(config: dict, node: str, container: dict, ssh: bool) -> dict:
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(config["shm_size"])}}]
    if ssh:
        volumes.append({"name": "ssh", "secret": {"secretName": str(config["ssh_secret"]), "defaultMode": 0o400}})
        container["volumeMounts"].append({"name": "ssh", "mountPath": SSH_DIR, "readOnly": True})
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": "gpuops-burnin"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": str(node)},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
            "volumes": volumes,
        },
    }


def single_job(node: str, gpus: int, config: dict) -> dict:
    """batch/v1 Job: all_reduce_perf over the node's GPUs, pinned to the node."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    container = _container(config, gpus, single_command(config, gpus), env)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"gpuops-burnin-{_dns(node)}", "namespace": str(config["namespace"]),
                     "labels": {"app.kubernetes.io/name": "gpuops-burnin", "app.kubernetes.io/managed-by": "gpuops",
                                "gpuops.io/node": _dns(node)},
                     "annotations": {"gpuops.io/node": str(node)}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": int(config["timeout"]),
                 "ttlSecondsAfterFinished": 3600, "template": _pod(config, node, container, ssh=False)},
    }


def pair_pytorchjob(pair: list[str], gpus: int, topologies: list[dict | None], config: dict) -> dict:
    """kubeflow.org/v1 PyTorchJob: Master (mpirun) on pair[0], Worker (sshd) on pair[1]."""
    nccl = pair_env(topologies, str(config.get("socket_ifname") or ""))
    name = f"gpuops-burnin-{_dns(pair[0])}-{_dns(pair[1])}"[:63].rstrip("-")
    hosts = [f"{name}-master-0", f"{name}-worker-0"]
    cfg = {**config, "_pytorch": True}
    master = _container(cfg, gpus, ["bash", "-c", mpirun_command(config, hosts, gpus, nccl["env"])], nccl["env"])
    worker = _container(cfg, gpus, ["bash", "-c", sshd_command(config)], nccl["env"])
    specs = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": _pod(config, pair[0], master, ssh=True)},
             "Worker": {"replicas": 1, "restartPolicy": "Never", "template": _pod(config, pair[1], worker, ssh=True)}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": str(config["namespace"]),
                     "labels": {"app.kubernetes.io/name": "gpuops-burnin", "app.kubernetes.io/managed-by": "gpuops"},
                     "annotations": {"gpuops.io/pair": ",".join(pair),
                                     "gpuops.io/nccl-notes": "; ".join(nccl["notes"]) or "none"}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None", "activeDeadlineSeconds": int(config["timeout"])},
                 "pytorchReplicaSpecs": specs},
    }


def objects(nodes: list[dict], pairs: list[list[str]], config: dict) -> list[dict]:
    """Every object of a Kubernetes burn-in: a Job per node, a PyTorchJob per pair.

    nodes: [{name, gpus, topology}]. config: namespace, image, nccl_tests_dir, min_bytes, max_bytes, ssh_port,
    ssh_secret, shm_size, timeout, socket_ifname, rdma_resource ("" = none)."""
    by_name = {str(n["name"]): n for n in nodes}
    out = [single_job(n["name"], int(n["gpus"]), config) for n in nodes if int(n.get("gpus") or 0) > 0]
    for pair in pairs:
        gpus = min(int(by_name[p].get("gpus") or 0) for p in pair) or 1
        out.append(pair_pytorchjob(pair, gpus, [by_name[p].get("topology") for p in pair], config))
    return out
