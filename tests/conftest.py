"""Shared by every folder under tests/: under CI=true, a skip not declared by design (a missing docker, image,
../shared/data, chromium, promtool...) fails (tests/ci_skips.py; molecule/conftest.py does the same for the Molecule
verifiers); and the collection imports in place (collections/ on sys.path, as tests/unit/conftest.py
also does), for the tests outside tests/unit that call its plugins (tests/ops/test_diagnose_slowdown.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from ci_skips import pytest_runtest_makereport

__all__ = ["pytest_runtest_makereport"]

COLLECTIONS = Path(__file__).resolve().parents[1] / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
