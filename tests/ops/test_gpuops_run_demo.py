"""gpuops-run and validate.yml against the demo node (the `make demo` container, started here if absent;
run under /tmp/gpuops-molecule-demo.lock by scripts/run-tests.sh ops). One container for every test.

- preflight in check mode and for real: exit 0, junit.xml parses with a testcase per host x play,
  summary.json's counts equal the PLAY RECAP the same run printed;
- a bad inventory (a driver branch instead of a version) exits 2, naming the failed task in summary.json,
  junit.xml and on screen; a missing inventory exits 4 with one line;
- validate.yml on the GPU-less demo node: every GPU step "skipped: no GPU", never ok, and the fleet report;
- day-2 settings from the inventory's group_vars, without -e: validate's images (through gpuops_registry_mirror)
  reach its report, and upgrade_driver's settings are type-checked by its settings role before anything runs;
- the installed console script, and gpuops-run from an installed collection (outside this checkout).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ansible_env import play_recap, playbook_env

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
INVENTORY = ROOT / "inventories" / "demo" / "hosts.yml"
NODE = "gpuops-demo-node"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 2, 4


def env() -> dict:
    return playbook_env(ROOT, bin_dir=VENV_BIN)


def gpuops_run(*args: str, cwd: Path = ROOT, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "python"), "-m", "gpuops_run", *args], cwd=cwd, env=env() | (extra_env or {}),
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="session", autouse=True)
def demo_node():
    """The demo node, as `make demo` starts it (idempotent: reused when it is already up)."""
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), str(ROOT / "playbooks" / "demo_node.yml")], cwd=ROOT,
                         env=env(), capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def recap(artifacts: Path) -> dict[str, dict[str, int]]:
    return play_recap((artifacts / "runner" / "artifacts" / "run" / "stdout").read_text())


def check_artifacts(artifacts: Path) -> tuple[dict, ET.Element]:
    summary = json.loads((artifacts / "summary.json").read_text())
    junit = ET.parse(artifacts / "junit.xml").getroot()
    for host, counts in recap(artifacts).items():
        got = summary["hosts"][host]
        assert (got["ok"], got["changed"], got["failed"], got["skipped"], got["unreachable"], got["rescued"],
                got["ignored"]) == (counts["ok"], counts["changed"], counts["failed"], counts["skipped"],
                                    counts["unreachable"], counts["rescued"], counts["ignored"]), host
    plays_with_hosts = [p for p in summary["plays"] if p["hosts"]]
    cases = list(junit.iter("testcase"))
    assert len(cases) == sum(len(p["hosts"]) for p in plays_with_hosts)
    assert {(c.get("classname"), c.get("name")) for c in cases} == {
        (h, f"{p['name']} [{h}]") for p in plays_with_hosts for h in p["hosts"]}
    return summary, junit


@pytest.mark.parametrize("mode", ["check", "real"])
def test_preflight_passes_with_junit_and_summary_matching_the_recap(mode, tmp_path):
    args = ["preflight", "-i", str(INVENTORY), "--artifacts", str(tmp_path)] + (["--check"] if mode == "check" else [])
    run = gpuops_run(*args)
    assert run.returncode == EXIT_OK, run.stdout[-3000:] + run.stderr[-2000:]
    summary, junit = check_artifacts(tmp_path)
    assert summary["check_mode"] is (mode == "check")
    assert summary["hosts"][NODE]["failed"] == 0
    assert junit.get("failures") == "0"
    assert int(junit.get("tests")) >= 1
    assert "PLAY 1:" in run.stdout, "plain progress lines when stdout is not a terminal"


def test_bad_inventory_exits_2_and_names_the_failed_task(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventories" / "demo", inventory, ignore=shutil.ignore_patterns("credentials"))
    (inventory / "group_vars" / "gpu_nodes" / "zz_bad.yml").write_text(
        "---\n# a branch, not a version: preflight must refuse it\nnvidia_driver_version: \"535\"\n")
    artifacts = tmp_path / "artifacts"
    run = gpuops_run("preflight", "-i", str(inventory / "hosts.yml"), "--artifacts", str(artifacts))
    assert run.returncode == EXIT_FAILED, run.stdout[-3000:] + run.stderr[-2000:]
    summary, junit = check_artifacts(artifacts)
    [failed] = summary["hosts"][NODE]["failed_tasks"]
    stdout = (artifacts / "runner" / "artifacts" / "run" / "stdout").read_text()
    before_fatal = stdout.split(f"fatal: [{NODE}]", 1)[0]
    assert failed["task"] == re.findall(r"^TASK \[(.*)\]", before_fatal, re.M)[-1], "the task the run failed in"
    assert "535" in failed["msg"]
    [failure] = list(junit.iter("failure"))
    assert failure.get("message").startswith(f"{failed['task']}: ")
    assert f"FAILED {NODE}: {failed['task']}" in run.stdout


def test_missing_inventory_is_a_usage_error_in_one_line(tmp_path):
    run = gpuops_run("preflight", "-i", str(tmp_path / "nope.yml"))
    assert run.returncode == EXIT_USAGE
    assert run.stderr.strip().count("\n") == 0
    assert run.stderr.startswith("gpuops-run: ERROR: inventory ")
    unknown = gpuops_run("nosuch", "-i", str(INVENTORY))
    assert unknown.returncode == EXIT_USAGE
    assert "playbook 'nosuch' not found" in unknown.stderr


def test_validate_on_the_demo_node_skips_gpu_steps_honestly(tmp_path):
    reports = tmp_path / "reports"
    run = gpuops_run("validate", "-i", str(INVENTORY), "--artifacts", str(tmp_path / "a"),
                     "-e", f"gpuops_report_dir={reports}")
    assert run.returncode == EXIT_OK, run.stdout[-3000:] + run.stderr[-2000:]
    [run_dir] = list((reports / "validate").iterdir())
    rows = json.loads((run_dir / f"{NODE}.validate.json").read_text())["validate"]
    assert rows, "a row per step"
    assert {r["status"] for r in rows} == {"skipped"}, rows
    assert all(r["detail"].startswith("skipped: no GPU") for r in rows)
    page = (run_dir / "index.html").read_text()
    assert f"data-host='{NODE}'" in page
    assert "<span class=\"badge skip\">skipped</span>" in page
    assert "badge ok" not in page


def demo_inventory_with(tmp_path: Path, group_vars: str) -> Path:
    """A copy of the demo inventory with group_vars/gpu_nodes/zz_test.yml holding ``group_vars`` (YAML)."""
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventories" / "demo", inventory, ignore=shutil.ignore_patterns("credentials"))
    (inventory / "group_vars" / "gpu_nodes" / "zz_test.yml").write_text("---\n" + group_vars)
    return inventory / "hosts.yml"


def test_validate_takes_its_settings_from_the_inventory_and_the_mirror(tmp_path):
    """Play vars would outrank group_vars; the settings role's defaults do not. No -e here at all."""
    reports = tmp_path / "reports"
    inventory = demo_inventory_with(tmp_path, f"gpuops_report_dir: {reports}\n"
                                    "gpuops_registry_mirror: harbor.lan/proxy\n"
                                    "validate_cuda_image: nvcr.io/nvidia/cuda:12.2.2-base-ubuntu22.04\n")
    run = gpuops_run("validate", "-i", str(inventory), "--artifacts", str(tmp_path / "a"))
    assert run.returncode == EXIT_OK, run.stdout[-3000:] + run.stderr[-2000:]
    [run_dir] = list((reports / "validate").iterdir())
    images = json.loads((run_dir / f"{NODE}.validate.json").read_text())["images"]
    assert images == {
        "cuda": "harbor.lan/proxy/nvidia/cuda:12.2.2-base-ubuntu22.04",  # the group_var, through the mirror
        "cuda_check": "harbor.lan/proxy/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",  # the default, mirrored
        "nccl_build": "harbor.lan/proxy/nvidia/cuda:12.4.1-devel-ubuntu22.04",
    }


