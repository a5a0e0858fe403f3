"""The grow plan under review (playbooks/grow.yml -e grow_plan_only=true) against what the apply creates, for
inventories/cluster: its tenancy objects come from the same builder settings (kube_tenancy_settings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ansible_env import playbook_env
from conftest import INVENTORY, REPO_ROOT


def policies(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "NetworkPolicy"}


def test_the_grow_plan_holds_the_network_policies_the_apply_creates(rendered_objects, tmp_path):
    """grow.yml's plan.json lists the NetworkPolicies that kube_tenancy renders and applies for the same inventory
    (a grow plan without the NFS servers, egress endpoints or MLflow namespace showed fewer rules than the apply
    then created)."""
    env = playbook_env(REPO_ROOT, cache="memory", extra={"NO_COLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "false"})
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY),
                          str(REPO_ROOT / "playbooks" / "grow.yml"), "-e", "grow_plan_only=true",
                          "-e", f"grow_plan_dir={tmp_path}", "-e", f"gpuops_report_dir={tmp_path / 'reports'}"],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    applied = policies([obj for path, obj in rendered_objects if path.startswith("kube_tenancy/")])
    # the inventory's NFS server, egress endpoint and MLflow namespace each make a rule: the comparison covers them
    assert {name.split("-allow-")[-1] for _namespace, name in applied} >= {"nfs", "endpoints", "mlflow"}
    assert policies(json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))["objects"]) == applied
