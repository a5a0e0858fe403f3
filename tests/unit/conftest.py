"""Shared pytest set-up: import the collection in place, and locate ../shared/data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

SHARED_DATA = Path(__import__("os").environ.get("GPUOPS_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def shared_path(*parts: str) -> Path:
    """Path inside ../shared/data; the calling test is skipped, with the reason, when absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real third-party data not present: {path} (see ../shared/data/README.md)")
    return path


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real third-party data not present: {SHARED_DATA} (see ../shared/data/README.md)")
    return SHARED_DATA
