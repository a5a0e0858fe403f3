# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Kubernetes tenancy from the teams (``gpuops_teams``) and the plan's team (``gpuops_plan.team``: its members and
the namespaces it decided with ``team.namespace_of``): pure builders. ``plan(config)`` returns ``{"problems": [...],
"objects": [...]}``; the objects per team are listed in kube_tenancy's meta/argument_specs.yml (docs/roles).

The GPU quota is on ``requests.nvidia.com/gpu``: extended resources are quota'd on requests only. Object names carry
the team (``<team>-quota``...), so every object has a cluster-wide unique kind and name (the render writes one file per
kind and name). Refusals name the variable, the value and the fix; objects are only built when there are none.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_netpol
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import parse_quantity

LABEL_TEAM = "gpuops.io/team"


def _team_problems(index: int, team: dict, cluster_gpus: int, member_count: int, pvc_size: Any) -> list[str]:
    """What a Kubernetes namespace needs of a team beyond the one team rule (``team.team_problems``, which the
    boilerplate play and grow run): every quota set, a GPU quota within the cluster, room for the member PVCs."""
    var = f"gpuops_teams[{index}] ({team.get('name')})"
    found = []
    gpus = team.get("gpu_quota")
    if cluster_gpus and isinstance(gpus, int) and gpus > cluster_gpus:
        found.append(f"{var}.gpu_quota is {gpus}, more than the cluster's {cluster_gpus} GPUs; fix: lower it to "
                     f"at most {cluster_gpus}, or add GPU nodes first")
    examples = {"gpu_quota": 8, "cpu_quota": "96", "memory_quota": "768Gi", "storage_quota": "4Ti"}
    found += [f"{var}.{key} is not set: a namespace's ResourceQuota needs it; fix: e.g. {key}: {example!r}"
              for key, example in examples.items() if team.get(key) is None]
    storage = parse_quantity(team.get("storage_quota"))
    size = parse_quantity(pvc_size)
    if storage is not None and size is not None and member_count * size > storage:
        found.append(f"{var}.storage_quota {team.get('storage_quota')!r} is smaller than its {member_count} member "
                     f"PVCs of {pvc_size} each; fix: raise storage_quota or lower kube_tenancy_member_pvc_size")
    return found


def _members(config: dict) -> list[dict]:
    """The members of ``config``, the plan's mapping member name -> ``{team, gpus}`` (``gpuops_plan.team.members``)."""
    return [{**entry, "name": name} for name, entry in (config.get("members") or {}).items()]


def problems(config: dict) -> list[str]:
    """Every refusal for ``config`` (see ``plan``) that is the tenancy's own: the team list itself (names, namespaces,
    quantities, members in teams) is the one team rule's, checked before (``team.team_problems``)."""
    teams = config.get("teams") or []
    members = _members(config)
    quantities = [("kube_tenancy_member_pvc_size", config.get("member_pvc_size"), "100Gi")]
    for key, example in (("limit_default", "8Gi"), ("limit_default_request", "500m")):
        quantities += [(f"kube_tenancy_{key}.{name}", value, example)
                       for name, value in sorted((config.get(key) or {}).items())]
    found = [f"{variable} is {value!r}: not a Kubernetes quantity; expected e.g. {example!r} (digits with an optional "
             "suffix m, k, M, G, T, Ki, Mi, Gi, Ti); fix: quote it in YAML and use one of those units"
             for variable, value, example in quantities if parse_quantity(value) is None]
    namespaces = config.get("namespaces") or {}
    cluster_gpus = sum(int(node.get("gpu_count") or 0) for node in config.get("gpu_nodes") or [])
    for index, team in enumerate(teams):
        if not isinstance(team, dict):
            continue
        if team.get("name") not in namespaces:
            found.append(f"gpuops_teams[{index}] ({team.get('name')}) has no namespace in the plan "
                         f"(gpuops_plan.team.namespaces holds {sorted(namespaces)}): the plan was made from another "
                         "team list; fix: run playbooks/preflight.yml (or site.yml) again, so the plan is this one's")
        count = sum(1 for member in members if member.get("team") == team.get("name"))
        found.extend(_team_problems(index, team, cluster_gpus, count, config.get("member_pvc_size")))
    names = [str(team.get("name")) for team in teams if isinstance(team, dict)]
    found.extend(kube_netpol.problems(config, names))
    return found


def _meta(name: str, namespace: str | None, team: str) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL_TEAM: team, "app.kubernetes.io/managed-by": "gpuops"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def team_objects(team: dict, members: list[dict], config: dict) -> list[dict]:
    """The objects of one team's namespace."""
    name = str(team["name"])
    ns = str(config["namespaces"][name])
    team_members = [m for m in members if m.get("team") == name]
    pvc_count = len(team_members) + int(config.get("extra_pvcs") or 0)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns, None, name)}
    # Tenant pods may not run privileged: the restricted-leaning baseline profile is enforced.
    namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    rbac = "rbac.authorization.k8s.io"
    objects: list[dict] = [
        namespace,
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta(f"{name}-quota", ns, name),
         "spec": {"hard": {
             "requests.nvidia.com/gpu": str(team["gpu_quota"]),
             "requests.cpu": str(team["cpu_quota"]),
             "requests.memory": str(team["memory_quota"]),
             "limits.memory": str(team["memory_quota"]),
             "persistentvolumeclaims": str(pvc_count),
             "requests.storage": str(team["storage_quota"]),
         }}},
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": _meta(f"{name}-defaults", ns, name),
         "spec": {"limits": [{
             "type": "Container",
             "default": {k: str(v) for k, v in sorted((config.get("limit_default") or {}).items())},
             "defaultRequest": {k: str(v) for k, v in sorted((config.get("limit_default_request") or {}).items())},
         }]}},
        *kube_netpol.team_policies(name, lambda policy: _meta(policy, ns, name), config),
        {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding", "metadata": _meta(f"{name}-edit", ns, name),
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"apiGroup": rbac, "kind": "Group", "name": str(team.get("group") or name)}]},
    ]
    storage_class = team.get("storage_class") or config.get("default_storage_class") or ""
    for member in sorted(team_members, key=lambda m: str(m.get("name"))):
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": str(config["member_pvc_size"])}}}
        if storage_class:
            spec["storageClassName"] = str(storage_class)
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": _meta(f"workspace-{member['name']}", ns, name), "spec": spec}
        pvc["metadata"]["labels"]["gpuops.io/member"] = str(member["name"])
        objects.append(pvc)
    return objects


def plan(config: dict) -> dict[str, Any]:
    """Problems and, when there are none, every tenancy object for ``config``.

    config: teams, members (the plan's team.members: name -> {team, gpus}; grow's are in that shape), namespaces
    (team name -> its namespace: the plan's team.namespaces), gpu_nodes (the plan's nodes.gpu: the cluster's GPUs are
    their gpu_count's sum; 0 = unknown, not checked), member_pvc_size, extra_pvcs, limit_default, limit_default_request,
    monitoring_namespace, default_storage_class, mlflow_namespace ("" = no MLflow allow), nfs_servers,
    egress_endpoints.
    """
    found = problems(config)
    if found:
        return {"problems": found, "objects": []}
    members = _members(config)
    objects = []
    for team in config["teams"]:
        objects.extend(team_objects(team, members, config))
    return {"problems": [], "objects": objects}
