"""Run `promtool check rules` and `promtool test rules` on the shared GPU rules.

promtool comes with Debian's `prometheus` package (bookworm 2.42, trixie 2.53), which the
test harness installs; point GPUOPS_PROMTOOL at a binary to use another one. Without promtool
these tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = sorted((REPO / "roles" / "monitoring_assets" / "files" / "prometheus" / "rules").glob("*.yml"))
TESTS = sorted((REPO / "tests" / "promtool").glob("*.yml"))


@pytest.fixture(scope="module")
def promtool() -> str:
    path = os.environ.get("GPUOPS_PROMTOOL") or shutil.which("promtool")
    if not path:
        pytest.skip("promtool not found: install Debian package `prometheus` (it ships /usr/bin/promtool) "
                    "or set GPUOPS_PROMTOOL")
    return path


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "LC_ALL": "C"})


@pytest.mark.parametrize("rule_file", RULES, ids=[p.name for p in RULES])
def test_promtool_check_rules(promtool: str, rule_file: Path) -> None:
    result = run([promtool, "check", "rules", str(rule_file)], REPO)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TESTS, ids=[p.name for p in TESTS])
def test_promtool_test_rules(promtool: str, test_file: Path) -> None:
    # promtool resolves rule_files relative to the test file's directory.
    result = run([promtool, "test", "rules", test_file.name], test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_promtool_case() -> None:
    alerts = {r["alert"] for p in RULES for g in yaml.safe_load(p.read_text())["groups"]
              for r in g["rules"] if "alert" in r}
    tested = {case["alertname"] for p in TESTS for t in yaml.safe_load(p.read_text())["tests"]
              for case in t.get("alert_rule_test", [])}
    assert not sorted(alerts - tested), f"alerts without a promtool test: {sorted(alerts - tested)}"
