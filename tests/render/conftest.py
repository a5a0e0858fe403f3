"""Render fixture: playbooks/render.yml runs once per test session on inventories/cluster (controller only).

Tests in this folder (this helper's and part 2's) read the written objects through ``rendered`` and check
them with ``validator.problems``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_env import NO_PROFILE_TASKS, playbook_env
from shared_data import SHARED_DATA

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
INVENTORY = REPO_ROOT / "inventories" / "cluster"
# libyaml's safe loader where PyYAML has it (the same documents, read about ten times faster): the rendered objects and
# the CRDs are read several times per session.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def run_render(inventory: Path, render_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run playbooks/render.yml on the controller; returns the finished process (output captured)."""
    env = playbook_env(REPO_ROOT, cache="memory", extra={"ANSIBLE_FORCE_COLOR": "false", **NO_PROFILE_TASKS})
    command = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(inventory),
        str(REPO_ROOT / "playbooks" / "render.yml"),
        "-e",
        f"render_dir={render_dir}",
        "-e",
        f"gpuops_report_dir={render_dir}/no-reports",
        *extra,
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory) -> Path:
    """The render directory of one render.yml run on inventories/cluster."""
    out = tmp_path_factory.mktemp("render")
    result = run_render(INVENTORY, out)
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return out


# One render for the tests of three settings, each of which reads only what its own setting changes: the platform
# decided (the plan then holds gpu_sharing: the session render's inventory plan leaves the platform undecided, no
# GPU counted), the control plane's API on another port (no kube_control_plane_endpoint: nodes join the first control
# plane on it), and the GPU health sweep's DaemonSet off (the plan gives every GPU node gpu_health's timer).
VARIANT = {"gpuops_platform": "kubernetes", "kube_control_plane_bind_port": 8443,
           "kube_monitoring_gpu_health_sweep": False}


@pytest.fixture(scope="session")
def variant(tmp_path_factory) -> Path:
    """The render directory of one render.yml run on inventories/cluster with VARIANT's settings."""
    out = tmp_path_factory.mktemp("render-variant")
    result = run_render(INVENTORY, out, "-e", json.dumps(VARIANT))
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return out


# One render of a changed inventories/cluster for the tests of two layouts, each of which reads only what its own
# change makes: three control planes behind kube_control_plane_endpoint (their JoinConfigurations), and a mixed
# cluster where gpu-train-02 opts out of the sweep's DaemonSet in its host_vars (the plan's forms, the Node labels,
# the DaemonSet's selection).
EXTRA_CONTROL_PLANES = {"cp-02": {"ansible_host": "192.0.2.11"}, "cp-03": {"ansible_host": "192.0.2.12"}}
TIMER_NODE = "gpu-train-02"
ENDPOINT = "api.lab.example:6443"


@pytest.fixture(scope="session")
def layouts(tmp_path_factory) -> Path:
    """The render directory of one render.yml run on a copy of inventories/cluster with EXTRA_CONTROL_PLANES in
    kube_control_plane, kube_monitoring_gpu_health_sweep false in TIMER_NODE's host_vars, and
    kube_control_plane_endpoint ENDPOINT."""
    base = tmp_path_factory.mktemp("render-layouts")
    inventory = base / "cluster"
    shutil.copytree(INVENTORY, inventory, ignore=shutil.ignore_patterns("credentials"))
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text(encoding="utf-8"))
    hosts["all"]["children"]["k8s_cluster"]["children"]["kube_control_plane"]["hosts"].update(EXTRA_CONTROL_PLANES)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
    with (inventory / "host_vars" / f"{TIMER_NODE}.yml").open("a", encoding="utf-8") as host_vars:
        host_vars.write("kube_monitoring_gpu_health_sweep: false\n")
    out = base / "render"
    result = run_render(inventory, out, "-e", f"kube_control_plane_endpoint={ENDPOINT}")
    assert result.returncode == 0, f"render.yml failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    return out


def load_objects(render_dir: Path) -> list[tuple[str, dict]]:
    """(relative path, object) for every YAML document under render_dir."""
    found = []
    for path in sorted(render_dir.rglob("*.yaml")):
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=LOADER):
            if document is not None:
                found.append((str(path.relative_to(render_dir)), document))
    return found


@pytest.fixture(scope="session")
def rendered_objects(rendered) -> list[tuple[str, dict]]:
    return load_objects(rendered)


@pytest.fixture
def shared_crds() -> Path:
    folder = SHARED_DATA / "crds"
    if not folder.is_dir():
        pytest.skip(f"real third-party data not present: {folder} (see ../shared/data/README.md)")
    return folder