def test_upgrade_driver_checks_an_inventory_setting_before_anything_runs(tmp_path):
    # Its own report folder: a plan.json an older checkout left in reports/ would be refused first.
    inventory = demo_inventory_with(tmp_path, f"gpuops_report_dir: {tmp_path / 'reports'}\n"
                                    "upgrade_drain_timeout: soon\n")
    run = gpuops_run("upgrade_driver", "-i", str(inventory), "--artifacts", str(tmp_path / "a"))
    assert run.returncode == EXIT_FAILED, run.stdout[-3000:] + run.stderr[-2000:]
    [failed] = json.loads((tmp_path / "a" / "summary.json").read_text())["hosts"][NODE]["failed_tasks"]
    assert "upgrade_drain_timeout" in failed["msg"], failed
    assert "soon" in failed["msg"], failed
    stdout = (tmp_path / "a" / "runner" / "artifacts" / "run" / "stdout").read_text()
    assert "Installed driver packages]" not in stdout, "refused before the first task of the upgrade"


def test_installed_console_script_and_an_installed_collection(tmp_path):
    script = VENV_BIN / "gpuops-run"
    assert script.exists(), "make venv installs the console script"
    helped = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=False, env=env())
    assert helped.returncode == 0
    assert ("exit codes: 0 ok (burnin: every check PASS), 1 burnin: a check WARN or UNKNOWN, 2 a host failed "
            "(burnin: a check FAIL), 3 hosts unreachable only, 4 usage or inventory error") in " ".join(
        helped.stdout.split())
    build = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                            str(tmp_path), str(ROOT)], capture_output=True, text=True, check=False, env=env())
    assert build.returncode == 0, build.stderr
    collections = tmp_path / "collections"
    # A clean collections path: the checkout's own collections/ would answer "already installed".
    install = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "install", "--offline", "--force",
                              "-p", str(collections), *map(str, tmp_path.glob("gpuops-cluster-*.tar.gz"))],
                             capture_output=True, text=True, check=False,
                             env=env() | {"ANSIBLE_COLLECTIONS_PATH": str(collections)})
    assert install.returncode == 0, install.stderr
    assert (collections / "ansible_collections" / "gpuops" / "cluster" / "playbooks" / "preflight.yml").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "empty.cfg").write_text("")
    # Only the installed collection (and the ansible package's bundled ones, found on sys.path) can answer.
    run = gpuops_run("preflight", "-i", str(INVENTORY), "--check", "--artifacts", str(tmp_path / "a"), cwd=elsewhere,
                     extra_env={"ANSIBLE_COLLECTIONS_PATH": str(collections),
                                "ANSIBLE_CONFIG": str(tmp_path / "empty.cfg")})
    assert run.returncode == EXIT_OK, run.stdout[-3000:] + run.stderr[-2000:]
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["playbook"] == str(collections / "ansible_collections" / "gpuops" / "cluster" / "playbooks"
                                      / "preflight.yml")
