"""gpuops-run's exit code from a burn-in's verdict, end to end: gpuops-run (ansible-runner) runs burnin's report
stage on the controller for a fleet judged from recorded runs (fixtures/nccl/SOURCES.md, the H200 recording of
../shared/data/nvidia-smi/h200-driver580/), and exits 0 on PASS, 1 on UNKNOWN, 2 on FAIL - also when the run
itself does not fail (burnin_fail_on_failed false): the verdict travels by set_stats into the runner's stats
event, and thresholds.py's EXIT_CODES is the one mapping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.burnin import burnin_node
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import parse_health_q
from ansible_collections.gpuops.cluster.plugins.plugin_utils import burnin as B
from ansible_env import playbook_env
from fleet_fixture import shared_path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "burnin_report.yml"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
NCCL = REPO / "tests" / "unit" / "plugins" / "plugin_utils" / "fixtures" / "nccl"
HEALTHY = "h100x8_2node_gcp-a3mega_tcpxo.txt"  # a healthy 2-node run (338.8 GB/s)
SLOW = "h100_1gpu-per-node_2node_ib-4nic_tree_nccl-tests232_EXCERPT.txt"  # 41.5 GB/s


def _fleet(slow_pair: str = "") -> dict:
    runs = {",".join(p): {"rc": 0, "stdout": (NCCL / (SLOW if ",".join(p) == slow_pair else HEALTHY)).read_text(),
                          "stderr": ""} for p in B.pair_schedule(["gpu-a", "gpu-b", "gpu-c"])}
    return B.judge_fleet([], runs, {"expected_gbps": 300})


def _one_gpu_h200() -> dict:
    records = parse_health_q(shared_path("nvidia-smi", "h200-driver580", "q.txt").read_text(encoding="utf-8"))
    single = burnin_node({"skipped": True, "skip_reason": "one GPU"}, node="h200",
                         gpu={"count": 1, "gpus": [{"index": 0, "name": "NVIDIA H200"}]},
                         health={"verdict": "healthy", "findings": [], "gpus": records})
    return B.judge_fleet([single], {}, {})


def gpuops_run(tmp_path: Path, report: dict, **variables) -> tuple[subprocess.CompletedProcess, dict]:
    extra, inventory = tmp_path / "vars.json", tmp_path / "hosts.yml"
    extra.write_text(json.dumps({"__burnin_report": report, "gpuops_report_dir": str(tmp_path / "reports"),
                                 **variables}))
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    argv = [str(BIN / "python"), "-m", "gpuops_run", str(PLAYBOOK), "-i", str(inventory), "-e", f"@{extra}",
            "--artifacts", str(tmp_path / "run")]
    proc = subprocess.run(argv, cwd=REPO, env=playbook_env(REPO, cache="memory"), capture_output=True, text=True,
                          timeout=600, check=False)
    assert (tmp_path / "run" / "summary.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    return proc, summary


@pytest.mark.parametrize(("case", "verdict", "code"), [("pass", "PASS", 0), ("unknown", "UNKNOWN", 1),
                                                       ("fail", "FAIL", 2)])
def test_the_verdict_is_the_exit_code(tmp_path: Path, case: str, verdict: str, code: int) -> None:
    report = {"pass": _fleet, "unknown": _one_gpu_h200, "fail": lambda: _fleet("gpu-a,gpu-b")}[case]()
    assert report["verdict"] == verdict
    proc, summary = gpuops_run(tmp_path, report, burnin_fail_on_failed=False)
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert summary["exit_code"] == code
    assert summary["hosts"]["localhost"]["failed"] == 0, "the run itself did not fail: the verdict decides"
    assert summary["verdict"]["verdict"] == verdict
    written = json.loads(Path(summary["verdict"]["report"]).read_text())
    assert (written["verdict"], written["exit_code"]) == (verdict, code)
    assert f"gpuops-run: verdict {verdict} (" in proc.stdout


def test_a_failed_burn_in_fails_the_run_and_exits_2(tmp_path: Path) -> None:
    proc, summary = gpuops_run(tmp_path, _fleet("gpu-a,gpu-b"))
    assert proc.returncode == 2, proc.stdout[-3000:]  # noqa: PLR2004
    [failed] = summary["hosts"]["localhost"]["failed_tasks"]
    assert failed["task"].endswith("Fail when the burn-in failed")
    assert "burn-in failed: " in failed["msg"]
