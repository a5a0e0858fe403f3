"""playbooks/render.yml's compose project shows the workspaces' memory and CPU limits the run will apply.

The plan sizes them (plugin_utils/plan._workspaces, workspaces.host_pools): on the host's memory and CPUs as
preflight's gpu_facts read them, else on the pools the inventory sets, else (a plan from the inventory alone) none,
the reason said in the plan. Each case renders inventories/small-team (one compose host, gpu01, four members on
eight GPUs) on the controller and reads <render_dir>/compose_stack/gpu01/compose.yaml and <render_dir>/plan.json.
The preflight case writes the plan preflight would have left (plan.build_plan with gpu01's GPU facts on the real
HGX H100 capture ../shared/data/nvidia-smi/topo/h100x8_sxm_2numa_noNIC.txt, and the OS facts gpu_facts reads) as
<report dir>/plan.json, which render.yml takes as the last preflight's plan. The inventory-alone render
(inventory_alone, one run) is also the project render.yml writes for review, with placeholders for the secrets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan as plan_py
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight_report import write_plan
from ansible_env import inventory_vars
from conftest import REPO_ROOT, SHARED_DATA, run_render

INVENTORY = REPO_ROOT / "inventories" / "small-team"
CAPTURE = SHARED_DATA / "nvidia-smi" / "topo" / "h100x8_sxm_2numa_noNIC.txt"
# gpu_facts' gpu_host.os on a host of the HGX H100's size (1000 GiB, 208 CPUs)
HOST_OS = {"distribution": "Ubuntu", "distribution_version": "22.04", "memtotal_mb": 1024000, "processor_vcpus": 208}
# small-team's members hold 2, 2, 3 and 1 of the 8 GPUs: their shares of 80% of 1024000 MiB and of 208 CPUs
SIZED = {"alice": ("204800m", 52.0), "bob": ("204800m", 52.0), "carol": ("307200m", 78.0), "dave": ("102400m", 26.0)}


def _workspaces(out: Path) -> dict[str, dict]:
    services = yaml.safe_load((out / "compose_stack" / "gpu01" / "compose.yaml").read_text())["services"]
    found = {name[len("ws-"):]: service for name, service in services.items() if name.startswith("ws-")}
    assert sorted(found) == sorted(SIZED), "the render wrote no workspace of small-team's members"
    return found


def _preflight_plan(reports: Path) -> None:
    """The plan.json preflight leaves in the report folder for small-team's gpu01 (plan.build_plan)."""
    if not CAPTURE.exists():
        pytest.skip(f"real third-party data not present: {CAPTURE}")
    hostvars = inventory_vars(INVENTORY)
    records = {"gpu01": {"gpu": {"count": 8, "source": "nvml", "present": True,
                                 "topology": parse_topology(CAPTURE.read_text())},
                         "host_facts": {"os": HOST_OS}, "result": {"ok": True},
                         "plan": {"driver_version": "535.261.03", "cuda_version": "12.2"}}}
    fleet = {"ok": True, "platform": "compose", "source": "auto", "reason": "4 people on 8 GPUs", "gpu_count": 8,
             "hosts": {}}
    built = plan_py.build_plan(fleet, records, hostvars, "2026-12-04T00:00:00+00:00",
                               str(reports / "20261204T000000Z"))
    write_plan(built, str(reports))


def test_a_preflight_plan_renders_each_workspaces_mem_limit_and_cpus(tmp_path):
    reports = tmp_path / "reports"
    _preflight_plan(reports)
    out = tmp_path / "render"
    result = run_render(INVENTORY, out, "-e", f"gpuops_report_dir={reports}")
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    workspaces = _workspaces(out)
    assert {name: (ws.get("mem_limit"), ws.get("cpus")) for name, ws in workspaces.items()} == SIZED
    assert all(ws["memswap_limit"] == ws["mem_limit"] for ws in workspaces.values())
    sizing = json.loads((out / "plan.json").read_text())["hosts"]["gpu01"]["workspaces"]["sizing"]
    assert (sizing["memory_pool_mb"], sizing["cpus_pool"], sizing["problems"]) == (819200, 208, [])


@pytest.fixture(scope="module")
def inventory_alone(tmp_path_factory) -> Path:
    """render.yml on inventories/small-team alone: no pools set, no preflight plan (an empty report folder)."""
    out = tmp_path_factory.mktemp("small-team") / "render"
    result = run_render(INVENTORY, out)
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return out


def test_the_inventory_alone_renders_the_pools_it_sets_else_no_limits_and_says_why(tmp_path, inventory_alone):
    given = tmp_path / "given"
    pools = {"compose_stack_member_memory_pool_mb": 8192, "compose_stack_member_cpus_pool": 16}
    result = run_render(INVENTORY, given, "-e", json.dumps(pools))
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    assert {name: (ws.get("mem_limit"), ws.get("cpus")) for name, ws in _workspaces(given).items()} == {
        "alice": ("2048m", 4.0), "bob": ("2048m", 4.0), "carol": ("3072m", 6.0), "dave": ("1024m", 2.0)}

    unknown = inventory_alone
    assert not [name for name, ws in _workspaces(unknown).items() if {"mem_limit", "cpus"} & set(ws)]
    sizing = json.loads((unknown / "plan.json").read_text())["hosts"]["gpu01"]["workspaces"]["sizing"]
    assert sizing["memory_pool_mb"] == 0
    assert "unknown: no gpu_facts of this host and compose_stack_member_memory_pool_mb unset" in sizing["source"]


def test_the_render_playbook_writes_the_compose_project_for_review(inventory_alone, tmp_path):
    """playbooks/render.yml on the compose worked example: the project compose_stack writes, on the controller, with
    placeholders for the secrets; and a plan the role would refuse is refused there too, before the project."""
    project = inventory_alone / "compose_stack" / "gpu01"
    services = yaml.safe_load((project / "compose.yaml").read_text())["services"]
    assert {f"ws-{n}" for n in ("alice", "bob", "carol", "dave")} <= set(services)
    assert services["ws-alice"]["networks"] == ["ws-alice"]
    assert (project / "prometheus" / "prometheus.yml").is_file()
    assert (project / "alertmanager" / "alertmanager.yml").is_file()
    assert "admin_password = <placeholder" in (project / "secrets" / "mlflow_basic_auth.ini").read_text()
    assert json.loads((inventory_alone / "plan.json").read_text())["platform"]["name"] == "compose"
    members = yaml.safe_load((INVENTORY / "group_vars" / "all" / "team.yml").read_text())["gpuops_members"]
    members[0]["memory"] = "900g"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gpuops_members": members, "compose_stack_member_memory_pool_mb": 819200}))
    result = run_render(INVENTORY, tmp_path / "bad", "-e", f"@{bad}")
    assert result.returncode != 0
    assert "alice 921600 MiB (memory given)" in result.stdout, result.stdout[-3000:]
    assert not (tmp_path / "bad" / "compose_stack").exists()
