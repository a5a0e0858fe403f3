"""kube_tenancy: quantities, the refusals, and the objects of each team's namespace."""

from __future__ import annotations

from decimal import Decimal

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_tenancy as kt
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import namespace_of


def config(**extra: object) -> dict:
    """The role's config; namespaces, unless given, as the plan decides them from these teams (team.namespace_of)."""
    base: dict = {
        "teams": [
            {"name": "vision", "gpu_quota": 8, "cpu_quota": "96", "memory_quota": "768Gi", "storage_quota": "4Ti",
             "storage_class": "local-nvme", "group": "vision-team"},
            {"name": "nlp", "namespace": "nlp-lab", "gpu_quota": 4, "cpu_quota": "48", "memory_quota": "384Gi",
             "storage_quota": "2Ti"},
        ],
        "members": {  # the plan's team.members (plan._team)
            "alice": {"team": "vision", "gpus": [0, 1]},
            "bob": {"team": "vision", "gpus": []},
            "chen": {"team": "nlp", "gpus": []},
        },
        "gpu_nodes": [{"name": "gpu-a", "gpu_count": 16}, {"name": "gpu-b", "gpu_count": 8}],  # the plan's nodes.gpu
        "member_pvc_size": "200Gi",
        "extra_pvcs": 8,
        "limit_default": {"cpu": "4", "memory": "16Gi"},
        "limit_default_request": {"cpu": "500m", "memory": "2Gi"},
        "monitoring_namespace": "monitoring",
        "default_storage_class": "",
    }
    base.update(extra)
    base.setdefault("namespaces", {t["name"]: namespace_of(t) for t in base["teams"]})
    return base


@pytest.mark.parametrize(("text", "number"), [
    ("96", Decimal(96)), ("500m", Decimal("0.5")), ("768Gi", Decimal(768 * 2**30)), ("4Ti", Decimal(4 * 2**40)),
    ("1.5G", Decimal("1.5e9")), ("1e3", Decimal(1000)), (8, Decimal(8)), (".5", Decimal("0.5")),
])
def test_quantities(text: object, number: Decimal) -> None:
    assert kt.parse_quantity(text) == number


@pytest.mark.parametrize("text", ["", "lots", "768GB", "4 Ti", "-1", "1.2.3", "Gi", None, True, 1.5, "0x10"])
def test_not_quantities(text: object) -> None:
    assert kt.parse_quantity(text) is None


def by_kind(objects: list[dict], namespace: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for obj in objects:
        if obj["metadata"].get("namespace", obj["metadata"]["name"]) == namespace:
            out.setdefault(obj["kind"], []).append(obj)
    return out


def test_objects_per_team() -> None:
    result = kt.plan(config())
    assert result["problems"] == []
    vision = by_kind(result["objects"], "team-vision")
    assert vision["Namespace"][0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    hard = vision["ResourceQuota"][0]["spec"]["hard"]
    assert hard == {"requests.nvidia.com/gpu": "8", "requests.cpu": "96", "requests.memory": "768Gi",
                    "limits.memory": "768Gi", "persistentvolumeclaims": "10", "requests.storage": "4Ti"}
    limits = vision["LimitRange"][0]["spec"]["limits"][0]
    assert limits["default"] == {"cpu": "4", "memory": "16Gi"}
    assert limits["defaultRequest"] == {"cpu": "500m", "memory": "2Gi"}
    policies = {p["metadata"]["name"]: p["spec"] for p in vision["NetworkPolicy"]}
    assert policies["vision-default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert policies["vision-allow-same-namespace"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert policies["vision-allow-monitoring"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"}
    binding = vision["RoleBinding"][0]
    assert binding["metadata"]["namespace"] == "team-vision"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "vision-team"}]
    pvcs = {p["metadata"]["name"]: p["spec"] for p in vision["PersistentVolumeClaim"]}
    assert set(pvcs) == {"workspace-alice", "workspace-bob"}
    assert pvcs["workspace-alice"]["storageClassName"] == "local-nvme"
    assert pvcs["workspace-alice"]["resources"]["requests"]["storage"] == "200Gi"
    nlp = by_kind(result["objects"], "nlp-lab")
    assert nlp["RoleBinding"][0]["subjects"][0]["name"] == "nlp", "group defaults to the team name"
    assert "storageClassName" not in nlp["PersistentVolumeClaim"][0]["spec"], "no class: the cluster default"
    assert all(obj["metadata"].get("namespace") in (None, "team-vision", "nlp-lab") for obj in result["objects"])
    keys = [(obj["kind"], obj["metadata"]["name"]) for obj in result["objects"]]
    assert len(keys) == len(set(keys)), "kind and name must be unique across teams (one render file each)"


