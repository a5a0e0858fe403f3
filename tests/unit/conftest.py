"""Shared pytest set-up: import the collection in place, and locate ../shared/data.

Tests mirror the collection: tests/unit/plugins/{modules,module_utils,filter,plugin_utils}/test_<name>.py
for plugins/<kind>/<name>.py (a module's main() in modules/, its logic in module_utils/; the folders are packages,
so both may be named test_<name>.py), tests/unit/roles/ for role-level tests, tests/unit/scripts/ for scripts/.
Shared stand-ins and helpers (fake_pynvml.py, topology_expected.py, local_pv_tree.py, module_helpers.py) stay
here, importable by name from any of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "collections"
HERE = Path(__file__).resolve().parent
for _path in (COLLECTIONS, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from shared_data import SHARED_DATA, shared_path  # noqa: E402 (after the sys.path set-up above)

__all__ = ["SHARED_DATA", "shared_path"]  # the tests import both from here


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real third-party data not present: {SHARED_DATA} (see ../shared/data/README.md)")
    return SHARED_DATA
