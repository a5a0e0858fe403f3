"""The host modules through ad-hoc `ansible -m` on this GPU host (AnsiballZ, the host's interpreter, LC_ALL=C), judged
against the GPUs `nvidia-smi -L` lists; then preflight.yml and a dry run of health.yml with this host as the one GPU
node of a Compose site (conftest's ``inventory``).

Skipped, with the reason, where there is no GPU. Set ``GPUOPS_LIVE_OUT=<dir>`` to keep each module's result (JSON).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_env import playbook_env

from .live import LISTED, NO_GPU, ROOT, gpuops_run, keep

pytestmark = pytest.mark.skipif(NO_GPU is not None, reason=str(NO_GPU))

# ansible-core's own ad-hoc output, `localhost | SUCCESS => {...}` (the json callback is ansible.posix's)
RESULT = re.compile(r"^localhost \| [A-Z!]+ => ", re.MULTILINE)


def module(name: str, inventory: Path, args: str = "") -> dict:
    """The result of `ansible localhost -m gpuops.cluster.<name> -a <args>`, asserted not failed."""
    argv = [Path(sys.executable).parent / "ansible", "localhost", "-i", inventory, "-m", f"gpuops.cluster.{name}"]
    argv += ["-a", args] if args else []
    proc = subprocess.run(
        [str(part) for part in argv],
        cwd=ROOT,
        env=playbook_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = RESULT.search(proc.stdout)
    assert found, f"no module result in the output:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    result, _end = json.JSONDecoder().raw_decode(proc.stdout[found.end() :])
    keep(f"module_{name}.json", result)
    assert proc.returncode == 0, f"{found.group(0)}{result.get('msg')}"  # the minimal output has no "failed" key
    return result


@pytest.fixture(scope="module")
def facts(inventory) -> dict:
    """gpu_facts as preflight asks for it: with the topology and the OS facts."""
    return module("gpu_facts", inventory, "topology=true os_facts=true")["ansible_facts"]["gpu"]


def test_gpu_facts_lists_every_gpu_and_reads_their_topology(facts):
    assert facts["count"] == len(LISTED), facts["notes"]
    assert facts["topology"] is not None, facts["topology_error"]
    assert len(facts["topology"]["gpus"]) == len(LISTED), facts["topology"]["warnings"]


def test_gpu_health_reads_every_counter_and_finds_no_failure(inventory):
    result = module("gpu_health", inventory)
    assert result["read_ok"], result["notes"]
    assert result["verdict"] != "failed", result["findings"]


def test_cuda_compat_runs_the_drivers_own_cuda_on_this_gpu(facts, inventory):
    name = facts["gpus"][0]["name"]
    args = f"driver_version={facts['driver_version']} cuda_version={facts['cuda_driver_version']} gpu_name='{name}'"
    result = module("cuda_compat", inventory, args)
    assert result["compatible"], result["reasons"]


@pytest.mark.parametrize(("playbook", "extra"), [("preflight", ()), ("health", ("-e", "health_apply=false"))])
def test_preflight_and_a_health_dry_run_pass_on_this_host(playbook, extra, inventory, tmp_path):
    reports = ("-e", f"gpuops_report_dir={tmp_path / 'reports'}", "-e", f"health_node_report_dir={tmp_path / 'node'}")
    run = gpuops_run(playbook, inventory, tmp_path / "a", *reports, *extra)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
