"""playbooks/tasks/plan.yml takes the last preflight's plan.json only when it is this site's: it plans one of this
inventory's gpu_nodes. A plan.json another inventory's preflight left in the same report folder (make test's ops
stage plans the demo node, then the compose scenario runs on its own node against the same reports/) is not this
run's plan: the inventory's plan is made instead. One ansible-playbook run per host (--limit, so neither sees the
other's plan): one whose site the file plans, one whose site it does not (each host reads the report folder its own
gpuops_report_dir names)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import SCHEMA_VERSION
from ansible_env import NO_PROFILE_TASKS, json_document, playbook_env

REPO = Path(__file__).resolve().parents[2]
# The test plays are written as JSON (YAML): each builds on the same play, plan task and inventory.
PLAN = REPO / "playbooks" / "tasks" / "plan.yml"
GPUOPS_VARS = {"name": "The shared gpuops_* defaults, as the platform plays import them",
               "ansible.builtin.import_role": {"name": "gpuops.cluster._gpuops_vars", "rolespec_validate": False}}


def _on_gpu_nodes(name: str, tasks: list[dict], pre_tasks: list[dict] | None = None) -> dict:
    """A play on gpu_nodes, run on the controller."""
    return {"name": name, "hosts": "gpu_nodes", "connection": "local", "gather_facts": False,
            **({"pre_tasks": pre_tasks} if pre_tasks else {}), "tasks": tasks}


def _plan(**variables) -> dict:
    """The plan entry point (playbooks/tasks/plan.yml), with its variables."""
    return {"name": "The plan (gpuops_plan)", "ansible.builtin.import_tasks": str(PLAN),
            **({"vars": variables} if variables else {})}


def _inventory(hosts: dict[str, dict], **all_vars) -> dict:
    """gpu_nodes: host -> its variables (gpuops_report_dir: the report folder it reads), run by the controller's
    Python."""
    python = {"ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    return {"gpu_nodes": {"hosts": {host: {**python, **variables} for host, variables in hosts.items()}},
            "all": {"vars": all_vars}}


WHERE = "Where it came from"
PLAYBOOK = [_on_gpu_nodes("Resolve the plan as a play run on its own does", [
    _plan(),
    {"name": WHERE,
     "ansible.builtin.debug": {"msg": "{{ gpuops_plan.source }} {{ gpuops_plan.hosts | list | sort | join(',') }}"}},
])]


def _report_dir(root: Path, planned: str, version: int = SCHEMA_VERSION) -> Path:
    folder = root / planned
    folder.mkdir()
    plan = {"schema_version": version, "source": "preflight", "platform": {"name": "compose", "reason": "recorded"},
            "hosts": {planned: {}}}
    (folder / "plan.json").write_text(json.dumps(plan))
    return folder


def _play(folder: Path, inventory: dict, plays: list[dict], *options: str) -> tuple[subprocess.CompletedProcess, list]:
    """Write the inventory and the plays into folder, run them (memory fact cache, JSON callback): the run and its
    plays' results."""
    (folder / "hosts.yml").write_text(json.dumps(inventory))
    (folder / "play.yml").write_text(json.dumps(plays))
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(folder / "hosts.yml"), *options,
         str(folder / "play.yml")],
        capture_output=True, text=True, check=False,
        env=playbook_env(cache="memory", callback="ansible.posix.json", extra=NO_PROFILE_TASKS), timeout=300,
    )
    return run, json_document(run.stdout)["plays"]


def _results(plays: list, task: str) -> list[tuple[str, dict]]:
    """(host, result) of every run of the task named task, in play order."""
    return [(name, result) for play in plays for each in play["tasks"] if each["task"]["name"] == task
            for name, result in each["hosts"].items()]


