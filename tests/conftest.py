"""Shared by every folder under tests/: under CI=true, a skip for missing docker, image or ../shared/data fails
(tests/ci_skips.py)."""

from __future__ import annotations

from ci_skips import pytest_runtest_makereport

__all__ = ["pytest_runtest_makereport"]
