"""The upgrade role's drain and undrain on Kubernetes: the node is drained (kubectl drain cordons it first) before the
driver moves and uncordoned after, unless it was cordoned before the upgrade (an operator's cordon, or health's
quarantine), which the upgrade leaves as it found it.

kubectl is a LABELLED TEST STAND-IN first on PATH: it records its arguments and answers the node's
``.spec.unschedulable`` as the test says (``true``, or nothing for a schedulable node, as kubectl's jsonpath prints
them). The real kubectl against an API server is not run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_env import run_with_kubectl

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "upgrade_drain.yml"
NODE = "localhost"
GET = ["kubectl", "get", "node", NODE, "-o", "jsonpath={.spec.unschedulable}"]
DRAIN = ["kubectl", "drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"]
UNCORDON = ["kubectl", "uncordon", NODE]


def run_drain(tmp_path: Path, unschedulable: str) -> tuple[int, list[list[str]], str]:
    """Run drain then undrain with the stand-in answering ``unschedulable`` to the node's get."""
    answer = f"[ \"$1\" = get ] && printf '{unschedulable}'\nexit 0"
    return run_with_kubectl(PLAYBOOK, {"upgrade_drain_timeout": 600}, tmp_path, answer)


def test_a_schedulable_node_is_cordoned_drained_and_uncordoned(tmp_path: Path) -> None:
    rc, calls, out = run_drain(tmp_path, "")
    assert rc == 0, out[-3000:]
    assert calls == [GET, DRAIN, UNCORDON]


@pytest.mark.parametrize("unschedulable", ["true", "true\n"])
def test_a_node_cordoned_before_the_upgrade_stays_cordoned(tmp_path: Path, unschedulable: str) -> None:
    rc, calls, out = run_drain(tmp_path, unschedulable)
    assert rc == 0, out[-3000:]
    assert calls == [GET, DRAIN], "the upgrade uncordoned a node someone else had cordoned"
    assert "was cordoned before the upgrade, so it stays cordoned" in out
