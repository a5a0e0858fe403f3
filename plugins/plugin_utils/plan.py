# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""``gpuops_plan``: every decision of a run, made once in preflight and read by every play, role and day-2 playbook.

Pure functions, no Ansible imports. ``build_plan()`` is called by the action ``preflight_fleet`` with what preflight
judged; ``inventory_plan()`` builds the same shape from the inventory alone, for a run without a preflight on record
(``playbooks/tasks/plan.yml``: render, a platform play run alone). The shape is ``SCHEMA`` (JSON Schema), from which
``docs/plan.md`` is generated (``scripts/gen-role-docs``); ``SCHEMA_VERSION`` changes whenever a key is added or
changes meaning, and ``playbooks/tasks/plan.yml`` refuses a plan of another version, so a reader never meets a
plan.json written before a key it reads. Each part comes from the function the roles call themselves (three hops:
inventory variable -> this module -> the function); docs/plan.md names them.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from ansible_collections.gpuops.cluster.plugins.module_utils.cuda_compat import max_native_cuda
from ansible_collections.gpuops.cluster.plugins.plugin_utils import (
    gpu_operator,
    gpu_sharing,
    health_bounds,
    kube_gpu,
    kube_plan,
    mps,
    training_jobs,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import (  # the rule and its inputs
    PLATFORMS,
    ReadOnce,
    decide_fleet,
    get_var,
    platform_request,
    role_defaults,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import nfs_targets
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import namespace_of
from ansible_collections.gpuops.cluster.plugins.plugin_utils.workspaces import (
    host_pools,
    plan_workspaces,
    size_workspaces,
)

SCHEMA_VERSION = 4

_NULL_STR = {"type": ["string", "null"]}
_NULL_INT = {"type": ["integer", "null"]}
_REGISTRATION = {"type": "object", "properties": {
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "taints": {"type": "array", "items": {"type": "object"}},
}}
_NCCL = {
    "type": "object",
    "required": ["env", "notes"],
    "properties": {
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}


HEALTH_SWEEP_FORMS = ("timer", "daemonset", "none")


class Setting(NamedTuple):
    """A role setting the plan reads: who documents it, the plan keys it decides, and what the plan does with it."""

    owner: str  # the role whose meta/argument_specs.yml describes it, or the playbook (*.yml) that reads it
    keys: tuple[str, ...]  # the plan keys (SCHEMA) it decides
    use: str


_WORKSPACES = ("hosts.<name>.workspaces",)
_HEALTH_SWEEP = "hosts.<name>.health_sweep"
# The role settings the plan reads: the only place this module names one (docs/plan.md lists them, generated from
# this map). Functions read them through _setting; an unset one reads as None (a gpuops_* one as its shared default,
# platform.get_var), or with role_default as its owner role's default (role_defaults). The kubelet reservations are
# named by kube_plan.RESERVATIONS and the MPS cap settings by mps.VARIABLES, the modules whose rules they feed.
ROLE_SETTINGS: dict[str, Setting] = {
    "gpuops_members": Setting("_gpuops_vars", ("team.members", *_WORKSPACES), "who gets which GPUs; the workspaces"),
    "gpuops_teams": Setting("_gpuops_vars", ("team.namespaces",), "each team's namespace (team.namespace_of)"),
    "gpuops_pool": Setting("_gpuops_vars", ("hosts.<name>.pool", "hosts.<name>.kubelet_policy", "hosts.<name>.node",
                                            "pools", "nodes.gpu"),
                           "the host's pool: its kubelet policy, labels and taints, and which pool's NCCL it joins"),
    "gpuops_gpu_topology": Setting("_gpuops_vars", ("hosts.<name>.topology", "nodes.gpu", *_WORKSPACES),
                                   "the topology where preflight read none"),
    "gpuops_gpu_count": Setting("_gpuops_vars", (*_WORKSPACES, "nodes.gpu"),
                                "GPUs 0..n-1 for the workspaces of a plan from the inventory alone (no GPU facts); "
                                "a GPU node's even share of it where its GPUs were neither read nor declared"),
    "gpuops_multi_node_training": Setting("_gpuops_vars", ("gpu_sharing",),
                                          "gpu_operator_pools' default where unset (gpu_sharing.default_pools)"),
    "gpuops_cuda_version": Setting("_gpuops_vars", ("pins.cuda",), "the CUDA version, where preflight judged none"),
    "gpuops_registry_mirror": Setting("_gpuops_vars", ("pins.registry_mirror",), "the mirror images come from"),
    **{name: Setting("_gpuops_vars", (*_WORKSPACES, "gpu_sharing"), "the MPS cap rule (mps.limits)")
       for name in mps.VARIABLES},
    "nvidia_driver_version": Setting("nvidia_driver", ("pins.driver", "hosts.<name>.packages"),
                                     "the driver pin, where preflight judged none"),
    "nvidia_driver_fabric_manager": Setting("nvidia_driver", ("hosts.<name>.packages",),
                                            "true or false: Fabric Manager needed or not; else (auto) where the GPU "
                                            "facts found NVSwitches"),
    "nvidia_container_toolkit_version": Setting("nvidia_container_toolkit", ("hosts.<name>.packages",),
                                                "the toolkit pin, where the inventory sets one (else the "
                                                "role's default)"),
    **{name: Setting("kube_node", ("hosts.<name>.kubelet_policy",), "a kubelet reservation (kube_plan.kubelet_policy)")
       for name, _kind in kube_plan.RESERVATIONS.values()},
    "kube_control_plane_schedulable": Setting("kube_control_plane", ("hosts.<name>.node", "nodes.registration"),
                                              "whether a control plane keeps its NoSchedule taint"),
    "kube_addons_gpu_operator": Setting("playbooks/kubernetes.yml", ("hosts.<name>.node", "gpu_sharing"),
                                        "the GPU Operator's labels and GPU sharing, where the add-on is on"),
    "gpu_operator_pools": Setting("gpu_operator", ("hosts.<name>.node", "gpu_sharing"),
                                  "each pool's GPU sharing and node labels (gpu_operator.node_labels)"),
    "gpu_operator_gpu_model": Setting("gpu_operator", ("nodes.gpu",), "the GPU model where no GPU facts were read"),
    "gpu_operator_gpu_count": Setting("gpu_operator", ("nodes.gpu",), "the GPU count where no GPU facts were read"),
    "gpu_operator_gpu_memory_mib": Setting("gpu_operator", ("nodes.gpu", "gpu_sharing"),
                                           "the GPU memory where no GPU facts were read"),
    "kube_monitoring_gpu_health_sweep": Setting("kube_monitoring", (_HEALTH_SWEEP,),
                                                "false: no sweep DaemonSet, so a Kubernetes GPU node gets the timer "
                                                "(health_sweep)"),
    "gpu_health_sweep_timer_enabled": Setting("gpu_health", (_HEALTH_SWEEP,),
                                              "false: no timer, so a host without the DaemonSet has no scheduled "
                                              "sweep (health_sweep)"),
    "compose_stack_member_memory_pool_mb": Setting("compose_stack", _WORKSPACES,
                                                   "the memory the workspaces' default shares divide, where set "
                                                   "(else 80% of the host's, workspaces.host_pools)"),
    "compose_stack_member_cpus_pool": Setting("compose_stack", _WORKSPACES,
                                              "the CPUs the workspaces' default shares divide, where set (else the "
                                              "host's, workspaces.host_pools)"),
    "training_stack_socket_ifname": Setting("training_stack", ("hosts.<name>.nccl", "pools"),
                                            "NCCL_SOCKET_IFNAME (unset: NCCL picks)"),
    "compose_stack_datasets": Setting("compose_stack", ("hosts.<name>.nfs_servers",),
                                      "the NFS servers preflight and compose_stack probe (preflight.nfs_targets)"),
}
# A GPU node's inventory declarations that kube_gpu.gpu_nodes reads where the gpu facts are silent.
_NODE_VARS = tuple(name for name, setting in ROLE_SETTINGS.items() if "nodes.gpu" in setting.keys)

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "gpuops_plan",
    "description": "Every decision of a run, made once in preflight (action gpuops.cluster.preflight_fleet) and read "
    "by every play, role and day-2 playbook. Written as plan.json in the run's report folder and as the last plan "
    "in the report folder itself (reports/plan.json), which day-2 playbooks read.",
    "type": "object",
    "required": ["schema_version", "source", "platform", "team", "pins", "pools", "gpu_sharing", "nodes", "hosts"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION, "description": "Changes whenever a key is added or changes "
                           "meaning; playbooks/tasks/plan.yml refuses a plan of another."},
        "source": {
            "enum": ["preflight", "inventory"],
            "description": "preflight: made from the facts preflight gathered in one call per host. inventory: made "
            "from the inventory alone, with no preflight on record (render, a play run alone); no GPU was counted.",
        },
        "created": {**_NULL_STR, "description": "UTC time the plan was made (ISO 8601)."},
        "report_dir": {**_NULL_STR, "description": "The run's report folder (preflight only)."},
        "platform": {
            "type": "object",
            "required": ["name", "source", "reason", "ok"],
            "description": "The one platform of the site (rule: plugin_utils platform.decide_fleet).",
            "properties": {
                "name": {"enum": [*PLATFORMS, None], "description": "compose or kubernetes; null when undecided."},
                "source": {
                    "type": "string",
                    "description": "auto (the rule), override (gpuops_platform), play (a plan from the inventory "
                    "alone for the platform its play is for, the rule undecided: render.yml's Kubernetes plays) or "
                    "error.",
                },
                "reason": {"type": "string", "description": "One sentence: why this platform, or why none."},
                "ok": {"type": "boolean", "description": "false when no platform could be decided."},
                "gpu_count": {**_NULL_INT, "description": "The GPUs the decision counted (sum over gpu_nodes)."},
            },
        },
        "team": {
            "type": "object",
            "required": ["members", "namespaces"],
            "description": "The team (gpuops_members, gpuops_teams): who gets which GPUs, which namespace a team has.",
            "properties": {
                "members": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"team": _NULL_STR, "gpus": {"type": "array", "items": {"type": "integer"}}},
                    },
                    "description": "member name -> {team, gpus}: the member's team (kube_tenancy gives it a PVC in "
                    "that team's namespace) and the GPU indexes its workspace gets.",
                },
                "namespaces": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "team name -> its Kubernetes namespace (namespace:, else the team's name).",
                },
            },
        },
        "pins": {
            "type": "object",
            "description": "Versions in force for the whole site.",
            "properties": {
                "driver": {**_NULL_STR, "description": "nvidia_driver_version (exact)."},
                "cuda": {**_NULL_STR, "description": "gpuops_cuda_version requested."},
                "registry_mirror": {**_NULL_STR, "description": "gpuops_registry_mirror, when images come from one."},
            },
        },
        "pools": {
            "type": "object",
            "description": "gpuops_pool -> the pool's GPU hosts (inventory order) and the NCCL settings a job "
            "spanning them gets (training_jobs.nccl_env over their topologies; NCCL_SOCKET_IFNAME from "
            "training_stack_socket_ifname, else none: NCCL picks). training_stack's job templates read nccl here. "
            "Hosts without a pool are not listed.",
            "additionalProperties": {
                "type": "object",
                "required": ["hosts", "nccl"],
                "properties": {
                    "hosts": {"type": "array", "items": {"type": "string"}},
                    "nccl": _NCCL,
                },
            },
        },
        "gpu_sharing": {
            "type": ["object", "null"],
            "description": "kubernetes with the GPU Operator (kube_addons_gpu_operator): how each pool of "
            "gpu_operator_pools (else its default, gpu_sharing.default_pools) shares its GPUs, by "
            "gpu_sharing.plan_part on the GPU nodes as kube_gpu.gpu_nodes sees them (the GPU memory preflight read, "
            "else the inventory's gpu_operator_gpu_memory_mib). gpu_operator renders the device-plugin config and its "
            "gpuops.io/sharing annotations from it alone, and refuses a plan without a pool of gpu_operator_pools or "
            "older than it. null on compose or without the GPU Operator.",
            "additionalProperties": {
                "type": "object",
                "required": ["strategy", "replicas", "memory_per_replica_mib", "gpu_memory_mib", "nodes", "reason"],
                "properties": {
                    "strategy": {
                        "enum": ["mps", "time-slicing", "mig", "none", None],
                        "description": "mps (sharing.mps: memory and SMs divided, enforced), time-slicing (no memory "
                        "isolation), mig (the pool's mig_profile), none (whole GPUs); null: the pool's settings are "
                        "refused (reason), and gpu_operator stops before any change.",
                    },
                    "replicas": {**_NULL_INT, "description": "nvidia.com/gpu advertised per GPU (1: whole GPUs)."},
                    "memory_isolation": {"type": ["boolean", "null"]},
                    "memory_per_replica_mib": {
                        **_NULL_INT,
                        "description": "mps: the pool's smallest GPU memory / replicas (the MPS daemon's pinned "
                        "device memory limit; a replica can allocate this minus gpuops_mps_context_reserve, its CUDA "
                        "context); null when not mps or the GPU memory is unknown.",
                    },
                    "thread_percentage": {**_NULL_INT, "description": "mps: 100 / replicas % of the SMs."},
                    "mig_profile": _NULL_STR,
                    "gpu_memory_mib": {**_NULL_INT, "description": "The smallest GPU memory among the pool's nodes."},
                    "nodes": {"type": "array", "items": {"type": "string"}},
                    "reason": {"type": "string", "description": "Which setting chose this, and whence the memory."},
                },
            },
        },
        "nodes": {
            "type": "object",
            "required": ["gpu", "registration"],
            "description": "The site's node lists, from the inventory's groups (plan.nodes_part), on every platform "
            "(grow reads them on compose). gpu_operator, kube_tenancy, training_stack and grow's plan read their GPU "
            "nodes here.",
            "properties": {
                "gpu": {
                    "type": "array",
                    "description": "Each gpu_nodes host as the Kubernetes add-on roles see it (kube_gpu.gpu_nodes): "
                    "name, pool (gpuops_pool), gpu_model, gpu_count, topology, gpu_memory_mib (the smallest GPU's), "
                    "mig_enabled; from the gpu facts preflight read, else the inventory's declarations "
                    "(gpuops_gpu_topology, gpu_operator_gpu_model, gpu_operator_gpu_count, "
                    "gpu_operator_gpu_memory_mib); with neither, gpu_count is an even share of gpuops_gpu_count. "
                    "The cluster's GPUs are their sum (kube_tenancy's quota check, grow).",
                    "items": {
                        "type": "object",
                        "required": ["name", "pool", "gpu_count", "topology"],
                        "properties": {
                            "name": {"type": "string"},
                            "pool": _NULL_STR,
                            "gpu_model": _NULL_STR,
                            "gpu_count": {"type": "integer"},
                            "topology": {"type": ["object", "null"]},
                            "gpu_memory_mib": _NULL_INT,
                            "mig_enabled": {"type": "boolean"},
                        },
                    },
                },
                "registration": {
                    "type": "object",
                    "additionalProperties": _REGISTRATION,
                    "description": "The control planes and CPU workers (no gpu_nodes host): what each registers with "
                    "(kube_plan.node_registration: the control-plane taint unless kube_control_plane_schedulable).",
                },
            },
        },
        "hosts": {
            "type": "object",
            "description": "The per-host part, by inventory name (gpu_nodes hosts that preflight judged).",
            "additionalProperties": {
                "type": "object",
                "required": ["gpu_count", "topology", "packages", "pool", "kubelet_policy", "nccl", "node",
                             "workspaces", "health_sweep", "nfs_servers"],
                "properties": {
                    "ok": {"type": ["boolean", "null"], "description": "preflight's verdict on this host."},
                    "gpu_count": {**_NULL_INT, "description": "GPUs found (null: not read)."},
                    "gpu_source": {**_NULL_STR, "description": "nvml, nvidia-smi, sysfs or inventory."},
                    "gpus_present": {
                        "type": ["boolean", "null"],
                        "description": "Whether the GPU facts found an NVIDIA GPU (null: not read). playbooks/host.yml "
                        "skips the host layer where false (unless nvidia_driver_load_module: false, an image build); "
                        "nvidia_container_toolkit's CDI default (auto) needs it not false.",
                    },
                    "topology": {
                        "type": ["object", "null"],
                        "description": "The GPU topology preflight read (as ansible_facts.gpu.topology), else null.",
                    },
                    "topology_source": {
                        **_NULL_STR,
                        "description": "preflight, or inventory (gpuops_gpu_topology) when preflight read none.",
                    },
                    "packages": {
                        "type": "object",
                        "description": "The packages this host gets: the driver set, read by nvidia_driver (its "
                        "pin, Fabric Manager), the toolkit pin, read by nvidia_container_toolkit, and DCGM's CUDA "
                        "major, read by gpu_health.",
                        "required": ["dcgm_cuda_major"],
                        "properties": {
                            "driver": {**_NULL_STR, "description": "The driver pin (nvidia_driver_version)."},
                            "fabric_manager_needed": {
                                "type": ["boolean", "null"],
                                "description": "Whether nvidia_driver installs Fabric Manager, at the driver pin: "
                                "nvidia_driver_fabric_manager when the inventory sets it true or false, else (auto) "
                                "whether the GPU facts found NVSwitches; null: not known (auto, and the GPU facts were "
                                "not read), which nvidia_driver refuses.",
                            },
                            "fabric_manager_reason": {"type": "string", "description": "Why, in a few words."},
                            "container_toolkit": {
                                "type": "string",
                                "description": "The toolkit pin nvidia_container_toolkit installs and holds: this "
                                "host's nvidia_container_toolkit_version, else the role's default.",
                            },
                            "dcgm_cuda_major": {
                                **_NULL_INT,
                                "description": "gpu_health's DCGM package CUDA major (dcgm_cuda_major) for the "
                                "driver (the pin, else the running one); null: no driver known.",
                            },
                        },
                    },
                    "driver_judged": {
                        "type": ["object", "null"],
                        "description": "The driver preflight judged CUDA (gpuops_cuda_version) against: version, and "
                        "source: pin (nvidia_driver_version) or running (no pin: the driver running on the host, as "
                        "the gpu facts read it). null: none judged (no pin and no running driver, or a plan made "
                        "from the inventory alone).",
                        "properties": {
                            "version": {"type": "string"},
                            "source": {"enum": ["pin", "running"]},
                        },
                    },
                    "pool": {**_NULL_STR, "description": "gpuops_pool: training or inference (kubernetes)."},
                    "kubelet_policy": {
                        "type": ["object", "null"],
                        "description": "kubernetes GPU nodes: the KubeletConfiguration policy (plugin_utils "
                        "kube_plan.kubelet_policy), else null.",
                    },
                    "nccl": {
                        **_NCCL,
                        "description": "NCCL settings of a job on this host alone (training_jobs.nccl_env on its "
                        "topology; NCCL_SOCKET_IFNAME from training_stack_socket_ifname, else none: NCCL picks): "
                        "env, notes. A pool's job: pools.<pool>.nccl.",
                    },
                    "node": {
                        **_REGISTRATION,
                        "type": ["object", "null"],
                        "description": "kubernetes GPU nodes with a kubelet policy: the labels, annotations and taints "
                        "the node registers with (kube_plan.node_registration, as kube_node renders them), its labels "
                        "joined by the GPU Operator's (gpu_operator.node_labels, when kube_addons_gpu_operator); "
                        "its label gpuops.io/gpu-health-sweep is health_sweep.form, which kube_monitoring's DaemonSet "
                        "selects (value daemonset); else null.",
                    },
                    "workspaces": {
                        "type": ["object", "null"],
                        "description": "compose: the member workspaces compose_stack deploys on this host, exactly "
                        "(workspaces.plan_workspaces on gpuops_members and hosts.<name>.topology, then "
                        "size_workspaces; their docstrings give each key): members (name -> uid, gid, image, mounts, "
                        "gpus (exclusive), shared_gpus ([{gpu, memory_mb}]: an MPS cap, of which the member can "
                        "allocate the cap minus gpuops_mps_context_reserve), mps, cpuset, numa_nodes, memory_mb, "
                        "cpus), shared (GPU index -> its sharers' caps and the MPS daemon's default_limit), problems, "
                        "warnings, gpu_total (the GPUs the shares divide). A GPU's CPU affinity comes from the "
                        "topology, else from sysfs through the GPU facts; with neither (a plan from the inventory "
                        "alone), GPUs 0..gpuops_gpu_count-1 without cpusets. null on kubernetes.",
                        "properties": {
                            "members": {"type": "object"},
                            "shared": {"type": "object"},
                            "problems": {"type": "array", "items": {"type": "string"}},
                            "warnings": {"type": "array", "items": {"type": "string"}},
                            "gpu_total": {"type": "integer"},
                            "sizing": {
                                "type": "object",
                                "description": "workspaces.host_pools: memory_pool_mb and cpus_pool, what the "
                                "members' default shares divide and their own limits may not overcommit (0: unknown, "
                                "no default limits), source, and problems (an overcommit, which preflight refuses).",
                                "properties": {
                                    "memory_pool_mb": {"type": "integer"},
                                    "cpus_pool": {"type": "number"},
                                    "source": {"type": "string"},
                                    "problems": {"type": "array", "items": {"type": "string"}},
                                },
                            },
                        },
                    },
                    "health_sweep": {
                        "type": "object",
                        "description": "The one scheduled read-only GPU health sweep of this host (plan.health_sweep): "
                        "form timer (gpu_health's systemd timer), daemonset (kube_monitoring's DaemonSet, the form of "
                        "a Kubernetes GPU node unless kube_monitoring_gpu_health_sweep is false) or none "
                        "(gpu_health_sweep_timer_enabled false where there is no DaemonSet), and the reason. "
                        "gpu_health installs the timer only for timer, kube_monitoring runs the DaemonSet only on "
                        "daemonset hosts (node.labels gpuops.io/gpu-health-sweep: daemonset), so one cluster may mix "
                        "the forms.",
                        "required": ["form", "reason"],
                        "properties": {
                            "form": {"enum": list(HEALTH_SWEEP_FORMS)},
                            "reason": {"type": "string"},
                        },
                    },
                    "nfs_servers": {
                        "type": "array",
                        "description": "The NFS server of each compose_stack_datasets entry, as preflight probes it "
                        "and compose_stack probes it again before mounting (preflight.nfs_targets): dataset, host "
                        "(src's, an IPv6 address without its brackets) and port (port= in opts, else 2049).",
                        "items": {"type": "object", "required": ["dataset", "host", "port"], "properties": {
                            "dataset": _NULL_STR, "host": {"type": "string"}, "port": {"type": "integer"}}},
                    },
                    "out_of_service": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "description": "event, action, why, line, since and pending (the remedy still to do).",
                        },
                        "description": "GPU index -> why health.yml took it out of service (event, action, since); "
                        "preflight refuses a member given one of them. Read from <report dir>/health/state.json "
                        "(out_of_service); empty when none.",
                    },
                },
            },
        },
    },
}


