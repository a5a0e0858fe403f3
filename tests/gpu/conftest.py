"""GPU-host tests: import the collection in place (repo-relative), like tests/unit/conftest.py does; ``inventory``, this
host as the one GPU node of a Compose site, for the tests that run the modules and playbooks on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO_ROOT / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


@pytest.fixture(scope="session")
def inventory(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inv") / "hosts.yml"
    path.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        localhost:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          gpuops_platform: compose\n"
    )
    return path
