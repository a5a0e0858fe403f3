"""The upgrade role's drain and undrain on Kubernetes: the node is cordoned and drained before the driver moves and
uncordoned after, unless it was cordoned before the upgrade (an operator's cordon, or health's quarantine), which
the upgrade leaves as it found it.

kubectl is a LABELLED TEST STAND-IN first on PATH: it records its arguments and answers the node's
``.spec.unschedulable`` as the test says (``true``, or nothing for a schedulable node, as kubectl's jsonpath prints
them). The real kubectl against an API server is not run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_env import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "upgrade_drain.yml"
NODE = "localhost"
GET = ["kubectl", "get", "node", NODE, "-o", "jsonpath={.spec.unschedulable}"]
CORDON = ["kubectl", "cordon", NODE]
DRAIN = ["kubectl", "drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"]
UNCORDON = ["kubectl", "uncordon", NODE]


def run_drain(tmp_path: Path, unschedulable: str) -> tuple[int, list[list[str]], str]:
    """Run drain then undrain with the stand-in answering ``unschedulable``; the exit status, the kubectl calls in
    order and the output."""
    bin_dir, log = tmp_path / "bin", tmp_path / "kubectl.log"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n# LABELLED TEST STAND-IN for kubectl: records its argv (one call a line, tab-separated)\n"
        f"printf 'kubectl' >> '{log}'; for a in \"$@\"; do printf '\\t%s' \"$a\" >> '{log}'; done; echo >> '{log}'\n"
        f"[ \"$1\" = get ] && printf '{unschedulable}'\n"
        "exit 0\n")
    kubectl.chmod(0o755)
    out = run_playbook(PLAYBOOK, {"upgrade_drain_timeout": 600}, tmp_path, cache="memory", bin_dir=bin_dir)
    calls = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    return out.returncode, calls, out.stdout


def test_a_schedulable_node_is_cordoned_drained_and_uncordoned(tmp_path: Path) -> None:
    rc, calls, out = run_drain(tmp_path, "")
    assert rc == 0, out[-3000:]
    assert calls == [GET, CORDON, DRAIN, UNCORDON]


@pytest.mark.parametrize("unschedulable", ["true", "true\n"])
def test_a_node_cordoned_before_the_upgrade_stays_cordoned(tmp_path: Path, unschedulable: str) -> None:
    rc, calls, out = run_drain(tmp_path, unschedulable)
    assert rc == 0, out[-3000:]
    assert calls == [GET, CORDON, DRAIN], "the upgrade uncordoned a node someone else had cordoned"
    assert "was cordoned before the upgrade, so it stays cordoned" in out