def _setting(hostvars: Any, name: str, role_default: bool = False) -> Any:
    """One host's value of a role setting the plan reads (ROLE_SETTINGS names it; KeyError otherwise), None when
    unset (a gpuops_* one: its shared default; ``role_default``: the owner role's default)."""
    if name not in ROLE_SETTINGS:
        raise KeyError(f"{name} is not in plan.ROLE_SETTINGS: add it there (owner, plan keys, use) before reading it")
    value = get_var(hostvars, name)
    if value is None and role_default:
        value = role_defaults(ROLE_SETTINGS[name].owner).get(name)
    return value


def _flag(value: Any) -> bool | None:
    """A true/false setting as the play's ``| bool`` reads it (an extra var is the string "true"); None: unset."""
    text = str(value).lower()
    return True if text in ("true", "yes", "on", "1") else False if text in ("false", "no", "off", "0") else None


def _team(members: list, teams: list) -> dict:
    return {
        "members": {
            str(m["name"]): {"team": m.get("team"), "gpus": [int(g) for g in m.get("gpus") or [] if isinstance(g, int)]}
            for m in members
            if isinstance(m, dict) and m.get("name")
        },
        "namespaces": {str(t["name"]): namespace_of(t) for t in teams if isinstance(t, dict) and t.get("name")},
    }


