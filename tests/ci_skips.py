"""Under CI=true a test may not skip unless its skip is declared by design.

A CI run must not pass by testing less than it should. A skip because the machine lacks something (docker or its
daemon, a gpuops/* image, ../shared/data, chromium, prometheus or promtool, the venv's ansible-playbook, a tool a
Molecule verifier needs) is an environment skip: under CI=true it fails, with its reason; without CI it stays a
skip, and scripts/run-tests.sh lists it, with its reason, before its summary line (README.md and docs/testing.md
quote the recorded run's skips).

A skip that is part of a test's design, not a gap in the machine, is declared as such: it skips with
``skip_by_design(reason)``, or a skip/skipif mark with ``reason=by_design(reason)``, and its reason starts with
"by design: ". Examples: of two tests that each check one of a scenario's two set-ups, the one that does not apply
(molecule/local_pv: the fallback volume's test on loop devices); a check of hardware the fixture does not have
(molecule/driver: Fabric Manager without an NVSwitch). Every other skip is an environment skip, whatever its wording:
a list of wordings (this file's earlier design) let a new wording escape ("docker, dpkg-deb, gpg not available
here", "chromium not installed", "promtool not found").

Loaded for every test under tests/ by tests/conftest.py and for the Molecule verifiers' tests (molecule/*/tests,
run by `molecule verify`) by molecule/conftest.py.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

BY_DESIGN = "by design: "


def by_design(reason: str) -> str:
    """A designed skip's reason, for a skip/skipif mark: ``pytest.mark.skipif(cond, reason=by_design("..."))``."""
    return BY_DESIGN + reason


def skip_by_design(reason: str) -> NoReturn:
    """Skip the calling test (or fixture) by design: it stays a skip under CI=true."""
    pytest.skip(by_design(reason))


def is_ci() -> bool:
    """CI=true (also 1 or yes, any case), as CI services set it; scripts/test_summary.py reads it the same way."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a skipped report (from pytest.skip, a skip/skipif mark or importorskip), else None."""
    if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
        return None
    return str(report.longrepr[2]).removeprefix("Skipped: ")


def fails_under_ci(reason: str) -> bool:
    """Whether a skip with this reason fails under CI=true: every skip not declared by design."""
    return not reason.startswith(BY_DESIGN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    reason = skip_reason(report)
    if reason is None or not is_ci() or not fails_under_ci(reason):
        return report
    message = (
        f"CI=true: a test may not skip for a missing environment here (a designed skip says so: "
        f"tests/ci_skips.py skip_by_design): {reason}"
    )
    failed = pytest.CallInfo.from_call(lambda: pytest.fail(message, pytrace=False), when=call.when)
    return pytest.TestReport.from_item_and_call(item, failed)