def one_problem(**extra: object) -> str:
    problems = kt.problems(config(**extra))
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("key", ["gpu_quota", "cpu_quota", "memory_quota", "storage_quota"])
def test_every_quota_is_needed_for_a_namespace(key: str) -> None:
    teams = config()["teams"]
    del teams[0][key]
    assert one_problem(teams=teams).startswith(f"gpuops_teams[0] (vision).{key} is not set: a namespace's")


@pytest.mark.parametrize(("key", "value"), [
    ("name", "Vision_Team"), ("namespace", "team-vision"), ("memory_quota", "768GB"), ("gpu_quota", "8"),
])
def test_the_team_rule_is_not_repeated_here(key: str, value: object) -> None:
    """Names, namespaces, quantities and members in teams are the one team rule's (team.team_problems, run by the
    boilerplate play and grow; test_team.py): the tenancy does not say them a second time."""
    teams = config()["teams"]
    teams[1][key] = value
    assert kt.problems(config(teams=teams)) == []
    members = {**config()["members"], "dave": {"team": "robotics", "gpus": []}}
    assert kt.problems(config(members=members)) == []


def test_the_namespaces_are_the_plans() -> None:
    """Each team's objects go to the namespace gpuops_plan.team.namespaces names, not one worked out again."""
    result = kt.plan(config(namespaces={"vision": "cv-lab", "nlp": "nlp-lab"}))
    assert result["problems"] == []
    assert {o["metadata"]["name"] for o in result["objects"] if o["kind"] == "Namespace"} == {"cv-lab", "nlp-lab"}
    assert by_kind(result["objects"], "team-vision") == {}


def test_the_members_are_the_plans() -> None:
    """The members are the plan's team.members (member name -> {team, gpus}, plan._team): a PVC each, and the PVC
    count is checked against the storage quota."""
    members = config()["members"]
    from_plan = kt.plan(config())
    assert from_plan["problems"] == []
    pvcs = [o["metadata"]["name"] for o in from_plan["objects"] if o["kind"] == "PersistentVolumeClaim"]
    assert pvcs == ["workspace-alice", "workspace-bob", "workspace-chen"]
    teams = config()["teams"]
    teams[0]["storage_quota"] = "300Gi"
    assert "smaller than its 2 member PVCs" in one_problem(teams=teams, members=members)


def test_a_team_the_plan_does_not_hold_is_refused() -> None:
    """A plan made from another team list (an old plan.json): refused, naming the team and the fix."""
    problem = one_problem(namespaces={"vision": "team-vision"})
    assert problem.startswith("gpuops_teams[1] (nlp) has no namespace in the plan (gpuops_plan.team.namespaces "
                              "holds ['vision'])"), problem
    assert "run playbooks/preflight.yml" in problem
    assert kt.plan(config(namespaces={"vision": "team-vision"}))["objects"] == []


def test_gpu_quota_above_cluster() -> None:
    teams = config()["teams"]
    teams[0]["gpu_quota"] = 32
    assert "gpu_quota is 32, more than the cluster's 24 GPUs" in one_problem(teams=teams)
    assert kt.problems(config(teams=teams, gpu_nodes=[])) == [], "unknown cluster size: not checked"


def test_member_pvcs_must_fit_storage_quota() -> None:
    assert "smaller than its 2 member PVCs of 3Ti each" in kt.problems(config(member_pvc_size="3Ti"))[0]


def test_limit_defaults_checked() -> None:
    assert "kube_tenancy_limit_default.memory is '16 GB'" in one_problem(limit_default={"memory": "16 GB"})