def _node(policy: dict | None, pool: str | None, hostvars: Any, sweep_form: str) -> dict | None:
    """The labels, annotations and taints a Kubernetes GPU node registers with, as kube_node renders them, with the
    GPU Operator's labels where that add-on is on; ``sweep_form`` is the host's health_sweep form (its label)."""
    if not isinstance(policy, dict) or "error" in policy:
        return None
    groups = get_var(hostvars, "group_names", []) or []
    node = kube_plan.node_registration(
        policy, str(pool), "kube_control_plane" in groups, bool(_setting(hostvars, "kube_control_plane_schedulable")),
        sweep_form,
    )
    if _flag(_setting(hostvars, "kube_addons_gpu_operator")):
        pools = _setting(hostvars, "gpu_operator_pools") or {}
        node["labels"].update(gpu_operator.node_labels(dict(pools), [{"name": "", "pool": pool}])[""])
    return node


def _workspaces(topology: dict | None, gpu: dict, hostvars: Any, host: dict | None) -> dict:
    """``hosts.<name>.workspaces`` of a compose host (SCHEMA): a GPU's CPU and NUMA affinity from the topology where
    it gives them, else from the GPU facts (sysfs, no driver needed); ``host``: the OS facts gpu_facts read."""
    members = _setting(hostvars, "gpuops_members")
    if not isinstance(members, list) or not members:
        return {"members": {}, "shared": {}, "problems": [], "warnings": [], "gpu_total": 0}
    layout = {"gpus": list(gpu.get("gpus") or [])}
    if not gpu and not (topology or {}).get("gpus"):  # the inventory alone (render): its GPU count, no affinity
        layout = {"gpus": [{"index": index} for index in range(int(_setting(hostvars, "gpuops_gpu_count") or 0))]}
    if (topology or {}).get("gpus"):
        found = {g.get("index"): g for g in layout["gpus"] if isinstance(g, dict)}

        def with_affinity(entry: dict) -> dict:
            facts = found.get(entry.get("index")) or {}
            if entry.get("cpu_affinity") or not facts.get("cpu_affinity"):
                return entry
            return {**entry, "cpu_affinity": facts["cpu_affinity"], "numa_node": facts.get("numa_node")}

        layout = {**topology, "gpus": [with_affinity(entry) for entry in topology["gpus"]]}
    pools = host_pools(_setting(hostvars, "compose_stack_member_memory_pool_mb"),
                       _setting(hostvars, "compose_stack_member_cpus_pool"), host)
    try:
        planned = plan_workspaces([dict(m) if isinstance(m, dict) else m for m in members], layout,
                                  gpus_found=gpu.get("gpus"))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a team the boilerplate play did not check
        planned = {"members": {}, "shared": {}, "warnings": [], "gpu_total": 0, "problems": [
            f"gpuops_members cannot be planned into workspaces ({exc!r}). Fix: correct gpuops_members; site.yml's "
            "boilerplate play names what is wrong (gpuops.cluster.team_problems)"]}
    if not planned["problems"]:  # the GPUs, cpusets and MPS caps hold: size the limits on the host's pools
        planned = size_workspaces({**planned, "problems": pools["problems"]}, pools["memory_pool_mb"],
                                  pools["cpus_pool"])
        pools["problems"] = planned["problems"]
    return {**planned, "sizing": pools}


