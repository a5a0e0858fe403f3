# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The growth path, Compose site -> Kubernetes platform: the plan, built on the controller alone (pure functions).

``plan(config)`` turns the Compose inventory into what the Kubernetes platform needs (teams, datasets, workspaces,
MLflow, hosts: docs/growth.md says what each part holds) and refuses what would not carry over, before anything
changes. The teams and members are checked by the one team rule (``team.team_problems``) and rendered by the one
tenancy builder (``kube_tenancy.plan``). ``stale_problems`` (a plan older than the Compose host's state) is called
on its own by the playbook.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_tenancy, team
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import nfs_source

NFS_TYPES = ("nfs", "nfs4")
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")
LABEL = "gpuops.io/grow"
_show = team.show  # values quoted in refusals as the team rules quote them


def _gpus(member: dict) -> int:
    gpus = member.get("gpus")
    return len(gpus) if isinstance(gpus, list) else 0


def version_tuple(image_or_version: Any) -> tuple[int, ...] | None:
    """The MLflow version of an image reference's tag (``ghcr.io/mlflow/mlflow:v3.17.2`` -> (3, 17, 2)) or of a
    bare version; None when there is none."""
    text = str(image_or_version or "")
    tag = text.rsplit(":", 1)[-1] if ":" in text.rsplit("/", 1)[-1] else text
    match = _VERSION.match(tag)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


# ---- teams --------------------------------------------------------------------------------------------------

def grow_teams(members: list[dict], teams: list[dict], team_of: dict, defaults: dict,
               storage_class: str) -> tuple[list[dict], list[dict]]:
    """(gpuops_teams, gpuops_members) for the cluster: every member in exactly one team, quotas = members' GPUs.

    A declared team keeps its settings except ``gpu_quota`` (the GPUs its members held on Compose) and
    ``storage_class`` (the workspace PVs' class, so that each member's PVC binds to their carried-over storage).
    """
    declared = {t["name"]: t for t in teams if isinstance(t, dict) and isinstance(t.get("name"), str)}
    new_members = []
    order: list[str] = []
    for member in members:
        name = member.get("name")
        chosen = member.get("team") or team_of.get(name) or name
        new_members.append({**member, "team": chosen})
        if chosen not in order:
            order.append(chosen)
    new_teams = []
    for name in order:
        base = dict(declared.get(name) or {"name": name, **defaults})
        base["gpu_quota"] = sum(_gpus(m) for m in new_members if m["team"] == name)
        base["storage_class"] = storage_class
        new_teams.append(base)
    return new_teams, new_members


def member_gpu_problems(members: list[dict], workers: list[dict], pool: str) -> list[str]:
    """A member whose GPUs would not fit the cluster's GPU pool: more than any one worker of ``pool`` has (their
    workspace pod runs on one node), or, all members together, more than the pool has."""
    in_pool = [w for w in workers if (w.get("pool") or pool) == pool]
    largest = max((int(w.get("gpu_count") or 0) for w in in_pool), default=0)
    total = sum(int(w.get("gpu_count") or 0) for w in in_pool)
    nodes = ", ".join(f"{w['name']} ({int(w.get('gpu_count') or 0)})" for w in in_pool) or "none"
    problems = []
    for i, member in enumerate(members):
        count = _gpus(member)
        if count > largest:
            problems.append(f"member {member.get('name')} holds {count} GPUs on Compose (gpuops_members[{i}].gpus), "
                            f"but the largest GPU worker of pool '{pool}' has {largest} (nodes: {nodes}); a workspace "
                            "pod runs on one node. Fix: add a larger GPU worker to the pool (gpuops_pool), or give "
                            f"the member at most {largest} GPUs before growing")
    held = sum(_gpus(m) for m in members)
    if held > total:
        problems.append(f"the members hold {held} GPUs on Compose, but pool '{pool}' has {total} (nodes: {nodes}); "
                        "the team quotas would not fit. Fix: add GPU workers to the pool (gpuops_pool: "
                        f"{pool}) or set grow_gpu_pool to the pool that has them")
    return problems


# ---- datasets and workspaces ---------------------------------------------------------------------------------

def _under(path: str, export: str) -> bool:
    return path == export or path.startswith(export.rstrip("/") + "/")


def dataset_problems(datasets: list, exports: list) -> list[str]:
    problems = []
    parsed_exports = [(e, nfs_source(e)) for e in exports]
    for e, parsed in parsed_exports:
        if parsed is None:
            problems.append(f"grow_nfs_exports lists {_show(e)}; expected server:/path of an NFS export. "
                            "Fix: e.g. nas.lab.example:/export/datasets")
    for i, d in enumerate(datasets):
        where = f"compose_stack_datasets[{i}]"
        src, fstype = d.get("src"), d.get("fstype", "nfs4")
        nfs = nfs_source(src)
        if fstype not in NFS_TYPES or nfs is None:
            problems.append(f"{where} ({d.get('name')}) is {_show(src)} with fstype {_show(fstype)}; expected an "
                            "NFS export (server:/path, fstype nfs or nfs4): a Kubernetes pod on any node mounts it, "
                            "a host path would exist on one node only. Fix: move the dataset to the NFS server and "
                            "point src at it")
        elif exports and not any(p and p["server"] == nfs["server"] and _under(nfs["path"], p["path"])
                                 for _server, p in parsed_exports):
            problems.append(f"{where} ({d.get('name')}) path {src} is not on an NFS export of grow_nfs_exports "
                            f"({', '.join(map(str, exports))}). Fix: add its export to grow_nfs_exports, or move "
                            "the dataset onto one")
    return problems


def _meta(name: str, namespace: str | None = None, extra: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL: "true", "app.kubernetes.io/managed-by": "gpuops",
                                                     **(extra or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def dataset_objects(dataset: dict, namespaces: list[str], size: str) -> list[dict]:
    """One ReadOnlyMany NFS PV per namespace, pre-bound to a PVC ``dataset-<name>`` in that namespace."""
    nfs = nfs_source(dataset["src"]) or {}
    name = str(dataset["name"])
    opts = [o for o in str(dataset.get("opts") or "").split(",") if o and o not in ("ro", "rw")]
    objects = []
    for ns in namespaces:
        claim = f"dataset-{name}"
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": size}, "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "nfs": {"server": nfs["server"], "path": nfs["path"], "readOnly": True},
            "claimRef": {"namespace": ns, "name": claim},
        }
        if opts:
            pv_spec["mountOptions"] = opts
        objects.append({"apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": _meta(f"dataset-{name}-{ns}", extra={"gpuops.io/dataset": name}),
                        "spec": pv_spec})
        objects.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": _meta(claim, ns, {"gpuops.io/dataset": name}),
                        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                                 "volumeName": f"dataset-{name}-{ns}",
                                 "resources": {"requests": {"storage": size}}}})
    return objects


