"""The Molecule verifiers' tests (molecule/*/tests, which `molecule verify` runs with pytest and testinfra from the
scenario's folder; pyproject.toml makes this checkout pytest's rootdir, so this file is loaded for them): under
CI=true a skip not declared by design fails, as under tests/ (tests/ci_skips.py, importable through pyproject's
pytest pythonpath)."""

from __future__ import annotations

from ci_skips import pytest_runtest_makereport

__all__ = ["pytest_runtest_makereport"]
