"""plugins/lookup/shipped_script.py: a module_utils file that runs as a script, by name; nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError
from ansible_collections.gpuops.cluster.plugins.lookup.shipped_script import LookupModule

REPO = Path(__file__).resolve().parents[4]


def test_returns_the_files_text():
    shipped = (REPO / "plugins/module_utils/mlflow_users.py").read_text(encoding="utf-8")
    assert LookupModule().run(["mlflow_users"]) == [shipped]


@pytest.mark.parametrize(("name", "why"), [
    ("versions", "does not run as a script"),  # a module_utils file with no __main__ entry
    ("../modules/gpu_facts", "is not a file of plugins/module_utils"),
    ("no_such_file", "expected one of ['mlflow_users'"),
])
def test_refuses_what_is_not_a_shipped_script(name, why):
    with pytest.raises(AnsibleLookupError, match=re.escape(why)):
        LookupModule().run([name])
