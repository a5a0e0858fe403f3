# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Training-pool PyTorchJob templates and their NCCL settings, from the nodes' topologies: pure builders. The NCCL
settings (``nccl_env``: NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME, and when NCCL picks the HCAs itself) are
described once, in docs/kubernetes.md; the plan (``gpuops_plan``) computes them for each host and pool, and a pool's
job template takes the plan's as they are.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import images

_PLACEHOLDER = re.compile(r"^NIC[0-9]+$")


def nccl_env(topologies: list[dict | None], socket_ifname: str) -> dict[str, Any]:
    """``{"env": {NAME: value}, "notes": [...]}`` for nodes with these topologies (gpu_facts' shape), bootstrapping
    on ``socket_ifname`` ("" = NCCL picks)."""
    env: dict[str, str] = {"NCCL_SOCKET_IFNAME": f"={socket_ifname}"} if socket_ifname else {}
    notes: list[str] = []
    nics: list[str] = []
    hcas: list[str] = []
    unknown = False
    undeclared = [t for t in topologies if not isinstance(t, dict) or "nics" not in t]
    if undeclared or not topologies:
        notes.append("the NICs of some nodes are not known (no topology with 'nics'): NCCL_IB_HCA "
                     "not set, NCCL selects the HCAs itself; run preflight on the hosts or declare 'nics'")
        return {"env": env, "notes": notes}
    for topology in topologies:
        for nic in topology.get("nics") or []:
            if nic not in nics:
                nics.append(nic)
        for gpu in topology.get("gpus") or []:
            nearest = gpu.get("nearest_nics") or []
            if topology.get("nics") and not nearest:
                unknown = True
            hcas.extend(nic for nic in nearest if nic not in hcas)
    if not nics:
        env["NCCL_IB_DISABLE"] = "1"
        notes.append("no NIC in the topology: NCCL_IB_DISABLE=1, NCCL uses TCP sockets")
        return {"env": env, "notes": notes}
    placeholders = [nic for nic in nics if _PLACEHOLDER.match(nic)]
    if placeholders or unknown:
        why = (f"NIC columns without names ({', '.join(placeholders)}: no NIC Legend in the capture)"
               if placeholders else "a GPU-NIC link is unknown in the capture")
        notes.append(f"NCCL_IB_HCA not set: {why}; NCCL selects the HCAs itself")
        return {"env": env, "notes": notes}
    ordered = [nic for nic in nics if nic in hcas]
    env["NCCL_IB_HCA"] = "=" + ",".join(ordered)
    skipped = [nic for nic in nics if nic not in hcas]
    if skipped:
        notes.append(f"not nearest to any GPU, left out of NCCL_IB_HCA: {', '.join(skipped)}")
    return {"env": env, "notes": notes}


def pytorchjob(pool: str, config: dict) -> dict[str, Any]:
    """A suspended PyTorchJob template for training pool ``pool``: whole GPUs, GPU-taint toleration, pool
    nodeSelector, /dev/shm in memory, NCCL from the pool's topology and MLflow's in-cluster URI.

    config: nodes (``gpuops_plan.nodes.gpu``: name, pool, gpu_count), namespace, image, gpus_per_node (0 = the
    fewest GPUs a node of the pool has, as the plan counted them), shm_size, mlflow_uri, and plan_pools
    (``gpuops_plan.pools``), whose NCCL settings the job takes as they are. One Worker per pool node beyond the
    first: a one-node pool's job is its Master alone.
    """
    nodes = [n for n in config.get("nodes") or [] if n.get("pool") == pool]
    nccl = config["plan_pools"][pool]["nccl"]  # a pool no GPU node is in: refused by training_stack's inputs
    gpus = int(config.get("gpus_per_node") or 0) or min((int(n.get("gpu_count") or 0) for n in nodes), default=0) or 1
    env = [{"name": k, "value": v} for k, v in sorted(nccl["env"].items())]
    env.append({"name": "MLFLOW_TRACKING_URI", "value": str(config["mlflow_uri"])})
    container = {
        "name": "pytorch",  # the Training Operator finds the main container by this name
        "image": str(config["image"]),
        "command": ["torchrun"],
        "args": ["--nproc-per-node", str(gpus), "/workspace/train.py"],
        "env": env,
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
    }
    pod = {
        "metadata": {"labels": {"gpuops.io/pool": pool}},
        "spec": {
            "nodeSelector": {"gpuops.io/pool": pool},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(config["shm_size"])}}],
        },
    }
    workers = len(nodes) - 1
    replica = {"restartPolicy": "OnFailure", "template": pod}
    specs: dict[str, Any] = {"Master": {"replicas": 1, **replica}}
    if workers > 0:
        specs["Worker"] = {"replicas": workers, **replica}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": f"{pool}-template",
            "namespace": str(config["namespace"]),
            "labels": {"gpuops.io/pool": pool, "app.kubernetes.io/managed-by": "gpuops"},
            "annotations": {"gpuops.io/nccl-notes": "; ".join(nccl["notes"]) or "none"},
        },
        "spec": {
            "runPolicy": {"suspend": True, "cleanPodPolicy": "None"},
            "nprocPerNode": str(gpus),
            "pytorchReplicaSpecs": specs,
        },
    }


_POD_TEMPLATE_KINDS = frozenset(("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"))


def mirror_manifest_images(objects: list[dict], mirror: str) -> list[dict]:
    """Upstream manifests (e.g. the Training Operator's) with every container image through ``mirror``
    (``images.mirror_image``, the one registry-mirror rule)."""
    out = []
    for original in objects:
        obj = copy.deepcopy(original)
        spec = obj.get("spec") or {}
        if obj.get("kind") in _POD_TEMPLATE_KINDS:
            pod = (spec.get("template") or {}).get("spec") or {}
            for key in ("initContainers", "containers"):
                for container in pod.get(key) or []:
                    if container.get("image"):
                        container["image"] = images.mirror_image(container["image"], mirror)
        out.append(obj)
    return out