def _fabric_manager(gpu: dict, hostvars: Any) -> tuple[bool | None, str]:
    """``packages.fabric_manager_needed`` and ``fabric_manager_reason`` (SCHEMA)."""
    wanted = _setting(hostvars, "nvidia_driver_fabric_manager")
    if isinstance(wanted, bool):
        return wanted, f"nvidia_driver_fabric_manager: {str(wanted).lower()}"
    found = gpu.get("fabric_manager")
    if not isinstance(found, dict):
        return None, "the GPU facts were not read, so NVSwitches were not looked for"
    if found.get("required"):
        return True, f"{found.get('nvswitch_count', '?')} NVSwitch device(s) found"
    return False, "no NVSwitch found"


def health_sweep(platform: str | None, hostvars: Any) -> dict:
    """``hosts.<name>.health_sweep`` (SCHEMA). Never both forms: two sweeps on one node would share one cursor and
    one metrics file."""
    # Unset reads as on, both roles' default.
    timer = _flag(_setting(hostvars, "gpu_health_sweep_timer_enabled"))
    if platform == "kubernetes" and _flag(_setting(hostvars, "kube_monitoring_gpu_health_sweep")) is not False:
        unused = "; gpu_health_sweep_timer_enabled: true is not used (one sweep per node)" if timer else ""
        return {"form": "daemonset", "reason": f"kubernetes: kube_monitoring's DaemonSet{unused}"}
    where = "kubernetes with kube_monitoring_gpu_health_sweep: false" if platform == "kubernetes" else (
        platform or "no platform decided")
    if timer is False:
        return {"form": "none", "reason": f"{where}, and gpu_health_sweep_timer_enabled: false: no scheduled sweep"}
    return {"form": "timer", "reason": f"{where}: gpu_health's systemd timer"}


