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

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_jobs import nccl_env

SSH_DIR = "/burnin-ssh"


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", str(name).lower()).strip("-")[:40] or "node"


def single_command(config: dict, gpus: int) -> list[str]:
    """all_reduce_perf over every GPU of one node, one process (``-g``)."""
    return [f"{config['nccl_tests_dir']}/build/all_reduce_perf", "-b", str(config["burnin_min_bytes"]),
            "-e", str(config["burnin_max_bytes"]), "-f", "2", "-g", str(int(gpus))]


def sshd_command(config: dict) -> str:
    """The second node's side of a pair: sshd on burnin_ssh_port, the run's public key only."""
    port = int(config["burnin_ssh_port"])
    return (f"mkdir -p /run/sshd /root/.ssh && cp {SSH_DIR}/id.pub /root/.ssh/authorized_keys && "
            f"chmod 600 /root/.ssh/authorized_keys && exec /usr/sbin/sshd -D -e -p {port} "
            "-o PasswordAuthentication=no -o PermitRootLogin=prohibit-password")


def mpirun_command(config: dict, hosts: list[str], gpus: int, env: dict[str, str]) -> str:
    """The first node's side: wait for the peer's sshd, then one rank per GPU on both nodes."""
    port = int(config["burnin_ssh_port"])
    rsh = f"ssh -p {port} -i {SSH_DIR}/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    exports = " ".join(f"-x {name}={shlex.quote(str(value))}" for name, value in sorted(env.items()))
    peer = shlex.quote(hosts[1])
    argv = " ".join(shlex.quote(a) for a in single_command(config, 1))
    return (f"for i in $(seq 60); do (exec 3<>/dev/tcp/{peer}/{port}) 2>/dev/null && break; sleep 2; done; "
            f"exec mpirun --allow-run-as-root --bind-to none -np {2 * int(gpus)} "
            f"-H {shlex.quote(hosts[0])}:{int(gpus)},{peer}:{int(gpus)} --mca plm_rsh_args {shlex.quote(rsh[4:])} "
            f"-x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET {exports} {argv}".replace("  ", " "))


def _container(config: dict, gpus: int, command: list[str], env: dict[str, str]) -> dict:
    limits: dict[str, Any] = {"nvidia.com/gpu": int(gpus)}
    if config.get("burnin_rdma_resource"):
        limits[str(config["burnin_rdma_resource"])] = 1
    container: dict[str, Any] = {
        "name": "pytorch" if config.get("_pytorch") else "nccl-tests",
        "image": str(config["image"]),
        "command": command,
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if config.get("burnin_rdma_resource"):
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return container


def _pod(config: dict, node: str, container: dict, ssh: bool) -> dict:
    shm = {"medium": "Memory", "sizeLimit": str(config["burnin_shm_size"])}
    volumes: list[dict] = [{"name": "dshm", "emptyDir": shm}]
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
        "metadata": {"name": f"gpuops-burnin-{_dns(node)}", "namespace": str(config["burnin_namespace"]),
                     "labels": {"app.kubernetes.io/name": "gpuops-burnin", "app.kubernetes.io/managed-by": "gpuops",
                                "gpuops.io/node": _dns(node)},
                     "annotations": {"gpuops.io/node": str(node)}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": int(config["burnin_timeout"]),
                 "ttlSecondsAfterFinished": 3600, "template": _pod(config, node, container, ssh=False)},
    }


def pair_nccl(topologies: list[dict | None], socket_ifname: str) -> dict:
    """A pair's NCCL settings: training_jobs.nccl_env over its nodes' topologies, with NCCL_SOCKET_IFNAME as the plan
    holds it (``=<interface>``, gpuops_plan.hosts.<host>.nccl.env; "" leaves it to NCCL)."""
    nccl = nccl_env(topologies, "")
    if socket_ifname:
        nccl["env"]["NCCL_SOCKET_IFNAME"] = socket_ifname
    return nccl