def workspace_pv(member: dict, claim: dict, config: dict) -> dict:
    """The PV of a member's carried-over workspace, pre-bound to the tenancy's workspace PVC ``claim``."""
    name = str(member["name"])
    spec: dict[str, Any] = {
        "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
        "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": claim["spec"].get("storageClassName", ""),
        "claimRef": {"namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"]},
    }
    if config["workspace_storage"] == "nfs":
        nfs = nfs_source(config["workspace_nfs"]) or {}
        spec["nfs"] = {"server": nfs.get("server", ""), "path": f"{nfs.get('path', '').rstrip('/')}/{name}"}
    else:
        spec["local"] = {"path": f"{str(config['scratch_dir']).rstrip('/')}/{name}"}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [str(config["compose_host"])]}]}]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": _meta(f"workspace-{name}", extra={"gpuops.io/member": name}), "spec": spec}


# ---- hosts and MLflow ----------------------------------------------------------------------------------------

def hosts_part(config: dict, workers: list[dict], pool: str) -> dict:
    """The control planes (the Compose host, schedulable, where the inventory has none) and the GPU workers of
    ``pool`` unless they declare their own."""
    compose = str(config["compose_host"])
    control_planes = list(config.get("control_planes") or []) or [compose]
    return {
        "control_planes": control_planes,
        "control_plane_schedulable": compose in control_planes,
        "gpu_workers": [{"name": w["name"], "gpu_count": w["gpu_count"], "pool": w.get("pool") or pool}
                        for w in workers],
    }


def mlflow_part(config: dict) -> tuple[dict, list[str]]:
    source, target = config.get("mlflow_source_image"), config.get("mlflow_target_image")
    data_dir = str(config.get("data_dir") or "").rstrip("/")
    part = {
        "source": {"host": config["compose_host"], "image": source,
                   "version": ".".join(map(str, version_tuple(source) or ())), "dir": f"{data_dir}/mlflow",
                   "backend": f"{data_dir}/mlflow/backend/mlflow.db", "artifacts": f"{data_dir}/mlflow/artifacts"},
        "target": {"namespace": config["mlflow_namespace"], "image": target,
                   "version": ".".join(map(str, version_tuple(target) or ())), "pvc": "mlflow-store",
                   "backend": "/mlflow/backend/mlflow.db", "artifacts": "/mlflow/artifacts"},
    }
    src_v, dst_v = version_tuple(source), version_tuple(target)
    problems = []
    if src_v is None or dst_v is None:
        problems.append(f"the MLflow versions are not known (source compose_stack_images.mlflow {_show(source)}, "
                        f"target training_stack_mlflow_image {_show(target)}); expected image tags such as v3.17.2. "
                        "Fix: pin both images by version tag")
    elif dst_v < src_v:
        problems.append(f"the cluster's MLflow ({target}, training_stack_mlflow_image) is older than the Compose "
                        f"one ({source}, compose_stack_images.mlflow); a newer schema cannot be downgraded. Fix: set "
                        f"training_stack_mlflow_image to MLflow {part['source']['version']} or later")
    return part, problems


