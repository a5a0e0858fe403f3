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
    ("no_such_file", "expected one of ['gpu_health_metrics', 'mlflow_users'"),
])
def test_refuses_what_is_not_a_shipped_script(name, why):
    with pytest.raises(AnsibleLookupError, match=re.escape(why)):
        LookupModule().run([name])


def test_with_imports_gives_the_script_and_everything_it_imports():
    files = LookupModule().run(["gpu_health_metrics"], with_imports=True)[0]
    assert files["gpu_health_metrics.py"] == (REPO / "plugins/module_utils/gpu_health_metrics.py").read_text()
    # gpu_health_metrics imports gpu_health, which imports gpu_health_state, which imports gpu_facts_smi, ...
    expected = {"gpu_health.py", "gpu_health_state.py", "gpu_facts_smi.py", "gpu_health_xid_table.py", "text.py"}
    assert expected <= set(files)
    for text in files.values():
        for name in re.findall(r"plugins\.module_utils\.(\w+)", text):
            assert f"{name}.py" in files
    assert "mlflow_users.py" not in files
