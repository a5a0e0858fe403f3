"""tests/ci_skips.py: under CI=true every skip not declared by design fails, with its reason, whatever its wording;
a skip by design (skip_by_design, or a mark's reason=by_design(...)) stays a skip; without CI every skip stays a
skip. The same hook runs for the Molecule verifiers' tests (molecule/conftest.py), laid out and run as `molecule
verify` runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

# The environment skips of this checkout, each with its wording as its test has it (the file that skips), and one
# test of each kind of skip: a call in the test, in a fixture, a skipif mark, importorskip.
ENVIRONMENT_SKIPS = {
    "test_no_docker": "docker is not available here",  # tests/container_node.py, tests/site_check
    "test_no_image": "image gpuops/debian12-systemd is missing (make images)",  # tests/container_node.py
    "test_site_check_tools": "docker, dpkg-deb, gpg not available here",  # tests/site_check, no docker binary
    "test_chromium": "chromium not installed (scripts/bootstrap.sh installs it)",  # tests/report (the whole stage)
    "test_promtool_unit": "promtool not found: install Debian package `prometheus` (it ships /usr/bin/promtool)",
    "test_promtool_render": "promtool not installed (Debian package: prometheus)",  # tests/render/test_addons.py
    "test_prometheus": "prometheus is not available: install Debian package `prometheus`",  # tests/ops
    "test_no_venv": "ansible-playbook not found at /x/.venv/bin/ansible-playbook (run make venv)",  # tests/unit/roles
    "test_loop_devices": "directory fallback (losetup failed: no free loop device): no block device for the role to "
    "format and mount",  # molecule/local_pv
}
DESIGNED = {
    "test_designed_call": "loop devices: the role's own volume is checked by the fstab and filesystem tests",
    "test_designed_mark": "no NVSwitch in deb12-cuda's fixture: Fabric Manager absence is checked above",
}

SAMPLE = (
    "import pytest\n"
    "from ci_skips import by_design, skip_by_design\n"
    + "".join(f"\ndef {name}():\n    pytest.skip({reason!r})\n" for name, reason in ENVIRONMENT_SKIPS.items())
    + f'''
@pytest.fixture
def shared():
    pytest.skip("real third-party data not present: /x/shared/data (see ../shared/data/README.md)")

def test_no_shared_data(shared):
    pass

@pytest.mark.skipif(True, reason="real third-party data not present: /x/cuda.csv")
def test_marked():
    pass

def test_importorskip():
    pytest.importorskip("gpuops_no_such_module", reason="nvidia-ml-py not installed")

def test_designed_call():
    skip_by_design({DESIGNED["test_designed_call"]!r})

@pytest.mark.skipif(True, reason=by_design({DESIGNED["test_designed_mark"]!r}))
def test_designed_mark():
    pass

def test_runs():
    pass
'''
)
CALL_FAILURES = [*ENVIRONMENT_SKIPS, "test_importorskip"]  # skipped in the call: FAILED
SETUP_FAILURES = ["test_no_shared_data", "test_marked"]  # skipped in set-up (a fixture, a mark): ERROR


def pytest_env(ci: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(TESTS)
    if ci is not None:
        env["CI"] = ci
    return env


def run(tmp_path: Path, ci: str | None) -> tuple[str, str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "ci_skips", "--rootdir",
         str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=pytest_env(ci), capture_output=True, text=True, timeout=120, check=False,
    )
    return done.stdout.splitlines()[-1], done.stdout


def skipped_reasons(out: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("SKIPPED [")]


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_every_skip_not_by_design_fails_with_its_reason(tmp_path, ci):
    last, out = run(tmp_path, ci)
    assert f"{len(CALL_FAILURES)} failed, 1 passed, 2 skipped, {len(SETUP_FAILURES)} errors" in last, out
    for name in CALL_FAILURES:
        assert f"FAILED test_sample.py::{name} - Failed: CI=true: " in out, name
    for name in SETUP_FAILURES:
        assert f"ERROR test_sample.py::{name} - Failed: CI=true: " in out, f"{name}: a fixture's or mark's skip fails"
    for reason in ENVIRONMENT_SKIPS.values():
        assert f"skip_by_design): {reason}" in out, f"the failure keeps the reason: {reason}"
    assert sorted(skipped_reasons(out)) == sorted(f"by design: {reason}" for reason in DESIGNED.values()), out


@pytest.mark.parametrize("ci", [None, "false", ""])
def test_without_ci_every_skip_stays_a_skip_with_its_reason(tmp_path, ci):
    last, out = run(tmp_path, ci)
    skips = len(CALL_FAILURES) + len(SETUP_FAILURES) + len(DESIGNED)
    assert f"1 passed, {skips} skipped" in last, out
    reasons = skipped_reasons(out)
    for reason in [*ENVIRONMENT_SKIPS.values(), *DESIGNED.values()]:
        assert any(reason in said for said in reasons), f"not listed with its reason: {reason}\n{out}"


def test_a_molecule_verifier_test_gets_the_hook_as_molecule_verify_runs_it(tmp_path):
    """molecule verify runs pytest from the scenario's folder on its tests' absolute paths, with the options of
    .config/molecule/config.yml and no -p ci_skips: pyproject.toml makes the checkout the rootdir, so
    molecule/conftest.py loads the hook. Laid out here with the checkout's own pyproject.toml and conftest."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tests").symlink_to(TESTS)  # pyproject's pythonpath: tests (ci_skips, ansible_env)
    scenario = tmp_path / "molecule" / "sample"
    (scenario / "tests").mkdir(parents=True)
    shutil.copy(REPO / "molecule" / "conftest.py", tmp_path / "molecule" / "conftest.py")
    test = scenario / "tests" / "test_sample.py"
    test.write_text(SAMPLE)
    env = pytest_env("true")
    del env["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", str(test)],
        cwd=scenario, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    last = done.stdout.splitlines()[-1] if done.stdout else done.stderr
    assert f"{len(CALL_FAILURES)} failed, 1 passed, 2 skipped, {len(SETUP_FAILURES)} errors" in last, done.stdout
    assert "directory fallback (losetup failed" in done.stdout
    assert sorted(skipped_reasons(done.stdout)) == sorted(f"by design: {r}" for r in DESIGNED.values())
