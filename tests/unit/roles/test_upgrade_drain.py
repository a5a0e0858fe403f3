"""The upgrade role's drain and undrain on Kubernetes: the node is drained (kubectl drain cordons it first) before the
driver moves and uncordoned after, unless it was cordoned before the upgrade (an operator's cordon, or health's
quarantine), which the upgrade leaves as it found it.

kubectl is a LABELLED TEST STAND-IN first on PATH: it records its arguments and answers the node's
``.spec.unschedulable`` as the test says (``true``, or nothing for a schedulable node, as kubectl's jsonpath prints
them). The real kubectl against an API server is not run here.

Every case is a node, a host of one run (case_hosts.py): the stand-in answers each node's get as its case says, and a
case's calls are those that name its node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from case_hosts import Case, kubectl_calls, kubectl_stand_in, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "upgrade_drain.yml"
# case (the node) -> what kubectl get prints as its .spec.unschedulable
CASES = {"schedulable": "", "cordoned": "true", "cordoned-newline": "true\n"}


def get(node: str) -> list[str]:
    return ["kubectl", "get", "node", node, "-o", "jsonpath={.spec.unschedulable}"]


def drain(node: str) -> list[str]:
    return ["kubectl", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"]


def uncordon(node: str) -> list[str]:
    return ["kubectl", "uncordon", node]


@pytest.fixture(scope="module")
def drained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, list[list[str]]]]:
    """Drain then undrain on every case's node: each case's outcome and the kubectl calls that name its node."""
    root = tmp_path_factory.mktemp("upgrade_drain")
    answers = "\n".join(f"  {node}) printf '{answer}' ;;" for node, answer in CASES.items())
    bin_dir = kubectl_stand_in(root, f'[ "$1" = get ] || exit 0\ncase "$3" in\n{answers}\nesac')
    run = run_cases(PLAYBOOK, {node: {"upgrade_drain_timeout": 600} for node in CASES}, root / "run", cache="memory",
                    bin_dir=bin_dir)
    calls = kubectl_calls(root)
    return {node: (run.cases[node], [call for call in calls if node in call]) for node in CASES}


def test_a_schedulable_node_is_cordoned_drained_and_uncordoned(drained) -> None:
    out, calls = drained["schedulable"]
    assert not out.failed, out.text[-3000:]
    assert calls == [get("schedulable"), drain("schedulable"), uncordon("schedulable")]


@pytest.mark.parametrize(("unschedulable", "node"), [("true", "cordoned"), ("true\n", "cordoned-newline")])
def test_a_node_cordoned_before_the_upgrade_stays_cordoned(drained, unschedulable: str, node: str) -> None:
    assert CASES[node] == unschedulable
    out, calls = drained[node]
    assert not out.failed, out.text[-3000:]
    assert calls == [get(node), drain(node)], "the upgrade uncordoned a node someone else had cordoned"
    assert "was cordoned before the upgrade, so it stays cordoned" in out.text