def dcgm_cuda_major(driver: str | None) -> int | None:
    """The N of DCGM 4's datacenter-gpu-manager-4-cuda<N> for ``driver``: the major of the newest CUDA it runs
    natively (the CUDA Version nvidia-smi prints), which DCGM's build must match; None where none is known."""
    try:
        return int(max_native_cuda(driver).split(".", maxsplit=1)[0]) if driver else None
    except (ValueError, AttributeError):  # not a driver version (nvidia_driver's inputs refuse it); before CUDA 10
        return None


def host_part(
    platform: str | None,
    gpu: dict,
    hostvars: Any,
    driver: str | None = None,
    driver_judged: dict | None = None,
    host: dict | None = None,
) -> dict:
    """``hosts.<name>`` (SCHEMA says what each key holds). ``driver``: the pin preflight judged, else None (the
    inventory's); ``driver_judged``: preflight.host_checks'; ``host``: the OS facts gpu_facts read, else None."""
    topology, source = gpu.get("topology"), "preflight"
    if not isinstance(topology, dict) or not topology:
        declared = _setting(hostvars, "gpuops_gpu_topology")
        topology, source = (declared, "inventory (gpuops_gpu_topology)") if isinstance(declared, dict) else (None, None)
    pool = _setting(hostvars, "gpuops_pool") or None
    driver = (driver if driver is not None else str(_setting(hostvars, "nvidia_driver_version") or "")) or None
    fabric_manager, fabric_manager_reason = _fabric_manager(gpu, hostvars)
    policy = None
    if platform == "kubernetes" and pool in kube_plan.POOLS:
        try:  # the reservations: the inventory's, else kube_node's defaults, typed as kube_node's spec types them
            policy = kube_plan.kubelet_policy(topology, pool, **{
                keyword: kind(_setting(hostvars, name, role_default=True))
                for keyword, (name, kind) in kube_plan.RESERVATIONS.items()})
        except (TypeError, ValueError) as exc:
            policy = {"error": str(exc)}
    ifname = str(_setting(hostvars, "training_stack_socket_ifname") or "")
    toolkit = _setting(hostvars, "nvidia_container_toolkit_version", role_default=True)
    sweep = health_sweep(platform, hostvars)
    return {
        "ok": None,  # preflight_fleet sets its verdict, once judged with the rules on this plan
        "gpu_count": gpu.get("count"),
        "gpu_source": gpu.get("source"),
        "topology": topology,
        "topology_source": source,
        "gpus_present": gpu["present"] if isinstance(gpu.get("present"), bool) else None,
        "packages": {
            "driver": driver,
            "fabric_manager_needed": fabric_manager,
            "fabric_manager_reason": fabric_manager_reason,
            "container_toolkit": str(toolkit),
            "dcgm_cuda_major": dcgm_cuda_major(driver or (driver_judged or {}).get("version")),
        },
        "driver_judged": dict(driver_judged) if isinstance(driver_judged, dict) else None,
        "pool": pool,
        "kubelet_policy": policy,
        "node": _node(policy, pool, hostvars, sweep["form"]) if platform == "kubernetes" else None,
        "nccl": training_jobs.nccl_env([topology], ifname),
        "workspaces": _workspaces(topology, gpu, hostvars, host) if platform == "compose" else None,
        "health_sweep": sweep,
        "nfs_servers": nfs_targets(_setting(hostvars, "compose_stack_datasets")),
    }


