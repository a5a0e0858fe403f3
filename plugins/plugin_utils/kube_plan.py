# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Kubernetes cluster decisions: kubelet policy from GPU topology, CIDR checks, version and shape checks.

Pure functions, no Ansible imports, shared by the ``gpuops.cluster.kube_*`` filters (render, assert) and
their unit tests. Problems come back as sentences naming the variable, the value found, what is allowed
and the fix; the callers refuse the run with them before any host changes.

Kubelet policy (one decision per node, from the node's topology (gpu_facts') or the inventory's
``gpuops_gpu_topology`` declaration, which has the same shape: ``nvlink_domains``, ``numa_groups`` and
optionally ``gpus`` with ``cpu_affinity`` and ``numa_groups[].cpus``):

* inference pool: ``best-effort`` (a serving pod's GPU need not share a NUMA node with its CPUs);
* training pool, every NVLink domain inside one NUMA node: ``single-numa-node`` with the memory manager's
  ``Static`` policy and ``reservedMemory`` split over the GPU NUMA nodes;
* training pool otherwise (a domain spans nodes, or a GPU's node is unknown): ``restricted``;
* always ``topologyManagerScope: pod``, ``cpuManagerPolicy: static`` with ``reservedSystemCPUs``
  (the first CPUs of each GPU NUMA node's affinity list, or the operator's explicit list).

A node's registration (``node_registration``: labels, annotations, taints) follows from its policy and, on a GPU
node, the plan's sweep form (``gpuops.io/gpu-health-sweep``); kube_node's render and the plan
(``gpuops_plan.hosts[<host>].node``) both call it. ``kubeadm_registration`` is kubeadm's section of it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping

from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import format_cpu_list, parse_cpu_list
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import role_defaults

POOLS = ("training", "inference")
SUPPORTED_MINORS = (31, 37)  # kubeadm v1beta4 needs 1.31+; kubernetes-validate ships schemas up to 1.37
SINGLE_NUMA = "single-numa-node"
RESTRICTED = "restricted"
BEST_EFFORT = "best-effort"
FALLBACK_RESERVED_CPUS = "0-1"
# The kubelet reservations: kubelet_policy's keyword -> the kube_node variable that sets it and its type (kube_node's
# argument spec). Their defaults have one home, kube_node's defaults, read by the plan where the inventory sets none.
RESERVATIONS = {
    "reserved_cpus_per_numa": ("kube_node_reserved_cpus_per_numa", int),
    "reserved_system_cpus": ("kube_node_reserved_system_cpus", str),
    "reserved_memory_mib": ("kube_node_reserved_memory_mib", int),
    "eviction_memory_mib": ("kube_node_eviction_memory_mib", int),
}
LABEL_MAX = 63
# A GPU node's label naming its one scheduled GPU health sweep (plan.health_sweep's form); kube_monitoring's DaemonSet
# selects the value "daemonset" (roles/kube_monitoring/templates/gpu-health-sweep.yaml.j2).
HEALTH_SWEEP_LABEL = "gpuops.io/gpu-health-sweep"
_RELEASE = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+$")


def release_problem(variable: str, value: object, role: str) -> str | None:
    """The one pin rule of the add-ons' releases (Calico's and the training operator's tags, the GPU Operator's and
    kube-prometheus-stack's charts): None for one exact release X.Y.Z spelt as ``role``'s default of it is (a git tag
    is matched letter for letter, 'v' included), else the refusal. No prerelease: we test releases."""
    like = str(role_defaults(role)[variable])
    text = value if isinstance(value, str) else ""
    if _RELEASE.match(text) and text.startswith("v") == like.startswith("v"):
        return None
    return (f"{variable} is {value!r}: expected one exact release spelt as {like!r} is (no range, no 'latest', no "
            "prerelease, not empty); fix: pin the release you tested")


def kube_version_problem(version: object, name: str = "kube_version") -> str | None:
    """None for an exact ``1.MINOR.PATCH`` inside SUPPORTED_MINORS, else the refusal."""
    low, high = SUPPORTED_MINORS
    fix = f"pin an exact release such as 1.{high - 3}.2 (see https://kubernetes.io/releases/)"
    if not isinstance(version, str):
        return f"{name} is {version!r} ({type(version).__name__}): expected a quoted string 'X.Y.Z'; {fix}"
    parts = version.split(".")
    if version.startswith("v") or len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):  # noqa: PLR2004
        return f"{name} is '{version}': expected an exact release 'X.Y.Z' (no 'v', no 'latest', no minor only); {fix}"
    major, minor = int(parts[0]), int(parts[1])
    if major != 1 or not low <= minor <= high:
        return f"{name} is '{version}': supported are 1.{low}.x to 1.{high}.x (kubeadm v1beta4 API); {fix}"
    return None


def control_plane_problem(count: int, endpoint: str, name: str = "kube_control_plane") -> str | None:
    """1 control plane, or 3 with an endpoint (stacked etcd needs an odd quorum)."""
    if count == 1 or (count == 3 and endpoint):  # noqa: PLR2004
        return None
    if count == 3:  # noqa: PLR2004
        return (
            f"{name} has 3 hosts but kube_control_plane_endpoint is empty: 3 control planes need a stable "
            "address (a load balancer or VIP, host:port) that every node joins through; set "
            "kube_control_plane_endpoint: cp.example.internal:6443"
        )
    return (
        f"{name} has {count} hosts: expected 1, or 3 (stacked etcd needs an odd quorum; 2 is less available "
        "than 1); put 1 or 3 hosts in the kube_control_plane group"
    )


def cidr_problems(pod_cidr: str, service_cidr: str, node_addresses: dict[str, str]) -> list[str]:
    """Refusals for malformed CIDRs, pod/service overlap and node addresses inside either range."""
    problems, nets = [], {}
    for name, value in (("kube_pod_cidr", pod_cidr), ("kube_service_cidr", service_cidr)):
        try:
            nets[name] = ipaddress.ip_network(str(value), strict=True)
        except ValueError as exc:
            problems.append(f"{name} is '{value}': not a network address with prefix ({exc}); e.g. 10.244.0.0/16")
    if problems:
        return problems
    pod, svc = nets["kube_pod_cidr"], nets["kube_service_cidr"]
    if pod.version == svc.version and pod.overlaps(svc):
        problems.append(
            f"kube_pod_cidr {pod} overlaps kube_service_cidr {svc}: pods and services need separate ranges; "
            "pick non-overlapping private ranges, e.g. 10.244.0.0/16 and 10.96.0.0/12"
        )
    for host, address in sorted(node_addresses.items()):
        try:
            ip = ipaddress.ip_address(str(address))
        except ValueError:
            continue  # a DNS name: the address is not known on the controller
        for name, net in (("kube_pod_cidr", pod), ("kube_service_cidr", svc)):
            if ip.version == net.version and ip in net:
                problems.append(
                    f"{name} {net} contains the address {ip} of node {host}: traffic to that node would be "
                    f"routed into the cluster network; choose a {name} outside the node network"
                )
    return problems


def _cpus(text: str | None) -> list[int]:
    """The CPUs of a CPU list; [] for None or a damaged list (a cut capture)."""
    try:
        return parse_cpu_list(text) if text else []
    except ValueError:
        return []


def _numa_of_gpus(topology: dict) -> dict[int, int | None]:
    numa: dict[int, int | None] = {}
    for group in topology.get("numa_groups") or []:
        for gpu in group.get("gpus") or []:
            numa[int(gpu)] = int(group["numa_node"])
    for gpu in topology.get("gpus") or []:
        numa.setdefault(int(gpu["index"]), gpu.get("numa_node"))
    for domain in topology.get("nvlink_domains") or []:
        for gpu in domain:
            numa.setdefault(int(gpu), None)
    return numa


def _numa_cpus(topology: dict) -> dict[int, list[int]]:
    cpus: dict[int, set[int]] = {}
    for group in topology.get("numa_groups") or []:
        cpus.setdefault(int(group["numa_node"]), set()).update(_cpus(group.get("cpus")))
    for gpu in topology.get("gpus") or []:
        if gpu.get("numa_node") is not None:
            cpus.setdefault(int(gpu["numa_node"]), set()).update(_cpus(gpu.get("cpu_affinity")))
    return {node: sorted(found) for node, found in cpus.items() if found}


def nvlink_domains_label(domains: list[list[int]]) -> str:
    """Label value for ``gpuops.io/nvlink-domains``: domains joined by ``_``, GPUs as ranges with ``.``.

    [[0..7]] -> ``0-7``; [[0, 1], [2, 3]] -> ``0-1_2-3``; [[0, 2]] -> ``0.2``; no GPUs -> ``none``.
    """
    text = "_".join(format_cpu_list([int(gpu) for gpu in domain]).replace(",", ".") for domain in domains if domain)
    if len(text) > LABEL_MAX:
        text = f"{len(domains)}-domains"
    return text or "none"


def _reserved_memory(nodes: list[int], total_mib: int) -> list[dict]:
    share, rest = divmod(total_mib, len(nodes))
    return [
        {"numaNode": node, "limits": {"memory": f"{share + (rest if position == 0 else 0)}Mi"}}
        for position, node in enumerate(nodes)
    ]


def kubelet_policy(
    topology: dict | None,
    pool: str,
    reserved_cpus_per_numa: int,
    reserved_system_cpus: str,
    reserved_memory_mib: int,
    eviction_memory_mib: int,
) -> dict:
    """The KubeletConfiguration policy fields for one node, with a one-sentence ``reason``; the reservations are the
    host's kube_node settings (RESERVATIONS; the plan passes the inventory's, else kube_node's defaults), which
    kube_node's inputs check (the reserved memory exceeds the eviction threshold) in the run's inputs pass."""
    if pool not in POOLS:
        raise ValueError(f"gpuops_pool is {pool!r}: expected one of {', '.join(POOLS)}")
    topology = topology or {}
    domains = [sorted(int(gpu) for gpu in domain) for domain in topology.get("nvlink_domains") or []]
    numa = _numa_of_gpus(topology)
    gpu_nodes = sorted({node for node in numa.values() if node is not None})
    if pool == "inference":
        policy, reason = BEST_EFFORT, "inference pool: best-effort (serving pods are not NUMA-bound)"
    elif not numa:
        policy, reason = RESTRICTED, "training pool, but no GPU topology is known for this node: restricted"
    else:
        unknown = sorted(gpu for gpu, node in numa.items() if node is None)
        spanning = [d for d in domains if len({numa.get(gpu) for gpu in d}) > 1]
        if unknown:
            policy = RESTRICTED
            reason = f"training pool; the NUMA node of GPU {format_cpu_list(unknown)} is unknown: restricted"
        elif spanning:
            policy = RESTRICTED
            spans = "; ".join(
                f"GPUs {format_cpu_list(d)} on NUMA nodes {format_cpu_list([numa[g] for g in d])}" for d in spanning
            )
            reason = f"training pool; an NVLink domain spans NUMA nodes ({spans}): restricted"
        else:
            policy = SINGLE_NUMA
            reason = (
                f"training pool; each NVLink domain sits in one NUMA node (GPU NUMA nodes "
                f"{format_cpu_list(gpu_nodes)}): single-numa-node"
            )
    numa_cpus = _numa_cpus(topology)
    if reserved_system_cpus:
        cpus, cpu_reason = reserved_system_cpus, "reservedSystemCPUs set in the inventory"
    elif numa_cpus:
        chosen = [cpu for node in sorted(numa_cpus) for cpu in numa_cpus[node][:reserved_cpus_per_numa]]
        cpus = format_cpu_list(chosen)
        cpu_reason = f"reservedSystemCPUs: the first {reserved_cpus_per_numa} CPUs of each GPU NUMA node"
    else:
        cpus, cpu_reason = FALLBACK_RESERVED_CPUS, "reservedSystemCPUs: CPU affinity unknown, reserving 0-1"
    return {
        "topology_manager_policy": policy,
        "topology_manager_scope": "pod",
        "cpu_manager_policy": "static",
        "reserved_system_cpus": cpus,
        "memory_manager_policy": "Static" if policy == SINGLE_NUMA else "None",
        "reserved_memory": _reserved_memory(gpu_nodes or [0], reserved_memory_mib) if policy == SINGLE_NUMA else [],
        "system_reserved_memory": f"{reserved_memory_mib - eviction_memory_mib}Mi",
        "nvlink_domains_label": nvlink_domains_label(domains),
        "reason": f"{reason}; {cpu_reason}",
    }


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
# A plan part that no longer matches the settings it was made from (plan.json read back, the inventory changed).
STALE_PLAN = ("the plan was made before the inventory changed; fix: run playbooks/preflight.yml again (it writes a "
              "new plan)")


def node_registration(policy: dict | None, pool: str, control_plane: bool = False, schedulable: bool = False,
                      health_sweep: str | None = None) -> dict:
    """The labels, annotations and taints a node registers with (kube_node's ``kube_node_registration``).

    ``policy``: the node's kubelet policy (``kubelet_policy``) on a GPU node, None on a CPU node or control plane. A
    GPU node gets the GPU taint, labels naming its pool, NVLink domains and topology policy, and the policy's reason
    as an annotation; a control plane that is not ``schedulable`` gets the control-plane taint. ``health_sweep``:
    the GPU node's sweep form the plan decided (plan.health_sweep's ``form``), its ``HEALTH_SWEEP_LABEL``:
    kube_monitoring's DaemonSet selects the nodes labelled ``daemonset``, so a node whose form is ``timer`` or
    ``none`` gets no pod. Every GPU node carries its form (not only ``daemonset``): a node moved to the timer is
    relabelled, where a label only removed would stay (labels are merged).
    """
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    taints: list[dict] = []
    if policy:
        labels = {
            "nvidia.com/gpu": "true",
            "gpuops.io/pool": str(pool),
            "gpuops.io/nvlink-domains": policy["nvlink_domains_label"],
            "gpuops.io/topology-policy": policy["topology_manager_policy"],
        }
        if health_sweep:
            labels[HEALTH_SWEEP_LABEL] = str(health_sweep)
        annotations = {"gpuops.io/kubelet-policy": policy["reason"]}
        taints.append(dict(GPU_TAINT))
    if control_plane and not schedulable:
        taints.append(dict(CONTROL_PLANE_TAINT))
    return {"labels": labels, "annotations": annotations, "taints": taints}


def kubeadm_registration(name: str, registration: Mapping) -> dict:
    """kubeadm v1beta4's ``nodeRegistration`` for node ``name`` from its registration (labels, annotations, taints:
    ``node_registration``'s), the section kube_control_plane's init and kube_join's join both render (filter
    gpuops.cluster.kubeadm_node_registration). The labels travel as the kubelet's ``--node-labels``
    (``kubeletExtraArgs``), left out when there are none.
    """
    if not isinstance(registration, Mapping) or "labels" not in registration or "taints" not in registration:
        raise ValueError(
            f"the node registration of {name} is {registration!r}: expected a mapping with labels, annotations "
            "and taints. Fix: run the kube_node role (or its render entry point, which sets kube_node_registration) "
            "on this host first"
        )
    labels, taints = registration["labels"], registration["taints"]
    section: dict = {"name": name, "criSocket": CRI_SOCKET, "taints": list(taints)}
    if labels:
        value = ",".join(f"{key}={label}" for key, label in labels.items())
        section["kubeletExtraArgs"] = [{"name": "node-labels", "value": value}]
    return section


def cluster_problems(plan: dict) -> list[str]:
    """Every refusal for one cluster plan, all at once.

    ``plan``: ``kube_version``, ``control_planes`` (host names), ``endpoint``, ``pools`` (GPU host -> its
    ``gpuops_pool``, "" where unset), ``schedulable`` (host -> kube_control_plane_schedulable), ``pod_cidr``,
    ``service_cidr``, ``addresses`` (host -> address Ansible connects to), ``registrations`` (host -> the plan's
    ``nodes.registration``: its control-plane taint must be what ``schedulable`` asks now).
    """
    problems = []
    version = kube_version_problem(plan.get("kube_version"))
    if version:
        problems.append(version)
    control_planes = list(plan.get("control_planes") or [])
    shape = control_plane_problem(len(control_planes), str(plan.get("endpoint") or ""))
    if shape:
        problems.append(f"{shape} (hosts: {', '.join(control_planes) or 'none'})")
    schedulable = plan.get("schedulable") or {}
    for host, pool in sorted((plan.get("pools") or {}).items()):
        if pool not in POOLS:
            problems.append(f"gpuops_pool of {host} is {json.dumps(pool)}: expected {' or '.join(POOLS)}; set "
                            "gpuops_pool for this GPU node (its host_vars or a group)")
        if host in control_planes and schedulable.get(host) is not True:
            problems.append(
                f"{host} is in kube_control_plane and gpu_nodes but kube_control_plane_schedulable is "
                f"{schedulable.get(host)!r}: a control plane runs no workloads unless you say so; "
                f"set kube_control_plane_schedulable: true for {host}, or take it out of gpu_nodes"
            )
    for host, registration in sorted((plan.get("registrations") or {}).items()):
        tainted = CONTROL_PLANE_TAINT in (registration or {}).get("taints", [])
        # The rule that made it, on the value read as plan.nodes_part reads it (-e gives the string "true").
        now = node_registration(None, "", host in control_planes, bool(schedulable.get(host)))
        if tainted != (CONTROL_PLANE_TAINT in now["taints"]):
            problems.append(f"gpuops_plan.nodes.registration.{host} {'has' if tainted else 'lacks'} the control-plane "
                            f"taint, but kube_control_plane_schedulable is {schedulable.get(host)!r} now: {STALE_PLAN}")
    problems.extend(cidr_problems(plan.get("pod_cidr", ""), plan.get("service_cidr", ""), plan.get("addresses") or {}))
    return problems