def test_the_last_plan_is_taken_only_for_its_own_site(tmp_path: Path) -> None:
    ours, other = _report_dir(tmp_path, "node-a"), _report_dir(tmp_path, "gpuops-demo-node")
    inventory = _inventory({"node-a": {"gpuops_report_dir": str(ours)}, "node-b": {"gpuops_report_dir": str(other)}},
                           gpuops_platform="compose")
    said = {}
    for host in ("node-a", "node-b"):
        run, plays = _play(tmp_path, inventory, PLAYBOOK, "--limit", host)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        said.update({name: result["msg"] for name, result in _results(plays, WHERE)})
    assert said["node-a"] == "preflight node-a", "plan.json plans node-a, one of this site's gpu_nodes: taken"
    assert said["node-b"].startswith("inventory "), "plan.json plans only another site's host: not taken"
    assert said["node-b"] == "inventory node-a,node-b"


def test_a_plan_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    """A plan.json an older preflight wrote (another schema_version) may lack keys the roles read or mean other things
    by them: refused once, before any role reads it, naming the file, both versions and the fix - not piecemeal by
    each reader (kube_monitoring's refusal of a plan whose nodes lack the sweep label was one)."""
    ours = _report_dir(tmp_path, "node-a", version=SCHEMA_VERSION - 1)
    run, plays = _play(tmp_path, _inventory({"node-a": {"gpuops_report_dir": str(ours)}}, gpuops_platform="compose"),
                       PLAYBOOK)
    assert run.returncode != 0
    ((_host, refused),) = _results(plays, "Plan | the plan is of this collection's schema")
    assert refused.get("failed") is True
    assert f"{ours}/plan.json" in refused["msg"]
    assert f"has schema_version {SCHEMA_VERSION - 1}; this collection reads schema_version {SCHEMA_VERSION}" in (
        refused["msg"])
    assert "Nothing was changed. Fix: run playbooks/preflight.yml" in refused["msg"]
    assert not _results(plays, WHERE), "a role would have read the stale plan"


def test_a_plan_that_decided_no_platform_is_refused(tmp_path: Path) -> None:
    """auto, no GPU facts and no gpuops_gpu_count: the inventory's plan decides no platform, and the play stops with
    the plan's reason and the fix (plan_require_platform, true unless the play says otherwise)."""
    inventory = _inventory({"node-a": {"gpuops_report_dir": str(tmp_path)}}, gpuops_platform="auto")
    run, plays = _play(tmp_path, inventory, PLAYBOOK)
    assert run.returncode != 0
    ((_host, refused),) = _results(plays, "Plan | the platform was decided")
    assert "the platform of node-a is not decided (inventory plan: " in refused["msg"]
    assert "set gpuops_platform: compose or kubernetes" in refused["msg"]


CHECK = "gpuops.cluster._gpuops_vars : Known names, exact types, choices, forms; no retired variable; a usable team"


def _check(tmp_path: Path, variables: dict, roles: list) -> dict:
    """The gpuops_* check's result on node-a: a compose.yml-like play, no plan.json (the inventory's plan)."""
    inventory = _inventory({"node-a": {"gpuops_report_dir": str(tmp_path)}},
                           gpuops_platform="compose", gpuops_teams=[{"name": "research"}], **variables)
    alone = _on_gpu_nodes("A platform or day-2 play run on its own", [_plan(plan_roles=roles)], [GPUOPS_VARS])
    run, plays = _play(tmp_path, inventory, [alone])
    results = [pair[1] for pair in _results(plays, CHECK)]
    assert len(results) == 1, run.stdout[-3000:] + run.stderr[-2000:]
    return results[0]


TWICE = [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]},
         {"name": "bob", "uid": 2002, "team": "research", "gpus": [0]}]


def test_a_platform_play_run_alone_checks_the_team_it_deploys(tmp_path: Path) -> None:
    """compose.yml on its own, with no preflight on record: site.yml's boilerplate check (role _gpuops_vars) runs
    before the plan is carried out, the team's rules with it, since the workspace planning checks only what depends
    on the host."""
    refused = _check(tmp_path, {"gpuops_members": TWICE}, ["docker_engine", "compose_stack"])
    assert refused.get("failed") is True
    assert "cannot be used on node-a" in refused["msg"]
    assert "GPU 0 is given twice: to alice and to bob" in refused["msg"]
    assert "Nothing was changed" in refused["msg"]