def pools_part(nodes: list[dict], anyvars: Any) -> dict:
    """``pools`` (SCHEMA) on ``nodes``, the plan's ``nodes.gpu``: every gpu_nodes host, under --limit too, as in
    gpu_sharing and the pools training_stack's inputs accept; ``anyvars``: a GPU host's variables."""
    members: dict[str, list[dict]] = {}
    for node in nodes:
        if node["pool"]:
            members.setdefault(str(node["pool"]), []).append(node)
    ifname = str(_setting(anyvars, "training_stack_socket_ifname") or "")
    return {
        pool: {"hosts": [n["name"] for n in pool_nodes],
               "nccl": training_jobs.nccl_env([n["topology"] for n in pool_nodes], ifname)}
        for pool, pool_nodes in members.items()
    }


def nodes_part(gpus: dict[str, dict], hostvars: Any) -> dict:
    """``nodes`` (SCHEMA); ``gpus``: host -> the gpu facts preflight read (else the host's own, gathered in this
    play); ``hostvars``: host -> that host's variables. A GPU node's entry is kube_gpu.gpu_nodes' on those facts
    and its declarations (_NODE_VARS)."""
    first = next(iter(gpus), None)
    groups = (get_var(hostvars[first], "groups", {}) or {}) if first else {}
    gpu_hosts = [str(h) for h in groups.get("gpu_nodes") or gpus if str(h) in hostvars]
    control_planes = [str(h) for h in groups.get("kube_control_plane") or []]
    hosts = []
    for host in gpu_hosts:
        facts = get_var(hostvars[host], "ansible_facts", {}) or {}
        gpu = gpus.get(host) or get_var(facts, "gpu", {}) or {}
        hosts.append({**{name: _setting(hostvars[host], name) for name in _NODE_VARS}, "inventory_hostname": host,
                      "ansible_facts": {"gpu": gpu}})
    others = [h for h in dict.fromkeys([*control_planes, *map(str, groups.get("kube_nodes") or [])])
              if h not in gpu_hosts and h in hostvars]
    return {
        "gpu": kube_gpu.gpu_nodes(hosts),
        "registration": {host: kube_plan.node_registration(
            None, "", host in control_planes, bool(_setting(hostvars[host], "kube_control_plane_schedulable")))
            for host in others},
    }