def pair_pytorchjob(pair: list[str], gpus: int, topologies: list[dict | None], config: dict) -> dict:
    """kubeflow.org/v1 PyTorchJob: Master (mpirun) on pair[0], Worker (sshd) on pair[1]."""
    nccl = pair_nccl(topologies, str(config.get("socket_ifname") or ""))
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
        "metadata": {"name": name, "namespace": str(config["burnin_namespace"]),
                     "labels": {"app.kubernetes.io/name": "gpuops-burnin", "app.kubernetes.io/managed-by": "gpuops"},
                     "annotations": {"gpuops.io/pair": ",".join(pair),
                                     "gpuops.io/nccl-notes": "; ".join(nccl["notes"]) or "none"}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None", "activeDeadlineSeconds": int(config["burnin_timeout"])},
                 "pytorchReplicaSpecs": specs},
    }


def objects(nodes: list[dict], pairs: list[list[str]], config: dict) -> list[dict]:
    """Every object of a Kubernetes burn-in: a Job per node, a PyTorchJob per pair.

    nodes: [{name, gpus, topology}]. config: _burnin_config (roles/burnin/vars)."""
    by_name = {str(n["name"]): n for n in nodes}
    out = [single_job(n["name"], int(n["gpus"]), config) for n in nodes if int(n.get("gpus") or 0) > 0]
    for pair in pairs:
        gpus = min(int(by_name[p].get("gpus") or 0) for p in pair) or 1
        out.append(pair_pytorchjob(pair, gpus, [by_name[p].get("topology") for p in pair], config))
    return out


# The host's own tools (issue 38): nccl-tests (MPI=0, the single-node run) and nvbandwidth, built from their pinned
# source releases where the host lacks them, into <tools_dir>/<tool>-<version>-cuda<X.Y>[-nccl<X.Y.Z>]-sm<archs>/,
# whose stamp file makes a later burn-in use the build instead of building again.
_WHEEL_VERSION = re.compile(r"-([0-9]+(?:[.][0-9]+)+)-py3")
STAMP = ".gpuops-built"


