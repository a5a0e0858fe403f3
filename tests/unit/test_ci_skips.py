"""tests/ci_skips.py: under CI=true a skip for missing docker, image or ../shared/data fails, with its reason;
other skips, and every skip without CI, stay skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SAMPLE = '''
import pytest

def test_no_docker():
    pytest.skip("docker is not available here")

def test_no_image():
    pytest.skip("image gpuops/debian12-systemd is missing (make images)")

@pytest.fixture
def shared():
    pytest.skip("real third-party data not present: /x/shared/data (see ../shared/data/README.md)")

def test_no_shared_data(shared):
    pass

@pytest.mark.skipif(True, reason="real third-party data not present: /x/cuda.csv")
def test_marked():
    pass

def test_no_gpu():
    pytest.skip("no NVIDIA GPU here")

def test_runs():
    pass
'''


def run(tmp_path: Path, ci: str | None) -> tuple[str, str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(TESTS)
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "ci_skips",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return done.stdout.splitlines()[-1], done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_environment_skips_fail_with_their_reason(tmp_path, ci):
    last, out = run(tmp_path, ci)
    assert "2 failed, 1 passed, 1 skipped, 2 errors" in last, out
    assert "FAILED test_sample.py::test_no_docker - Failed: CI=true: " in out
    assert "docker is not available here" in out
    assert "image gpuops/debian12-systemd is missing (make images)" in out
    assert "ERROR test_sample.py::test_no_shared_data - Failed: CI=true: " in out, "a fixture's skip fails too"
    assert "ERROR test_sample.py::test_marked - Failed: CI=true: " in out, "a skipif mark fails too"
    assert "no NVIDIA GPU here" in out.split("SKIPPED [1] test_sample.py", 1)[1], "other skips stay skips"


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_without_ci_every_skip_stays_a_skip(tmp_path, ci):
    last, out = run(tmp_path, ci)
    assert "1 passed, 5 skipped" in last, out