def test_the_team_is_checked_only_where_the_play_deploys_it(tmp_path: Path) -> None:
    usable = [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]}]
    assert _check(tmp_path, {"gpuops_members": usable}, ["docker_engine", "compose_stack"]).get("failed") is not True
    assert _check(tmp_path, {"gpuops_members": TWICE}, ["docker_engine"]).get("failed") is not True


def test_a_play_run_alone_refuses_what_the_boilerplate_check_refuses(tmp_path: Path) -> None:
    """burnin.yml on its own (plan_roles [burnin], no team): a retired variable and a typo are refused as site.yml's
    boilerplate play refuses them, not ignored."""
    refused = _check(tmp_path, {"burnin_pcie_gen": 5, "gpuops_plattform": "compose"}, ["burnin"])
    assert refused.get("failed") is True
    assert "burnin_pcie_gen is set on node-a to 5; it is no longer read. Fix: move it to validate_pcie_gen" in (
        refused["msg"])
    assert "unknown variable(s) gpuops_plattform on node-a" in refused["msg"]
    assert "gpuops_members is []" not in refused["msg"], "the team is not checked where the play deploys none"


def test_the_check_is_not_run_again_where_this_runs_preflight_made_the_plan(tmp_path: Path) -> None:
    """site.yml: the boilerplate play checked the inventory before preflight made the plan (here a gpuops_plan the
    host already holds, as preflight sets it), so the plan entry point does not check it a second time."""
    made = {"source": "preflight", "platform": {"name": "compose", "reason": "decided"}, "hosts": {"node-a": {}}}
    assert _check(tmp_path, {"gpuops_plan": made, "burnin_pcie_gen": 5}, ["burnin"]).get("skipped") is True


READ = "Plan | the GPU facts, where preflight did not run in this play run"
PCI_READ = "The GPU facts a PCI-only read leaves (nvidia_container_toolkit's), from a /sys with one GPU"
# A full read's view as gpu_facts' RETURN documents it: topology null unless topology=true found a matrix.
FULL = {"present": True, "count": 1, "source": "nvidia-smi", "gpus": [{"index": 0, "memory_total_mib": 143771}]}
TOPOLOGY = {"gpus": [{"index": 0, "numa_node": 0}], "numa_groups": [], "nvlink_domains": [], "warnings": []}


def test_the_gpu_facts_are_read_where_those_held_lack_what_the_plan_reads(tmp_path: Path) -> None:
    """plan_gpu_facts: the facts are read where none are held, and also where the held ones are a PCI-only read (no
    memory, no MIG mode) or lack the topology plan_gpu_topology wants; not where they give what the plan reads, nor
    where the host holds its plan already (this run's preflight made it, on its own read)."""
    sysfs = tmp_path / "sys"
    device = sysfs / "bus" / "pci" / "devices" / "0000:00:06.0"  # the H200 host's GPU: bus id, 3D controller class
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    hosts = {
        "none-held": {"test_left": ""},
        "pci-read": {"test_left": "pci"},
        "no-topology-wanted": {"test_left": {**FULL, "topology": None}, "plan_gpu_topology": True},
        "no-topology-unwanted": {"test_left": {**FULL, "topology": None}},
        "with-topology": {"test_left": {**FULL, "topology": TOPOLOGY}, "plan_gpu_topology": True},
        "planned-by-preflight": {"test_left": "pci", "test_planned": True, "plan_gpu_topology": True},
    }
    inventory = _inventory({name: {**variables, "gpuops_report_dir": str(tmp_path)}
                            for name, variables in hosts.items()}, gpuops_platform="compose")
    planned = {"schema_version": SCHEMA_VERSION, "source": "preflight",
               "platform": {"name": "compose", "reason": "decided"}, "hosts": {"planned-by-preflight": {}}}
    left_behind = _on_gpu_nodes("A platform play run on its own, after other tasks left GPU facts behind", [
        {"name": PCI_READ, "gpuops.cluster.gpu_facts": {"backend": "pci", "_sysfs_root": str(sysfs)},
         "when": "test_left == 'pci'"},
        {"name": "The GPU facts a full read left, with or without the topology (as the fact cache holds them)",
         "ansible.builtin.set_fact": {"gpu": "{{ test_left }}", "cacheable": True}, "when": "test_left is mapping"},
        {"name": "The plan this run's preflight set, with its facts",
         "ansible.builtin.set_fact": {"gpuops_plan": planned}, "when": "test_planned | default(false)"},
        _plan(plan_gpu_facts=True),
    ])
    run, plays = _play(tmp_path, inventory, [left_behind])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    left = {name: result for name, result in _results(plays, PCI_READ) if not result.get("skipped")}
    assert left["pci-read"]["ansible_facts"]["gpu"]["source"] == "pci", "the held view is the PCI backend's"
    read = {name: not result.get("skipped") for name, result in _results(plays, READ)}
    assert read == {
        "none-held": True,
        "pci-read": True,
        "no-topology-wanted": True,
        "no-topology-unwanted": False,
        "with-topology": False,
        "planned-by-preflight": False,
    }