def tools(probe: str, config: dict, gpus: int, platform: str) -> dict:
    """What this host runs the single-node checks with, and what burn-in builds for it: the filter
    gpuops.cluster.burnin_tools (plugins/filter/burnin_tools.yml documents the probe's keys and the answer).
    config: _burnin_config (roles/burnin/vars). nccl-tests is needed on Compose with two GPUs or more (Kubernetes
    runs it in a Job of burnin_image)."""
    found = {k.strip(): v.strip() for k, _eq, v in (ln.partition("=") for ln in (probe or "").splitlines()) if _eq}
    cuda, release = found.get("cuda", ""), found.get("cuda_release", "")
    archs = sorted({c.replace(".", "") for c in found.get("caps", "").split() if re.fullmatch(r"[0-9]+[.][0-9]+", c)})
    tools_dir = str(config["burnin_tools_dir"]).rstrip("/")
    arch = found.get("arch", "")
    wheel = ({"url": str(config["burnin_nccl_wheel_url"]),
              "checksum": str(config.get("burnin_nccl_wheel_checksum") or "")}
             if config.get("burnin_nccl_wheel_url") else (config.get("nccl_wheels") or {}).get(arch))
    named = _WHEEL_VERSION.search(str(wheel["url"]).rsplit("/", 1)[-1]) if wheel else None
    wheel_version = named.group(1) if named else "unknown"
    nccl_home = str(config.get("burnin_nccl_home") or f"{tools_dir}/nccl-{wheel_version}/nvidia/nccl")
    nccl_version = found.get("nccl_version") if config.get("burnin_nccl_home") else wheel_version
    sm = "sm" + "-".join(archs)
    needs = []
    if not found.get("nvbandwidth"):
        needs.append("nvbandwidth")
    if platform == "compose" and int(gpus) >= 2 and not found.get("all_reduce_perf"):  # noqa: PLR2004
        needs.append("nccl-tests")
    out: dict[str, Any] = {"cuda": cuda, "cuda_release": release, "archs": archs, "nccl_home": nccl_home,
                           "gencode": " ".join(f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs),
                           "nvbandwidth": found.get("nvbandwidth", ""), "env": {}, "build": [], "nccl_wheel": None,
                           "all_reduce_perf": found.get("all_reduce_perf", ""), "problems": []}
    if not needs or not boolean(config.get("burnin_tools_build"), strict=False):
        return out
    missing = []
    if not (cuda and release):
        where = config.get("burnin_cuda_home") or "/usr/local/cuda, /usr/local/cuda-*"
        missing.append(f"no CUDA toolkit (bin/nvcc) at {where}")
    if not archs:
        read = found.get("caps", "")
        missing.append(f"no compute capability from nvidia-smi --query-gpu=compute_cap (read: '{read}')")
    if "nccl-tests" in needs and not config.get("burnin_nccl_home") and not wheel:
        missing.append(f"no NCCL: burnin_nccl_home is unset and no wheel is pinned for the architecture '{arch}' "
                       "(set burnin_nccl_home, or burnin_nccl_wheel_url with burnin_nccl_wheel_checksum)")
    if missing:
        out["problems"].append(
            f"burn-in builds {' and '.join(needs)} on this host (not found in PATH) but finds {'; '.join(missing)}. "
            "Fix: install the CUDA toolkit (NVIDIA's cuda-toolkit-<X>-<Y> package) or set burnin_cuda_home to it; or "
            "install the tools yourself (all_reduce_perf in PATH, burnin_nvbandwidth); or set burnin_tools_build: "
            "false to burn in without them (their checks are then UNKNOWN)")
        return out
    if "nvbandwidth" in needs:
        # The release as roles/burnin/vars (_burnin_sources) gives it: tool, version, url, checksum, pin.
        source = dict(config["sources"]["nvbandwidth"])
        folder = f"{tools_dir}/nvbandwidth-{source['version']}-cuda{release}-{sm}"
        out["nvbandwidth"] = f"{folder}/build/nvbandwidth"
        out["build"].append({
            **source, "dir": folder, "archive": f"{folder}.tar.gz", "stamp": f"{folder}/{STAMP}",
            "binary": out["nvbandwidth"],
            "argv": [["cmake", "-S", folder, "-B", f"{folder}/build", f"-DCMAKE_CUDA_COMPILER={cuda}/bin/nvcc",
                      f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}"],
                     ["make", "-C", f"{folder}/build", "-j"]]})
    if "nccl-tests" in needs:
        # The one release of the pairs' image and validate too, fetched to its one file (roles/burnin/vars:
        # _burnin_nccl_tests: tool, version, url, checksum, archive, pin).
        source = dict(config["nccl_tests"])
        folder = f"{tools_dir}/nccl-tests-{source['version']}-cuda{release}-nccl{nccl_version or 'unknown'}-{sm}"
        out["all_reduce_perf"] = f"{folder}/build/all_reduce_perf"
        out["env"] = {"LD_LIBRARY_PATH": f"{nccl_home}/lib:{cuda}/lib64"}
        out["build"].append({
            **source, "dir": folder, "stamp": f"{folder}/{STAMP}", "binary": out["all_reduce_perf"],
            "argv": [["make", "-C", folder, "-j", "MPI=0", f"CUDA_HOME={cuda}", f"NCCL_HOME={nccl_home}",
                      f"NVCC_GENCODE={out['gencode']}"]]})
        if not config.get("burnin_nccl_home"):
            # A source release too (tasks/sources.yml): a zip, unpacked as it is, with its checksum always.
            folder = f"{tools_dir}/nccl-{wheel_version}"
            out["nccl_wheel"] = dict(wheel, tool="nccl", version=wheel_version, dir=folder, archive=f"{folder}.whl",
                                     pin={}, extra_opts=[], creates=f"{nccl_home}/include/nccl.h")
    built = set(found.get("built", "").split())
    out["build"] = [b for b in out["build"] if b["stamp"] not in built]
    if not any(b["tool"] == "nccl-tests" for b in out["build"]):
        out["nccl_wheel"] = None
    return out
