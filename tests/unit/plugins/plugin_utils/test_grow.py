"""The growth plan (plugins/plugin_utils/grow.py): teams, datasets, workspaces, MLflow and the refusals.

test_small_team_plan runs playbooks/grow.yml -e grow_plan_only=true on inventories/small-team, whose host is a
documentation address (192.0.2.10, RFC 5737) that nothing answers: the run passes only if no host is contacted.
The same on inventories/cluster is tests/render/test_grow_plan.py's run (beside the render it is compared with).
Every object of the plan is validated with kubernetes-validate (strict) at the cluster inventory's kube_version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import grow, preflight
from ansible_env import NO_PROFILE_TASKS, json_document, playbook_env

REPO = Path(__file__).resolve().parents[4]
SMALL_TEAM = REPO / "inventories" / "small-team"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
KUBE_VERSION = yaml.safe_load((REPO / "inventories/cluster/group_vars/k8s_cluster/k8s-cluster.yml").read_text())[
    "kube_version"]
TEAM_DEFAULTS = {"cpu_quota": "32", "memory_quota": "256Gi", "storage_quota": "2Ti"}
TENANCY = {"member_pvc_size": "100Gi", "extra_pvcs": 4, "limit_default": {"cpu": "4", "memory": "16Gi"},
           "limit_default_request": {"cpu": "500m", "memory": "2Gi"}, "monitoring_namespace": "monitoring"}


def config(**extra: object) -> dict:
    base = {
        "members": [{"name": "alice", "uid": 2001, "team": "vision", "gpus": [0, 1]},
                    {"name": "bob", "uid": 2002, "gpus": [2]},
                    {"name": "chen", "uid": 2003, "gid": 3000, "gpus": [3, 4, 5]}],
        "teams": [{"name": "vision", "gpu_quota": 8, "cpu_quota": "48", "memory_quota": "384Gi",
                   "storage_quota": "2Ti"}],
        "team_of": {"chen": "nlp"}, "team_defaults": TEAM_DEFAULTS, "workspace_storage_class": "gpuops-workspace",
        "workers": [{"name": "gpu01", "pool": None, "gpu_count": 8}], "pool": "training", "compose_host": "gpu01",
        "datasets": [{"name": "imagenet", "src": "nas:/export/datasets/imagenet", "fstype": "nfs4",
                      "opts": "ro,hard,nfsvers=4.2"},
                     {"name": "audio", "src": "nas:/export/datasets/audio", "fstype": "nfs"}],
        "dataset_users": {"audio": ["chen"]}, "nfs_exports": ["nas:/export/datasets"], "dataset_size": "1Ti",
        "workspace_storage": "local", "scratch_dir": "/srv/scratch", "data_dir": "/srv/gpuops",
        "mlflow_source_image": "ghcr.io/mlflow/mlflow:v3.17.2", "mlflow_target_image": "ghcr.io/mlflow/mlflow:v3.17.2",
        "mlflow_namespace": "mlflow", "mlflow_admin_user": "admin", "tenancy": TENANCY, "created": 1000,
        "sources": {}, "workspace_nfs": "",
    }
    return {**base, **extra}


def of_kind(objects: list[dict], kind: str, prefix: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(prefix)]


def validation_errors(objects: list[dict]) -> list[str]:
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.utils.ValidationError as exc:
            errors.append(f"{obj['kind']} {obj['metadata']['name']}: {str(exc).splitlines()[0]}")
    return errors


def test_teams_declared_mapped_and_own() -> None:
    result = grow.plan(config())
    assert result["problems"] == []
    teams = {t["name"]: t for t in result["teams"]}
    # alice declares vision; chen is mapped to nlp by grow_team_of; bob declares nothing: a team of his own
    assert {n: t["members"] for n, t in teams.items()} == {"vision": ["alice"], "bob": ["bob"], "nlp": ["chen"]}
    assert {n: t["gpu_quota"] for n, t in teams.items()} == {"vision": 2, "bob": 1, "nlp": 3}
    assert teams["nlp"]["namespace"] == "team-nlp"
    # uids and gids carry over
    assert {m["name"]: (m["uid"], m["gid"]) for m in result["members"]} == {
        "alice": (2001, 2001), "bob": (2002, 2002), "chen": (2003, 3000)}
    declared = {t["name"]: t for t in result["gpuops_teams"]}
    assert declared["vision"]["cpu_quota"] == "48"
    assert declared["bob"]["cpu_quota"] == "32"


def test_datasets_pv_per_namespace_of_its_users() -> None:
    result = grow.plan(config())
    by_name = {d["name"]: d for d in result["datasets"]}
    assert by_name["imagenet"]["namespaces"] == ["team-bob", "team-nlp", "team-vision"]
    assert by_name["audio"]["namespaces"] == ["team-nlp"]
    pvs = of_kind(result["objects"], "PersistentVolume", "dataset-")
    pvcs = of_kind(result["objects"], "PersistentVolumeClaim", "dataset-")
    assert sorted((o["spec"]["claimRef"]["namespace"], o["spec"]["nfs"]["path"]) for o in pvs) == [
        ("team-bob", "/export/datasets/imagenet"), ("team-nlp", "/export/datasets/audio"),
        ("team-nlp", "/export/datasets/imagenet"), ("team-vision", "/export/datasets/imagenet")]
    assert all(o["spec"]["accessModes"] == ["ReadOnlyMany"] and o["spec"]["nfs"]["readOnly"] for o in pvs)
    assert {(o["metadata"]["namespace"], o["spec"]["volumeName"]) for o in pvcs} == {
        (o["spec"]["claimRef"]["namespace"], o["metadata"]["name"]) for o in pvs}
    assert validation_errors(result["objects"]) == []


def test_workspaces_bind_to_the_tenancy_claims() -> None:
    result = grow.plan(config())
    claims = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in result["objects"]
              if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"].startswith("workspace-")}
    pvs = of_kind(result["objects"], "PersistentVolume", "workspace-")
    assert len(pvs) == len(claims) == len(result["members"])
    for pv in pvs:
        claim = claims[(pv["spec"]["claimRef"]["namespace"], pv["spec"]["claimRef"]["name"])]
        assert pv["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == "gpuops-workspace"
        assert pv["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert pv["spec"]["local"]["path"] == f"/srv/scratch/{pv['metadata']['labels']['gpuops.io/member']}"
    nfs = grow.plan(config(workspace_storage="nfs", workspace_nfs="nas:/export/home"))
    paths = sorted(o["spec"]["nfs"]["path"] for o in nfs["objects"] if o["metadata"]["name"].startswith("workspace-")
                   and o["kind"] == "PersistentVolume")
    assert paths == ["/export/home/alice", "/export/home/bob", "/export/home/chen"]
    assert validation_errors(nfs["objects"]) == []


@pytest.mark.parametrize(("change", "fragment"), [
    ({"workers": [{"name": "gpu01", "gpu_count": 2}]}, "member chen holds 3 GPUs on Compose"),
    ({"workers": [{"name": "a", "gpu_count": 4}, {"name": "b", "gpu_count": 4, "pool": "inference"}]},
     "the members hold 6 GPUs on Compose, but pool 'training' has 4"),
    ({"datasets": [{"name": "local", "src": "/data/local", "fstype": "none"}]}, "expected an NFS export"),
    ({"datasets": [{"name": "x", "src": "other:/srv/x", "fstype": "nfs4"}]},
     "is not on an NFS export of grow_nfs_exports"),
    ({"mlflow_target_image": "ghcr.io/mlflow/mlflow:v2.22.0"}, "is older than the Compose one"),
    ({"workspace_storage": "nfs", "workspace_nfs": ""}, "grow_workspace_nfs is ''"),
    ({"members": [{"name": "alice", "uid": 2001, "gpus": [0]}, {"name": "bob", "uid": 2001, "gpus": [1]}]},
     "uid 2001 of bob is also the uid of alice"),
    ({"members": [{"name": "alice", "uid": 2001, "team": "vision", "gpus": [0]},
                  {"name": "team-vision", "uid": 2002, "team": "vision", "gpus": [1]}]},
     "member team-vision (gpuops_members[1]) has a Compose MLflow user of that name, and the per-team user "
     "training_stack makes for team vision is named the same"),
    ({"members": [{"name": "root", "uid": 2001, "gpus": [0]}], "mlflow_admin_user": "root"},
     "the cluster MLflow's admin (training_stack_mlflow_admin_user 'root')"),
])
def test_refusals(change: dict, fragment: str) -> None:
    result = grow.plan(config(**change))
    assert any(fragment in p for p in result["problems"]), result["problems"]
    assert result["objects"] == []


def test_mlflow_users_carried_are_the_members_none_clashing() -> None:
    result = grow.plan(config())
    assert result["mlflow"]["users"] == ["alice", "bob", "chen"]
    assert grow.mlflow_user_problems(result["gpuops_members"], result["gpuops_teams"], "admin") == []
    assert "users carried over (one per member, named as the member): alice, bob, chen" in grow.markdown(result)


def test_stale_and_versions() -> None:
    assert grow.stale_problems(100, {"inv/team.yml": 99.5}) == []
    assert "older than inv/team.yml" in grow.stale_problems(100, {"inv/team.yml": 101, "x": 50})[0]
    assert "no creation time" in grow.stale_problems(None, {})[0]
    assert grow.version_tuple("registry:5000/mlflow/mlflow:v3.17.2") == (3, 17, 2)
    assert grow.version_tuple("3.1") == (3, 1)


# the report folder, the run, plan.json and plan.md (small_team_plan)
SmallTeamPlan = tuple[Path, subprocess.CompletedProcess, str, str]


@pytest.fixture(scope="module")
def small_team_plan(tmp_path_factory: pytest.TempPathFactory) -> SmallTeamPlan:
    """One grow.yml -e grow_plan_only=true on inventories/small-team, the plan written to its default folder (under
    the report folder): (the report folder, the run, plan.json and plan.md as the run wrote them). The plan's tests
    and the applies of the stale check and of the Kubernetes plan share it."""
    playbook = BIN / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not found at {playbook} (run make venv)")
    reports = tmp_path_factory.mktemp("small-team-reports")
    env = playbook_env(REPO, cache="memory",
                       extra={"NO_COLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false", **NO_PROFILE_TASKS})
    run = subprocess.run([str(playbook), "-i", str(SMALL_TEAM), str(REPO / "playbooks" / "grow.yml"),
                          "-e", "grow_plan_only=true", "-e", f"gpuops_report_dir={reports}"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    folder = reports / "grow"
    return reports, run, (folder / "plan.json").read_text(), (folder / "plan.md").read_text()


def test_small_team_plan(small_team_plan: SmallTeamPlan) -> None:
    _reports, run, plan_json, plan_md = small_team_plan
    assert "unreachable=0" in run.stdout
    plan = json.loads(plan_json)
    assert plan_md.startswith("# Growth plan")
    team_vars = yaml.safe_load((SMALL_TEAM / "group_vars/all/team.yml").read_text())
    data_vars = yaml.safe_load((SMALL_TEAM / "group_vars/gpu_nodes/data.yml").read_text())
    members = team_vars["gpuops_members"]
    # every member in exactly one team; each quota = the GPUs its members held
    listed = [name for t in plan["teams"] for name in t["members"]]
    assert sorted(listed) == sorted(m["name"] for m in members)
    for t in plan["teams"]:
        assert t["gpu_quota"] == sum(len(m["gpus"]) for m in members if m["name"] in t["members"])
    # every dataset: one PV per namespace that uses it (every member's, as Compose mounts each in every workspace)
    namespaces = {t["namespace"] for t in plan["teams"]}
    objects = plan["objects"]
    for d in data_vars["compose_stack_datasets"]:
        server, path = d["src"].split(":", 1)
        pvs = of_kind(objects, "PersistentVolume", f"dataset-{d['name']}-")
        assert {o["spec"]["claimRef"]["namespace"] for o in pvs} == namespaces
        assert {(o["spec"]["nfs"]["server"], o["spec"]["nfs"]["path"]) for o in pvs} == {(server, path)}
        pvcs = {o["metadata"]["namespace"] for o in objects if o["kind"] == "PersistentVolumeClaim"
                and o["metadata"]["name"] == f"dataset-{d['name']}"}
        assert pvcs == namespaces
    assert validation_errors(objects) == []
    assert {w["member"]: w["source"]["path"] for w in plan["workspaces"]} == {
        m["name"]: f"/srv/scratch/{m['name']}" for m in members}
    assert plan["hosts"]["control_planes"] == ["gpu01"]
    assert [w["name"] for w in plan["hosts"]["gpu_workers"]] == ["gpu01"]
    assert plan["mlflow"]["source"]["dir"] == "/srv/gpuops/mlflow"  # the store the apply copies (mlflow_copy)
    assert plan["mlflow"]["source"]["backend"] == "/srv/gpuops/mlflow/backend/mlflow.db"


def test_a_fresh_plan_passes_the_stale_check(small_team_plan: SmallTeamPlan) -> None:
    """The plan written to the default folder (under the report folder, which the check also reads) is not taken
    for a source newer than itself: the apply gets past the controller's checks and stops only at the Compose host,
    which nothing answers here."""
    reports, _planned, _plan_json, _plan_md = small_team_plan
    extra = {"NO_COLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_TIMEOUT": "3", **NO_PROFILE_TASKS}
    env = playbook_env(REPO, cache="memory", extra=extra)
    applied = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(SMALL_TEAM),
                              str(REPO / "playbooks" / "grow.yml"), "-e", f"gpuops_report_dir={reports}",
                              "-e", "grow_apply=true"], cwd=REPO, env=env, capture_output=True, text=True, check=False,
                             timeout=300)
    assert "is not the plan this inventory gives now" not in applied.stdout
    assert "UNREACHABLE" in applied.stdout, applied.stdout[-3000:]


STAGE_0_PLAN = "Plan | this run's plan, else the last preflight's, else the inventory's"


def test_apply_gives_the_grown_hosts_a_kubernetes_plan(tmp_path: Path, small_team_plan: SmallTeamPlan) -> None:
    """grow.yml -e grow_apply=true on inventories/small-team: gpu01, the Compose host, is also the cluster's control
    plane and GPU worker. The grow plan play left it holding the Compose site's plan (platform compose), so
    kubernetes.yml's stage 0 must not keep that plan, or every grown host is "on another platform" and the
    Kubernetes path is skipped. gpu01 runs locally for the read-only steps (the apply's stat of compose.yaml, stage
    0 on the controller, which checks the Kubernetes inputs: kube_version from inventories/cluster); a facts module
    that does not exist is the stand-in that stops the run at stage 1's fact gathering, the first step that would
    touch the host, so nothing here is changed. The plan is the module's plan-only run's (small_team_plan, a copy of
    its report folder): the local overlay changes nothing the plan holds, as the apply's stale check says."""
    playbook = BIN / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not found at {playbook} (run make venv)")
    local = {"all": {"hosts": {"gpu01": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "ansible_become": False, "ansible_facts_modules": ["gpuops.cluster.no_such_facts_module"],
        "kube_version": KUBE_VERSION}}}}
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "local.yml").write_text(json.dumps(local))
    env = playbook_env(REPO, cache="memory", callback="ansible.posix.json", extra=NO_PROFILE_TASKS)
    base = [str(playbook), "-i", str(SMALL_TEAM), "-i", str(tmp_path / "inventory" / "local.yml"),
            str(REPO / "playbooks" / "grow.yml"), "-e", f"gpuops_report_dir={tmp_path / 'reports'}"]
    shutil.copytree(small_team_plan[0], tmp_path / "reports")
    # Without the cluster MLflow's store, the apply is refused by its read-only first play, before any host changes.
    refused = subprocess.run([*base, "-e", "grow_apply=true"], cwd=REPO, env=env, capture_output=True, text=True,
                             check=False, timeout=300)
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "grow_mlflow_target_dir is ''" in refused.stdout, refused.stdout[-3000:]
    assert "Kubernetes | 0." not in refused.stdout, "the apply went on past the refusal"
    applied = subprocess.run([*base, "-e", "grow_apply=true", "-e", "grow_mlflow_target_dir=/srv/cluster-mlflow"],
                             cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    plays = {play["play"]["name"]: play for play in json_document(applied.stdout)["plays"]}
    stage_0 = plays.get("Kubernetes | 0. the plan and the inputs, checked on the controller before any host changes")
    assert stage_0, applied.stdout[-3000:] + applied.stderr[-2000:]
    platforms = {name: result["ansible_facts"]["gpuops_plan"]["platform"]["name"] for task in stage_0["tasks"]
                 for name, result in task["hosts"].items() if task["task"]["name"] == STAGE_0_PLAN}
    assert platforms == {"gpu01": "kubernetes"}
    stage_1 = plays.get("Kubernetes | 1. nodes (containerd, kubelet, kubeadm, kubectl, cri-tools; host preparation; "
                        "kubelet policy)")
    assert stage_1, "stage 0 refused or failed: " + applied.stdout[-3000:]
    stopped = [result for task in stage_1["tasks"] for result in task["hosts"].values()]
    assert len(stopped) == 1, "the stand-in must stop stage 1 at its fact gathering: " + str(stopped)
    assert "no_such_facts_module was not found" in stopped[0]["msg"]


def test_an_ipv6_nfs_source_is_read_as_preflight_reads_it() -> None:
    """grow reads a dataset's src with preflight.nfs_source, the parser of preflight's probe and the plan's
    nfs_servers: an IPv6 server in brackets gives the PV the bare address (Kubernetes' form: the kubelet brackets an
    IPv6 server itself since 1.22, kubernetes#101067); grow's own parser kept the brackets, and took an IPv6 address
    without them (fd00::5:/export, which mount.nfs cannot read and compose_stack refuses) for a server."""
    v6 = {"name": "v6", "src": "[fd00::5]:/export/datasets/v6/", "fstype": "nfs4", "opts": "ro,port=20490"}
    result = grow.plan(config(datasets=[v6], nfs_exports=["[fd00::5]:/export/datasets"]))
    assert result["problems"] == []
    pvs = of_kind(result["objects"], "PersistentVolume", "dataset-v6-")
    assert {(o["spec"]["nfs"]["server"], o["spec"]["nfs"]["path"]) for o in pvs} == {("fd00::5", "/export/datasets/v6")}
    assert pvs[0]["spec"]["mountOptions"] == ["port=20490"]
    assert preflight.nfs_targets([v6]) == [{"dataset": "v6", "host": "fd00::5", "port": 20490}]
    bare = grow.plan(config(datasets=[{**v6, "src": "fd00::5:/export/datasets/v6"}], nfs_exports=[]))
    assert any("expected an NFS export" in p for p in bare["problems"]), bare["problems"]


@pytest.mark.parametrize("key", ["pool", "workspace_storage", "workspace_storage_class", "dataset_size",
                                 "mlflow_namespace", "mlflow_admin_user"])
def test_the_settings_have_no_default_of_their_own(key: str) -> None:
    """grow.plan takes each role setting as the grow role's tasks/main.yml passes it: its default is the role's (grow,
    training_stack), not a second one here; a missing one is an error."""
    with pytest.raises(KeyError, match=key):
        grow.plan({name: value for name, value in config().items() if name != key})