def mlflow_user_problems(members: list[dict], teams: list[dict], admin_user: str) -> list[str]:
    """A member whose Compose MLflow user (named as the member, compose_stack) would take the name of one the
    cluster's MLflow has: its admin (training_stack_mlflow_admin_user) or a per-team user (team-<team>, one per team
    of the plan). The copy merges users and refuses a name on both sides; this says so at plan time."""
    cluster = {str(admin_user): f"the cluster MLflow's admin (training_stack_mlflow_admin_user {_show(admin_user)})"}
    cluster.update({f"team-{t['name']}": f"the per-team user training_stack makes for team {t['name']}"
                    for t in teams})
    return [f"member {m.get('name')} (gpuops_members[{i}]) has a Compose MLflow user of that name, and "
            f"{cluster[m.get('name')]} is named the same; the growth copy merges the Compose users into the "
            "cluster's and refuses a name on both sides. Fix: rename the member (or the team), or set "
            "training_stack_mlflow_admin_user to another name"
            for i, m in enumerate(members) if m.get("name") in cluster]


# ---- the plan ------------------------------------------------------------------------------------------------

def plan(config: dict) -> dict[str, Any]:
    """The growth plan for ``config`` (keys: see the grow_plan filter's documentation). ``problems`` lists every
    refusal; the other parts are filled even then, so that the plan can be reviewed."""
    members = list(config.get("members") or [])
    declared = list(config.get("teams") or [])
    storage_class = str(config["workspace_storage_class"])
    new_teams, new_members = grow_teams(members, declared, dict(config.get("team_of") or {}),
                                        dict(config.get("team_defaults") or {}), storage_class)
    problems = team.team_problems(new_teams, new_members)
    workers = list(config.get("workers") or [])  # the plan's GPU nodes, with the plan's one GPU count each
    pool = str(config["pool"])
    problems += member_gpu_problems(new_members, workers, pool)
    datasets = list(config.get("datasets") or [])
    problems += dataset_problems(datasets, list(config.get("nfs_exports") or []))
    storage = config["workspace_storage"]  # local or nfs: the role's argument spec allows no other
    if storage == "nfs" and nfs_source(config["workspace_nfs"]) is None:
        problems.append(f"grow_workspace_nfs is {_show(config['workspace_nfs'])}; with grow_workspace_storage: "
                        "nfs, expected the server:/path export that holds one directory per member. Fix: e.g. "
                        "nas.lab.example:/export/workspaces")
    mlflow, mlflow_problems = mlflow_part(config)
    problems += mlflow_problems
    problems += mlflow_user_problems(new_members, new_teams, str(config["mlflow_admin_user"]))
    mlflow["users"] = [m["name"] for m in new_members]
    namespaces = {t["name"]: team.namespace_of(t) for t in new_teams}
    tenancy = kube_tenancy.plan({**dict(config.get("tenancy") or {}), "teams": new_teams,
                                 "members": {m["name"]: m for m in new_members}, "namespaces": namespaces,
                                 "gpu_nodes": workers})
    problems += tenancy["problems"]

    ns_of_member = {m["name"]: namespaces[m["team"]] for m in new_members}
    users = dict(config.get("dataset_users") or {})
    data_part, objects = [], list(tenancy["objects"])
    for d in datasets:
        if nfs_source(d.get("src")) is None:
            continue
        used_by = users.get(d.get("name"), [m["name"] for m in new_members])
        used_ns = sorted({ns_of_member[n] for n in used_by if n in ns_of_member})
        dataset_objs = dataset_objects(d, used_ns, str(config["dataset_size"]))
        objects += dataset_objs
        data_part.append({"name": d["name"], **(nfs_source(d["src"]) or {}), "access": "ReadOnlyMany",
                          "used_by": list(used_by), "namespaces": used_ns,
                          "persistent_volumes": [o["metadata"]["name"] for o in dataset_objs
                                                 if o["kind"] == "PersistentVolume"],
                          "claim": f"dataset-{d['name']}"})
    claims = {o["metadata"]["labels"].get("gpuops.io/member"): o for o in tenancy["objects"]
              if o["kind"] == "PersistentVolumeClaim"}
    workspaces = []
    if not problems:
        for m in new_members:
            pv = workspace_pv(m, claims[m["name"]], config)
            objects.append(pv)
            workspaces.append({"member": m["name"], "uid": m.get("uid"), "gid": m.get("gid", m.get("uid")),
                               "namespace": ns_of_member[m["name"]], "claim": claims[m["name"]]["metadata"]["name"],
                               "persistent_volume": pv["metadata"]["name"], "storage": storage,
                               "source": pv["spec"].get("local") or pv["spec"].get("nfs")})
    return {
        "problems": problems,
        "created": config.get("created"),
        "teams": [{"name": t["name"], "namespace": namespaces[t["name"]], "gpu_quota": t["gpu_quota"],
                   "members": [m["name"] for m in new_members if m["team"] == t["name"]]} for t in new_teams],
        "members": [{"name": m["name"], "uid": m.get("uid"), "gid": m.get("gid", m.get("uid")), "team": m["team"],
                     "gpus": _gpus(m)} for m in new_members],
        "gpuops_teams": new_teams,
        "gpuops_members": [{k: v for k, v in m.items() if k in team.MEMBER_KEYS} for m in new_members],
        "datasets": data_part,
        "workspaces": workspaces,
        "mlflow": mlflow,
        "hosts": hosts_part(config, workers, pool),
        "objects": objects if not problems else [],
    }


