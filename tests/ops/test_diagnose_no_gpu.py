"""diagnose.yml as the runbook runs it (docs/operations.md), on a machine without a GPU: no diagnose_job, no
diagnose_window.

ansible-playbook runs playbooks/diagnose.yml on localhost (connection local, the compose platform, every setting
at its default) and its json callback's document is read:

- the run reaches its verdict: exactly one task failed, "Fail the host at its first broken link", and no task
  before it (this run crashed at the slowdown stage's delegate_to before: "'__diagnose_slowdown_query_host' is
  undefined");
- the verdict names what the machine lacks: nvidia-smi not installed where it is not on PATH, else the
  nvidia-smi, driver or GPUs link of the walk a node without a GPU gets;
- the printed walk says the slowdown stage was skipped, and why.

On a machine with an NVIDIA driver loaded the test skips by design: tests/gpu runs diagnose there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_env import json_document, playbook_env
from ci_skips import by_design

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
PROC_VERSION = Path("/proc/driver/nvidia/version")
PLAYBOOK_FAILED = 2  # ansible-playbook's exit status when a host failed
ROLE = "gpuops.cluster.diagnose : "  # how the json callback names the role's tasks
pytestmark = pytest.mark.skipif(
    PROC_VERSION.exists(),
    reason=by_design(
        f"an NVIDIA driver is loaded here ({PROC_VERSION}): this test is for a machine without a GPU; tests/gpu runs "
        "diagnose on a GPU host"
    ),
)


def host_results(document: dict) -> list[tuple[str, dict]]:
    """(task name, localhost's result) for every task of the run, in order."""
    return [
        (task["task"]["name"], task["hosts"]["localhost"])
        for play in document.get("plays", [])
        for task in play.get("tasks", [])
        if "localhost" in task["hosts"]
    ]


def test_diagnose_without_job_or_window_reaches_its_verdict(tmp_path):
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        localhost:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {VENV_BIN / 'python'}\n"
        "          gpuops_platform: compose\n"
    )
    env = playbook_env(ROOT, cache="memory", callback="ansible.posix.json", bin_dir=VENV_BIN)
    run = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "hosts.yml"),
            str(ROOT / "playbooks" / "diagnose.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    results = host_results(json_document(run.stdout))
    assert results, run.stdout[-3000:] + run.stderr[-2000:]
    failed = [(name, result) for name, result in results if result.get("failed")]
    names = [name for name, _result in failed]
    assert names == [f"{ROLE}Fail the host at its first broken link"], json.dumps(failed)[-3000:]
    assert run.returncode == PLAYBOOK_FAILED, run.stderr[-2000:]
    verdict = failed[0][1]["msg"]
    if shutil.which("nvidia-smi", path=os.environ.get("PATH")) is None:
        assert verdict.startswith("nvidia-smi: nvidia-smi is not installed. Fix: install the driver"), verdict
    else:
        assert verdict.split(":")[0] in ("nvidia-smi", "driver", "GPUs"), verdict
    walk = dict(results)[f"{ROLE}Show the walk"]["msg"]
    assert "slowdown: skipped: no diagnose_job or diagnose_window given" in walk, walk
    assert f"FIRST BROKEN LINK: {verdict.split('. Fix: ')[0]}" in walk, walk
    assert "(compose, no GPU seen)" in walk, walk
