"""kube_node's inputs refuse reserved memory at or below the eviction threshold, on every Kubernetes node.

The rule's one home is roles/kube_node/tasks/inputs.yml, which the inputs pass runs before any host changes, on GPU
and CPU nodes alike; the plan's kubelet policy (kube_plan.kubelet_policy) takes the reservations as given. The
task's condition and message are evaluated here as Ansible templates them (Jinja2), without a playbook run.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml
from task_tree import every_task

INPUTS = Path(__file__).resolve().parents[3] / "roles" / "kube_node" / "tasks" / "inputs.yml"
DEFAULTS = INPUTS.parents[1] / "defaults" / "main.yml"


def _rule() -> dict:
    tasks = [task for task in every_task(yaml.safe_load(INPUTS.read_text()))
             if "eviction" in str(task.get("ansible.builtin.assert", {}).get("that"))]
    assert len(tasks) == 1, "one task of kube_node's inputs holds the reserved memory rule"
    return tasks[0]


def _verdict(**variables) -> tuple[bool, str]:
    rule = _rule()["ansible.builtin.assert"]
    environment = jinja2.Environment(autoescape=False)
    values = {**yaml.safe_load(DEFAULTS.read_text()), "inventory_hostname": "cpu-01", **variables}
    return bool(environment.compile_expression(rule["that"])(**values)), environment.from_string(
        rule["fail_msg"]).render(**values)


def test_the_rule_holds_on_every_node():
    assert "when" not in _rule(), "a CPU node's reservations are checked as a GPU node's are"


@pytest.mark.parametrize("reserved", [400, 500])
def test_reserved_memory_at_or_below_the_eviction_threshold_is_refused(reserved):
    passed, message = _verdict(kube_node_reserved_memory_mib=reserved)
    assert not passed
    assert (f"kube_node on cpu-01: kube_node_reserved_memory_mib ({reserved}) must exceed the eviction threshold "
            "kube_node_eviction_memory_mib (500)") in message


def test_the_defaults_pass():
    assert _verdict()[0]