def gpu_sharing_part(platform: str | None, nodes: list[dict], anyvars: Any) -> dict | None:
    """``gpu_sharing`` (SCHEMA) on ``nodes``, the plan's ``nodes.gpu`` (the GPU nodes gpu_operator reads too);
    ``anyvars``: a GPU host's variables. Every Kubernetes plan with the GPU Operator carries it, for gpu_operator
    renders only the plan's."""
    if platform != "kubernetes" or not _flag(_setting(anyvars, "kube_addons_gpu_operator")):
        return None
    pools, source = _setting(anyvars, "gpu_operator_pools"), "gpu_operator_pools"
    if not hasattr(pools, "items"):
        multi_node = _flag(_setting(anyvars, "gpuops_multi_node_training")) is True
        pools, source = gpu_sharing.default_pools(multi_node), "gpu_operator_pools (default)"
    try:
        return gpu_sharing.plan_part(kube_gpu.plain(pools), nodes, source,
                                     mps.limits(*(_setting(anyvars, name) for name in mps.VARIABLES)))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None  # settings gpu_operator cannot read: it refuses them itself, and the plan holds none


def build_plan(fleet: dict, records: dict[str, dict], hostvars: Any, created: str | None = None,
               report_dir: str | None = None, source: str = "preflight") -> dict:
    """The plan: ``fleet`` from platform.decide_fleet, ``records`` host -> {gpu: its facts, host_facts: gpu_facts'
    gpu_host (its os: the OS facts), and where preflight judged the host, result: its host checks (driver_judged)
    and plan: the arguments it was judged with (driver_version, cuda_version)}, ``hostvars`` host -> that host's
    variables.
    ``source``: preflight, or inventory (inventory_plan: no verdict; the pins are the inventory's)."""
    first = next(iter(records), None)
    judged = (records[first].get("plan") or {}) if first else {}
    anyvars = hostvars[first] if first else {}
    # The pins: the driver and CUDA versions preflight judged, else the inventory's.
    driver, cuda = (judged.get("driver_version"), judged.get("cuda_version")) if judged else (
        _setting(anyvars, "nvidia_driver_version"), _setting(anyvars, "gpuops_cuda_version"))
    plan = {
        "schema_version": SCHEMA_VERSION,
        "source": source,
        "created": created,
        "report_dir": report_dir,
        "platform": {
            "name": fleet.get("platform"),
            "source": fleet.get("source") or "error",
            "reason": fleet.get("reason") or "",
            "ok": bool(fleet.get("ok")),
            "gpu_count": fleet.get("gpu_count"),
        },
        "team": _team(_setting(anyvars, "gpuops_members"), _setting(anyvars, "gpuops_teams")),
        "pins": {
            "driver": str(driver or "") or None,
            "cuda": str(cuda or "") or None,
            "registry_mirror": str(_setting(anyvars, "gpuops_registry_mirror") or "") or None,
        },
    }
    plan["hosts"] = {
        host: host_part(
            fleet.get("platform"),
            record.get("gpu") or {},
            hostvars[host],
            driver=str(record["plan"].get("driver_version") or "") if record.get("plan") else None,
            driver_judged=(record.get("result") or {}).get("driver_judged"),
            host=(record.get("host_facts") or {}).get("os"),
        )
        for host, record in records.items()
    }
    nodes = nodes_part({host: record.get("gpu") or {} for host, record in records.items()}, hostvars)
    plan["pools"] = pools_part(nodes["gpu"], anyvars)
    plan["gpu_sharing"] = gpu_sharing_part(fleet.get("platform"), nodes["gpu"], anyvars)
    plan["nodes"] = nodes
    return plan


