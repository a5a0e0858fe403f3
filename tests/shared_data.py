"""../shared/data: the real third-party captures the tests read in place (GPUOPS_SHARED_DATA, where set, instead).

Importable by name from every test folder (pyproject's pytest ``pythonpath``); tests/unit/conftest.py,
tests/render/conftest.py and tests/unit/fleet_fixture.py hand these on.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("GPUOPS_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def shared_path(*parts: str) -> Path:
    """Path inside ../shared/data; the calling test is skipped, with the reason, when absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real third-party data not present: {path} (see ../shared/data/README.md)")
    return path