def stale_problems(created: Any, sources: dict) -> list[str]:
    """A plan older than the files it was made from. ``created`` and each of ``sources`` (path -> time) are
    seconds since the epoch."""
    if not isinstance(created, (int, float)):
        return [f"the plan file has no creation time ({_show(created)}); expected one written by grow.yml with "
                "grow_plan_only=true. Fix: write the plan again"]
    newer = sorted(path for path, mtime in (sources or {}).items() if mtime > created)
    if newer:
        return [f"the plan file is older than {', '.join(newer)}, changed since the plan was made; the plan may no "
                "longer match the site. Fix: write the plan again (grow.yml -e grow_plan_only=true), review it, "
                "then apply it"]
    return []


def markdown(grow_plan: dict) -> str:
    """plan.md: the plan for review, in the order it applies."""
    lines = ["# Growth plan: Compose site -> Kubernetes platform", ""]
    if grow_plan["problems"]:
        lines += ["## Refused (nothing will change until these are fixed)", ""]
        lines += [f"- {p}" for p in grow_plan["problems"]] + [""]
    lines += ["## Teams (namespace, GPU quota = the GPUs the members held on Compose)", "",
              "| team | namespace | GPU quota | members |", "|---|---|---|---|"]
    lines += [f"| {t['name']} | {t['namespace']} | {t['gpu_quota']} | {', '.join(t['members'])} |"
              for t in grow_plan["teams"]]
    lines += ["", "## Members (uids carry over)", "", "| member | uid | gid | team | GPUs |", "|---|---|---|---|---|"]
    lines += [f"| {m['name']} | {m['uid']} | {m['gid']} | {m['team']} | {m['gpus']} |"
              for m in grow_plan["members"]]
    lines += ["", "## Datasets (NFS, ReadOnlyMany; one PV per namespace, same server and path)", "",
              "| dataset | server:path | namespaces | PVs |", "|---|---|---|---|"]
    lines += [f"| {d['name']} | {d['server']}:{d['path']} | {', '.join(d['namespaces'])} | "
              f"{', '.join(d['persistent_volumes'])} |" for d in grow_plan["datasets"]]
    lines += ["", "## Workspaces (ReadWriteOnce PVs bound to each member's workspace PVC)", "",
              "| member | namespace | claim | PV | storage |", "|---|---|---|---|---|"]
    lines += [f"| {w['member']} | {w['namespace']} | {w['claim']} | {w['persistent_volume']} | {w['storage']} "
              f"{w['source']} |" for w in grow_plan["workspaces"]]
    mlflow, hosts = grow_plan["mlflow"], grow_plan["hosts"]
    src, dst = mlflow["source"], mlflow["target"]
    lines += ["", "## MLflow", "",
              f"- source: {src['host']} {src['image']} (MLflow {src['version']}), {src['backend']} and "
              f"{src['artifacts']}",
              f"- target: namespace {dst['namespace']}, {dst['image']} (MLflow {dst['version']}), PVC "
              f"{dst['pvc']} ({dst['backend']}, {dst['artifacts']})",
              f"- users carried over (one per member, named as the member): {', '.join(mlflow['users'])}"]
    schedulable = " (schedulable: the Compose host runs GPU work)" if hosts["control_plane_schedulable"] else ""
    workers = ", ".join(f"{w['name']} ({w['gpu_count']} GPUs, pool {w['pool']})" for w in hosts["gpu_workers"])
    lines += ["", "## Hosts", "", f"- control planes: {', '.join(hosts['control_planes'])}{schedulable}",
              f"- GPU workers: {workers}", "",
              "What each step of the apply carries over, and what stops when: docs/growth.md, section 2."]
    return "\n".join(lines) + "\n"
