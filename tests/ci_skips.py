"""Under CI=true a test may not skip because its environment is missing: docker, a gpuops image, ../shared/data or
Prometheus (tests/ops/test_diagnose_slowdown.py).

Such skips keep their reason and become failures, so a CI run cannot pass by testing less than it should; without
CI they stay skips (scripts/run-tests.sh lists them, with their reasons, before its summary line). Loaded for every
test under tests/ by tests/conftest.py.

A skip is an environment skip when its reason starts with one of ENVIRONMENT_SKIPS, the wording every such skip in
tests/ uses today (tests/container_node.py, tests/site_check, the ../shared/data helpers of tests/unit and
tests/render). A new skip of that kind uses the same words.
"""

from __future__ import annotations

import os
import re

import pytest

ENVIRONMENT_SKIPS = re.compile(
    r"^(docker is not available"  # no docker CLI, or no daemon answers
    r"|image \S+ is missing"  # a gpuops/* image not built (make images)
    r"|real third-party data not present"  # ../shared/data, or a file in it, absent
    r"|prometheus is not available)"  # no prometheus/promtool binaries (Debian package prometheus)
)


def is_ci() -> bool:
    """CI=true (also 1 or yes, any case), as CI services set it; scripts/test_summary.py reads it the same way."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_reason(report: pytest.TestReport) -> str | None:
    """The reason of a skipped report (from pytest.skip, a skip/skipif mark or importorskip), else None."""
    if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
        return None
    return str(report.longrepr[2]).removeprefix("Skipped: ")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    reason = skip_reason(report)
    if reason is None or not is_ci() or not ENVIRONMENT_SKIPS.match(reason):
        return report
    message = f"CI=true: a test may not skip for a missing environment here: {reason}"
    failed = pytest.CallInfo.from_call(lambda: pytest.fail(message, pytrace=False), when=call.when)
    return pytest.TestReport.from_item_and_call(item, failed)
