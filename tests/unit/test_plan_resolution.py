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

from ansible_env import json_document, playbook_env

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = """\
- name: Resolve the plan as a play run on its own does
  hosts: gpu_nodes
  connection: local
  gather_facts: false
  tasks:
    - name: The plan (gpuops_plan)
      ansible.builtin.import_tasks: {plan}

    - name: Where it came from
      ansible.builtin.debug:
        msg: "{{{{ gpuops_plan.source }}}} {{{{ gpuops_plan.hosts | list | sort | join(',') }}}}"
"""


def _report_dir(root: Path, planned: str) -> Path:
    folder = root / planned
    folder.mkdir()
    plan = {"source": "preflight", "platform": {"name": "compose", "reason": "recorded"}, "hosts": {planned: {}}}
    (folder / "plan.json").write_text(json.dumps(plan))
    return folder


def test_the_last_plan_is_taken_only_for_its_own_site(tmp_path: Path) -> None:
    ours, other = _report_dir(tmp_path, "node-a"), _report_dir(tmp_path, "gpuops-demo-node")
    inventory = {"gpu_nodes": {"hosts": {
        "node-a": {"gpuops_report_dir": str(ours), "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "node-b": {"gpuops_report_dir": str(other), "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
    }}, "all": {"vars": {"gpuops_platform": "compose"}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(plan=REPO / "playbooks" / "tasks" / "plan.yml"))
    said = {}
    for host in ("node-a", "node-b"):
        run = subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), "--limit", host,
             str(tmp_path / "play.yml")],
            capture_output=True, text=True, check=False,
            env=playbook_env(cache="memory", callback="ansible.posix.json"), timeout=300,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        said.update({name: result["msg"] for play in json_document(run.stdout)["plays"] for task in play["tasks"]
                     for name, result in task["hosts"].items() if task["task"]["name"] == "Where it came from"})
    assert said["node-a"] == "preflight node-a", "plan.json plans node-a, one of this site's gpu_nodes: taken"
    assert said["node-b"].startswith("inventory "), "plan.json plans only another site's host: not taken"
    assert said["node-b"] == "inventory node-a,node-b"


TEAM_PLAY = """\
- name: A platform play run on its own that deploys the members' workspaces
  hosts: gpu_nodes
  connection: local
  gather_facts: false
  pre_tasks:
    - name: The shared gpuops_* defaults, as the platform plays import them
      ansible.builtin.import_role:
        name: gpuops.cluster._gpuops_vars
        rolespec_validate: false
  tasks:
    - name: The plan (gpuops_plan)
      ansible.builtin.import_tasks: {plan}
      vars:
        plan_roles: {roles}
"""


def _team_check(tmp_path: Path, members: list, roles: list) -> dict:
    """The team task's result on node-a: compose.yml-like play, no plan.json (the inventory's plan)."""
    inventory = {"gpu_nodes": {"hosts": {"node-a": {
        "gpuops_report_dir": str(tmp_path), "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "all": {"vars": {"gpuops_platform": "compose", "gpuops_members": members,
                         "gpuops_teams": [{"name": "research"}]}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(TEAM_PLAY.format(plan=REPO / "playbooks" / "tasks" / "plan.yml",
                                                        roles=json.dumps(roles)))
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, check=False,
        env=playbook_env(cache="memory", callback="ansible.posix.json"), timeout=300,
    )
    results = [task["hosts"]["node-a"] for play in json_document(run.stdout)["plays"] for task in play["tasks"]
               if task["task"]["name"] == "Plan | the team, where this run's preflight did not check it"]
    assert len(results) == 1, run.stdout[-3000:] + run.stderr[-2000:]
    return results[0]


def test_a_platform_play_run_alone_checks_the_team_it_deploys(tmp_path: Path) -> None:
    """compose.yml on its own, with no preflight on record: the team's rules (site.yml's boilerplate check) run
    before the plan is carried out, since the workspace planning checks only what depends on the host."""
    twice = [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]},
             {"name": "bob", "uid": 2002, "team": "research", "gpus": [0]}]
    refused = _team_check(tmp_path, twice, ["docker_engine", "compose_stack"])
    assert refused.get("failed") is True
    assert "cannot be used on node-a" in refused["msg"]
    assert "GPU 0 is given twice: to alice and to bob" in refused["msg"]
    assert "Nothing was changed" in refused["msg"]


def test_the_team_check_passes_a_usable_team_and_skips_a_play_without_workspaces(tmp_path: Path) -> None:
    usable = [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]}]
    assert _team_check(tmp_path, usable, ["docker_engine", "compose_stack"]).get("failed") is not True
    twice = [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]},
             {"name": "bob", "uid": 2002, "team": "research", "gpus": [0]}]
    assert _team_check(tmp_path, twice, ["docker_engine"]).get("skipped") is True
