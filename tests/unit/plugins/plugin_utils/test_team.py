"""The team list rules (plugins/plugin_utils/team.py): one list for preflight, compose and Kubernetes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import team

REPO = Path(__file__).resolve().parents[4]
TEAMS = [{"name": "vision", "gpu_quota": 4, "cpu_quota": "48", "memory_quota": "384Gi", "storage_quota": "2Ti"},
         {"name": "speech", "namespace": "asr", "group": "speech-team"}]
MEMBERS = [{"name": "alice", "uid": 2001, "team": "vision", "gpus": [0, 1]},
           {"name": "bob", "uid": 2002, "team": "vision", "gpus": [2, 3]},
           {"name": "carol", "uid": 2003, "team": "speech", "gpus": [4], "mounts": ["/srv/code/carol:/code:rw"]}]


def problems_with(change) -> list[str]:
    teams, members = copy.deepcopy(TEAMS), copy.deepcopy(MEMBERS)
    change(teams, members)
    return team.team_problems(teams, members)


def test_a_valid_team_has_no_problems() -> None:
    assert team.team_problems(TEAMS, MEMBERS) == []


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (lambda t, m: m.clear(), ["gpuops_members is []", "at least one member"]),
        (lambda t, m: t.clear(), ["gpuops_teams is []", "gpuops_members[0].team is 'vision'"]),
        (lambda t, m: m[1].update(name="alice"), ["gpuops_members[1].name 'alice' appears twice", "Fix: rename"]),
        (lambda t, m: m[1].update(uid=2001), ["gpuops_members[1].uid 2001 of bob is also the uid of alice"]),
        (lambda t, m: m[0].update(uid=0), ["gpuops_members[0].uid is 0 for alice", "never run as root"]),
        (lambda t, m: m[0].update(uid="2001"), ["gpuops_members[0].uid is '2001'", "unquoted"]),
        (lambda t, m: m[0].update(gid=0), ["gpuops_members[0].gid is 0"]),
        (lambda t, m: m[0].update(name="alice;rm -rf /"), ["gpuops_members[0].name is 'alice;rm -rf /'", "shell"]),
        (lambda t, m: m[0].update(name="$(id)"), ["gpuops_members[0].name is '$(id)'"]),
        (lambda t, m: m[0].update(team="nlp"), ["gpuops_members[0].team is 'nlp' for alice", "vision, speech"]),
        (lambda t, m: m[0].pop("team"), ["gpuops_members[0].team is None for alice"]),
        (lambda t, m: m[2].update(team="vision"), ["team 'speech' (gpuops_teams) has no members"]),
        (lambda t, m: m[1].update(gpus=[1, 2]), ["GPU 1 is given twice: to alice and to bob"]),
        (lambda t, m: m[1].update(gpus=[-1]), ["gpuops_members[1].gpus lists -1", ">= 0"]),
        (lambda t, m: m[1].update(gpus=["2"]), ["gpuops_members[1].gpus lists '2'"]),
        (lambda t, m: m[1].update(gpus=2), ["gpuops_members[1].gpus is 2; expected a list"]),
        (lambda t, m: m[1].update(gpu=[5]), ["gpuops_members[1] has unknown key(s) gpu"]),
        (lambda t, m: t[1].update(name="Speech"), ["gpuops_teams[1].name is 'Speech'", "DNS-1123"]),
        (lambda t, m: t[1].update(name="vision"), ["gpuops_teams[1].name 'vision' appears twice"]),
        (lambda t, m: t[1].update(namespace="team-vision"), ["share namespace 'team-vision'"]),
        (lambda t, m: t[0].update(gpu_quota=-1), ["gpuops_teams[0].gpu_quota is -1"]),
        (lambda t, m: t[0].update(gpu_quota="8"), ["gpuops_teams[0].gpu_quota is '8'"]),
        (lambda t, m: t[0].update(memory_quota="lots"), ["gpuops_teams[0].memory_quota is 'lots'", "768Gi"]),
        (lambda t, m: t[0].update(quota=1), ["gpuops_teams[0] has unknown key(s) quota"]),
        (lambda t, m: t.append("ops"), ["gpuops_teams[2] is 'ops'; expected a mapping", "write each team as"]),
        (lambda t, m: m.append("dave"), ["gpuops_members[3] is 'dave'; expected a mapping", "write each member as"]),
        (lambda t, m: m[0].update(name="Alice"), ["gpuops_members[0].name is 'Alice'", "lower-case"]),
        # compose's keys: a shared GPU (MPS) and a workspace's limits
        (lambda t, m: m[1].update(shared_gpus=[{"gpu": 1, "memory": "20g"}]) or m[1].pop("gpus"),
         ["GPU 1 is shared by bob (gpuops_members[1].shared_gpus) and given exclusively to alice (gpus)"]),
        (lambda t, m: m[0].update(shared_gpus=[{"gpu": 2, "memory": "20g"}]) or m[0].pop("gpus"),
         ["GPU 2 is shared by alice (gpuops_members[0].shared_gpus) and given exclusively to bob (gpus)"]),
        (lambda t, m: m[2].update(shared_gpus=[{"gpu": 5, "memory": "20g"}]),
         ["gives carol both gpus [4] and shared_gpus"]),
        (lambda t, m: m[2].update(shared_gpus=[{"gpu": 5, "memory": "20g"}, {"gpu": 6, "memory": "20g"}])
         or m[2].pop("gpus"), ["expected a list of at most one entry"]),
        (lambda t, m: m[2].update(shared_gpus=[{"gpu": 5}]) or m[2].pop("gpus"),
         ["expected {gpu: <GPU index>, memory:"]),
        (lambda t, m: m[0].update(memory="64GB"), ["gpuops_members[0].memory is '64GB' for alice"]),
        (lambda t, m: m[0].update(memory="4m"), ["expected a size of at least 6m"]),
        (lambda t, m: m[0].update(cpus="8"), ["gpuops_members[0].cpus is '8' for alice"]),
        (lambda t, m: m[0].update(cpus=0), ["expected a number of CPUs > 0"]),
    ],
)
def test_each_problem_names_the_variable_the_value_and_the_fix(change, fragments) -> None:
    found = problems_with(change)
    text = "; ".join(found)
    for fragment in fragments:
        assert fragment in text, text
    assert all("Fix:" in p or "expected" in p for p in found), found


def test_missing_lists_are_refused_not_ignored() -> None:
    found = team.team_problems(None, None)
    assert any(p.startswith("gpuops_teams is None") for p in found)
    assert any(p.startswith("gpuops_members is None") for p in found)


def test_members_without_gpus_are_allowed_for_kubernetes() -> None:
    members = [{"name": "erin", "uid": 3001, "team": "vision"}, {"name": "finn", "uid": 3002, "team": "speech"}]
    assert team.team_problems(TEAMS, members) == []


def test_quota_quantities() -> None:
    for good in ["96", 96, "500m", "768Gi", "4Ti", "1.5", 1.5, "1e3"]:
        assert problems_with(lambda t, m, v=good: t[0].update(cpu_quota=v)) == [], good
    for bad in ["-1", "4 Ti", "4TB", "", "lots", "1.5.2", True]:
        assert problems_with(lambda t, m, v=bad: t[0].update(cpu_quota=v)), bad


@pytest.mark.parametrize("inventory", sorted(p.name for p in (REPO / "inventories").iterdir()))
def test_every_inventory_has_one_usable_team_list(inventory: str) -> None:
    root = REPO / "inventories" / inventory
    team_file = root / "group_vars" / "all" / "team.yml"
    assert team_file.exists(), f"{inventory}: the team belongs in group_vars/all/team.yml"
    data = yaml.safe_load(team_file.read_text())
    assert team.team_problems(data.get("gpuops_teams"), data.get("gpuops_members")) == []
    copies = [str(p.relative_to(REPO)) for p in root.rglob("*.yml")
              if p != team_file and any(k in (yaml.safe_load(p.read_text()) or {})
                                        for k in ("gpuops_members", "gpuops_teams", "compose_stack_members"))]
    assert copies == [], f"a second copy of the team: {copies}"
