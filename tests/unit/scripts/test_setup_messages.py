"""Bad set-up conditions stop `make` with one line that gives the cause and the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

BOOTSTRAP = Path(__file__).resolve().parents[3] / "scripts" / "bootstrap.sh"


def run_bootstrap(env_path: str, *prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, "bash", str(BOOTSTRAP)],
        capture_output=True,
        text=True,
        env={"PATH": env_path, "HOME": "/nonexistent"},
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to drop to nobody")
def test_not_root_is_one_line_with_the_fix():
    run = run_bootstrap(os.environ["PATH"], "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("setup: ERROR: running as uid 65534")
    assert "Fix: run as root" in lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="the apt check comes after the root check")
def test_no_apt_is_one_line_with_the_fix(tmp_path):
    # A PATH holding only what the script needs before its apt check.
    for tool in ("id", "bash"):
        (tmp_path / tool).symlink_to(shutil.which(tool))
    run = run_bootstrap(str(tmp_path))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("setup: ERROR: apt-get not found")
    assert "Fix:" in lines[0]
