"""Bad set-up conditions stop `make` with one line that gives the cause and the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

BOOTSTRAP = Path(__file__).resolve().parents[3] / "scripts" / "bootstrap.sh"


def run_bootstrap(
    env_path: str, *prefix: str, script: Path = BOOTSTRAP, cwd: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, "bash", str(script)],
        capture_output=True,
        text=True,
        env={"PATH": env_path, "HOME": "/nonexistent"},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv to drop to nobody")
def test_not_root_is_one_line_with_the_fix():
    # nobody may not reach the checkout (a clone under root's 0700 home): run a readable copy of the script,
    # from a directory nobody can enter, with a PATH of system directories only.
    with tempfile.TemporaryDirectory(prefix="gpuops-bootstrap-") as tmp:
        os.chmod(tmp, 0o755)
        script = Path(tmp) / "bootstrap.sh"
        shutil.copyfile(BOOTSTRAP, script)
        script.chmod(0o644)
        run = run_bootstrap(
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            script=script,
            cwd=tmp,
        )
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
