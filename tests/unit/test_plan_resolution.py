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
