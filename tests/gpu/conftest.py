"""GPU-host tests: import the collection in place (repo-relative), like tests/unit/conftest.py does."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
