"""tests/ops: import the collection in place (as tests/unit/conftest.py does), for the tests that call its filters."""

from __future__ import annotations

import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parents[2] / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
