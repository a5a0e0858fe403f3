"""The bad-input matrix: every case is refused before any host changes, with a message that says why.

One real host for all cases: a Debian 12 systemd container (no GPU), started once, reached over the
docker connection. inventory/ is a valid compose baseline, inventory-kubernetes/ a valid kubernetes one
(a control plane and a GPU node, both inventory names for the same container). Each cases/<name>.yml
overrides a few variables (``vars``, passed with -e) and lists fragments the refusal must contain
(``expect``: the variable, the value found, what is allowed, the fix). ``inventory: kubernetes`` runs a case
on the kubernetes baseline; ``hosts:`` gives a group layout of its own (a hosts.yml document, run with the
kubernetes baseline's group_vars), for the refusals that are about the layout (two control planes...).
Each case runs the plays site.yml runs before the host layer (until_host_layer.yml: boilerplate,
preflight, the input checks) and must:

* fail (a case the plays accept fails here, and nothing downstream ran: the host layer is not in them);
* print every expected fragment;
* leave the host as it was: ``docker diff`` of the node, taken when the case ends, equals the one taken
  before any case ran (paths under Ansible's own temp dir, /root/.ansible, aside).

Cases run a few at a time (GPUOPS_BAD_INPUT_JOBS, default 6): a case waits mostly on the host, and a
change made by any case shows in the diff taken when the next one ends. Needs docker and the
gpuops/debian12-systemd image (make images); skipped, with the reason, without them.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from container_node import ansible_env, docker, start_systemd_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = sorted((HERE / "cases").glob("*.yml"))
NODE = "gpuops-bad-input-node"
IMAGE = os.environ.get("GPUOPS_BAD_INPUT_IMAGE", "gpuops/debian12-systemd")
JOBS = int(os.environ.get("GPUOPS_BAD_INPUT_JOBS", "6"))
ANSIBLE_TMP = "/root/.ansible"
INVENTORIES = {"compose": HERE / "inventory", "kubernetes": HERE / "inventory-kubernetes"}
MIN_CASES = 30


def _diff() -> list[str]:
    """The node's filesystem changes against its image, without Ansible's temp dir."""
    lines = docker("diff", NODE).stdout.splitlines()
    return sorted(line for line in lines if not line[2:].startswith(ANSIBLE_TMP) and line[2:] != "/root")


def _inventory(data: dict, workdir: Path) -> Path:
    """The hosts.yml a case runs with: a baseline's, or the case's own layout beside the kubernetes group_vars."""
    if "hosts" not in data:
        return INVENTORIES[data.get("inventory", "compose")] / "hosts.yml"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "hosts.yml").write_text(yaml.safe_dump(data["hosts"]))
    (workdir / "group_vars").symlink_to(INVENTORIES["kubernetes"] / "group_vars")
    return workdir / "hosts.yml"


def _play(extra: dict, report_dir: str, inventory: Path) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(extra, handle)
    try:
        return subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory),
             str(HERE / "until_host_layer.yml"), "-e", f"@{handle.name}", "-e", f"gpuops_report_dir={report_dir}"],
            capture_output=True, text=True, env=ansible_env(), cwd=REPO, timeout=600, check=False,
        )
    finally:
        os.unlink(handle.name)


@pytest.fixture(scope="module")
def node():
    start_systemd_node(NODE, IMAGE)
    time.sleep(2)  # boot-time writers (journald, timers) settle before the reference diff
    yield NODE
    docker("rm", "-f", "-v", NODE, check=False)


@pytest.fixture(scope="module")
def matrix(node, tmp_path_factory, request):
    """Run the baselines, then every selected case; return ({case: (result, diff_after)}, baselines, reference).

    baselines is {inventory: (result, diff_after)} for the compose and the kubernetes baseline."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if hasattr(item, "callspec") and "case" in item.callspec.params}
    reports = tmp_path_factory.mktemp("reports")
    reference = _diff()

    def baseline(name: str):
        return name, (_play({}, str(reports / f"baseline-{name}"), INVENTORIES[name] / "hosts.yml"), _diff())

    def run(case: Path):
        data = yaml.safe_load(case.read_text())
        started = time.monotonic()
        inventory = _inventory(data, reports / f"{case.stem}-inventory")
        result = _play(data.get("vars") or {}, str(reports / case.stem), inventory)
        print(f"bad input {case.stem}: rc {result.returncode}, {time.monotonic() - started:.0f} s")
        return case.stem, (result, _diff())

    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        baselines = dict(pool.map(baseline, INVENTORIES))
        results = dict(pool.map(run, [c for c in CASES if c in selected]))
    return results, baselines, reference


def test_the_matrix_has_at_least_30_cases() -> None:
    assert len(CASES) >= MIN_CASES, [c.stem for c in CASES]
    for case in CASES:
        data = yaml.safe_load(case.read_text())
        assert {"expect"} <= set(data) <= {"expect", "vars", "inventory", "hosts"}, case.name
        assert data["expect"], case.name
        assert data.get("vars") or data.get("hosts"), case.name
        assert data.get("inventory", "compose") in INVENTORIES, case.name


def test_site_runs_these_plays_before_the_host_layer() -> None:
    site = [p["ansible.builtin.import_playbook"] for p in yaml.safe_load((REPO / "playbooks/site.yml").read_text())]
    here = [Path(p["ansible.builtin.import_playbook"]).name
            for p in yaml.safe_load((HERE / "until_host_layer.yml").read_text())]
    assert site[: len(here)] == here
    assert site[len(here)] == "host.yml"


@pytest.mark.parametrize("inventory", list(INVENTORIES))
def test_the_baseline_passes_every_check_and_changes_nothing(matrix, inventory: str) -> None:
    _results, baselines, reference = matrix
    baseline, diff = baselines[inventory]
    assert baseline.returncode == 0, baseline.stdout[-3000:] + baseline.stderr[-2000:]
    assert diff == reference


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_input_is_refused_before_any_change(matrix, case: Path) -> None:
    results, _baseline, reference = matrix
    result, diff = results[case.stem]
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case.stem} was accepted:\n{output[-3000:]}"
    assert "unreachable=1" not in output, output[-3000:]
    missing = [f for f in yaml.safe_load(case.read_text())["expect"] if f not in output]
    errors = "\n".join(line for line in output.splitlines() if "ERROR" in line or "fatal:" in line or "msg" in line)
    assert not missing, f"{case.stem}: missing {missing} in:\n{errors[-4000:]}"
    changed = sorted(set(diff) ^ set(reference))
    assert not changed, f"{case.stem}: the host changed: {changed}"
