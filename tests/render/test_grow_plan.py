"""The grow plan under review (playbooks/grow.yml -e grow_plan_only=true) for inventories/cluster, one run: it passes
without contacting a host, and its tenancy objects are what the apply creates (the same builder settings,
kube_tenancy_settings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_env import NO_PROFILE_TASKS, playbook_env
from conftest import INVENTORY, REPO_ROOT


def policies(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "NetworkPolicy"}


@pytest.fixture(scope="module")
def grow_plan(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """grow.yml -e grow_plan_only=true on inventories/cluster, once: (the run, its plan.json)."""
    folder = tmp_path_factory.mktemp("grow-plan")
    env = playbook_env(REPO_ROOT, cache="memory",
                       extra={"NO_COLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false", **NO_PROFILE_TASKS})
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY),
                          str(REPO_ROOT / "playbooks" / "grow.yml"), "-e", "grow_plan_only=true",
                          "-e", f"grow_plan_dir={folder}", "-e", f"gpuops_report_dir={folder / 'reports'}"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return run, json.loads((folder / "plan.json").read_text(encoding="utf-8"))


def test_plan_only_skips_the_apply_plays_without_contacting_a_host(grow_plan):
    """inventories/cluster has control planes and workers (documentation addresses): the imported apply plays,
    kubernetes.yml's fact gathering among them, are skipped, so the run passes with nothing unreachable."""
    run, plan = grow_plan
    recaps = [line for line in run.stdout.splitlines() if "unreachable=" in line]
    assert len(recaps) == 4  # noqa: PLR2004 - cp-01 and the three GPU nodes
    assert all("unreachable=0" in line and "failed=0" in line for line in recaps)
    assert plan["problems"] == []


def test_the_grow_plan_holds_the_network_policies_the_apply_creates(rendered_objects, grow_plan):
    """grow.yml's plan.json lists the NetworkPolicies that kube_tenancy renders and applies for the same inventory
    (a grow plan without the NFS servers, egress endpoints or MLflow namespace showed fewer rules than the apply
    then created)."""
    _run, plan = grow_plan
    applied = policies([obj for path, obj in rendered_objects if path.startswith("kube_tenancy/")])
    # the inventory's NFS server, egress endpoint and MLflow namespace each make a rule: the comparison covers them
    assert {name.split("-allow-")[-1] for _namespace, name in applied} >= {"nfs", "endpoints", "mlflow"}
    assert policies(plan["objects"]) == applied