def _os_facts(hostvars: Any) -> dict:
    """The host's OS facts where this play has them: gpu_facts' (gpu_host.os, set by preflight), else setup's, whose
    names they share (memtotal_mb, processor_vcpus); {} when no facts were gathered (the inventory alone)."""
    facts = get_var(hostvars, "ansible_facts", {}) or {}
    return dict((facts.get("gpu_host") or {}).get("os") or {}) or {
        name: facts.get(name) for name in ("memtotal_mb", "processor_vcpus") if name in facts}


def inventory_plan(gpu_hosts: list[str], hostvars: Any, platform: str | None = None) -> dict:
    """The plan from the inventory alone (no preflight on record): the same platform rule, on the GPU counts the
    hosts' facts hold if any (gpu_facts ran in this play), else gpuops_gpu_count. ``platform``: the platform the play
    is for (render.yml's Kubernetes plays), planned where the rule leaves the platform undecided (source: play).
    Each host's variables are read once per call (platform.ReadOnce): the steps below read them many times, and each
    ``hostvars[host]`` of Ansible's is a full merge of that host's variables."""
    hostvars = ReadOnce(hostvars)
    hosts = [h for h in gpu_hosts if h in hostvars]
    gpus = {h: get_var(get_var(hostvars[h], "ansible_facts", {}), "gpu", {}) or {} for h in hosts}
    detected = {h: None if gpu.get("count") is None else int(gpu["count"]) for h, gpu in gpus.items()}
    fleet = decide_fleet({h: platform_request(hostvars[h]) for h in hosts}, detected) if hosts else {
        "ok": False, "platform": None, "source": "error", "reason": "no host in gpu_nodes", "gpu_count": None}
    if platform in PLATFORMS and not fleet.get("ok"):
        fleet = {**fleet, "ok": True, "platform": platform, "source": "play",
                 "reason": f"{platform}: the platform this play is for (undecided by the rule: {fleet.get('reason')})"}
    records = {h: {"gpu": gpus[h], "host_facts": {"os": _os_facts(hostvars[h])}} for h in hosts}
    return build_plan(fleet, records, hostvars, source="inventory")


def with_out_of_service(plan: dict, report_dir: str) -> dict:
    """The plan with each host's GPUs out of service, as health.yml left them in <report_dir>/health/state.json
    (``hosts.<name>.out_of_service``); a missing or unreadable file leaves every host with none."""
    path = os.path.join(report_dir, health_bounds.STATE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {}
    held = state.get("hosts") if isinstance(state, dict) and isinstance(state.get("hosts"), dict) else {}
    for host, part in plan.get("hosts", {}).items():
        entry = held.get(host) if isinstance(held.get(host), dict) else {}
        part["out_of_service"] = dict(entry.get("out_of_service") or {})
    return plan