TWO_PLAYS = [
    _on_gpu_nodes("A platform play run on its own (compose.yml's docker_engine)",
                  [_plan(plan_roles=["docker_engine"])]),
    _on_gpu_nodes("A second playbook imported into the same run (burnin.yml)", [_plan(plan_roles=["burnin"])], [
        GPUOPS_VARS,
        {"name": "The CUDA devel image of validate, as burnin.yml reads it (its defaults only)",
         "ansible.builtin.import_role": {"name": "gpuops.cluster.validate"}, "when": False},
    ]),
]
INPUTS = "Inputs | every role's problem at once"


def test_a_second_play_checks_its_own_roles_where_no_preflight_made_the_plan(tmp_path: Path) -> None:
    """Two playbooks in one ansible-playbook run, no preflight: the first play resolved gpuops_plan (from the
    inventory), which does not make it this run's preflight's plan, so the second play's roles' inputs are checked
    too (burnin_timeout 0 is refused), not skipped as if preflight's inputs pass had checked them."""
    inventory = _inventory({"node-a": {"gpuops_report_dir": str(tmp_path)}},
                           gpuops_platform="compose", docker_engine_source="docker", burnin_timeout=0)
    run, plays = _play(tmp_path, inventory, TWO_PLAYS)
    first, second = ([task["hosts"]["node-a"] for task in play["tasks"] if task["task"]["name"] == INPUTS]
                     for play in plays)
    assert first, "the first play's roles were not checked: " + run.stdout[-3000:] + run.stderr[-2000:]
    assert first[0].get("failed") is not True, "docker_engine's inputs pass: " + str(first)
    assert second, "the second play's roles were not checked: " + run.stdout[-3000:]
    assert second[0].get("failed") is True
    assert "burnin_timeout is 0; allowed: 1 or more seconds" in second[0]["msg"]


def test_the_last_plan_is_not_taken_where_the_inventory_fixes_another_platform(tmp_path: Path) -> None:
    """plan.json from the Compose site's preflight plans node-a with platform compose; the inventory now says
    kubernetes (grow_apply.yml sets it on every cluster host): that plan is not this site's now, the inventory's plan
    is made instead, for kubernetes. With the inventory on auto, the recorded decision stands."""
    said = {}
    for platform in ("kubernetes", "auto"):
        folder = tmp_path / platform
        folder.mkdir()
        inventory = _inventory({"node-a": {"gpuops_report_dir": str(_report_dir(folder, "node-a"))}},
                               gpuops_platform=platform)
        run, plays = _play(folder, inventory, PLAYBOOK)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        said[platform] = [pair[1]["msg"] for pair in _results(plays, WHERE)]
    assert said == {"kubernetes": ["inventory node-a"], "auto": ["preflight node-a"]}
