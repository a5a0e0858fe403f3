"""Fleet report in a real browser: import the collection in place and the fixture fleet from tests/unit."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for path in (REPO_ROOT / "collections", REPO_ROOT / "tests" / "unit"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
