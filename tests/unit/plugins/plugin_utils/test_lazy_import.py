"""plugins/plugin_utils/lazy_import.py, and the filter files' use of it.

Ansible looks a collection filter up by importing the collection's filter files in name order until one defines
it, in every forked worker, compiling the code with no bytecode cache (ansible/plugins/loader.py,
Jinja2Loader.get_with_context). So a filter file must cost only its own lines to load: the plugin_utils modules it
uses are imported by the filter that needs them, on first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import lazy_import, team

REPO = Path(__file__).resolve().parents[4]
MANY = 8  # the filter files (one per area) number above this; fewer means the glob found the wrong folder
AREAS = {"burnin", "health", "kube", "plan"}  # some of them by name: a wrong folder of as many files lacks them
FILTERS = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if p.stem != "__init__")

# In a fresh interpreter, through Ansible's own collection loader (as a worker loads a filter file): every filter
# file loaded, then the plugin_utils modules and the third-party packages that loading brought in.
_PROBE = """
import importlib, json, sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
before = set(sys.modules)
for name in json.loads(sys.argv[2]):
    importlib.import_module("ansible_collections.gpuops.cluster.plugins.filter." + name)
new = sorted(set(sys.modules) - before)
print(json.dumps([m for m in new if ".plugin_utils." in m or m.split(".")[0] in ("cryptography", "jsonschema")]))
"""


def _loaded_by(filters: list[str]) -> list[str]:
    run = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "collections"), json.dumps(filters)],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(run.stdout)


def test_loading_every_filter_file_imports_no_rule_module():
    assert len(FILTERS) >= MANY, FILTERS
    assert set(FILTERS) >= AREAS, FILTERS
    assert _loaded_by(FILTERS) == ["ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import"]


def test_the_probe_sees_a_module_level_import(tmp_path):
    """The probe above can fail: the same probe on a module that imports plugin_utils.plan when loaded lists it."""
    probe = _PROBE.replace("plugins.filter.", "plugins.plugin_utils.")
    run = subprocess.run([sys.executable, "-c", probe, str(REPO / "collections"), json.dumps(["grow"])],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert "ansible_collections.gpuops.cluster.plugins.plugin_utils.team" in json.loads(run.stdout)


def test_a_proxy_imports_its_module_on_first_use_and_reads_through_it():
    proxy = lazy_import.lazy("team")
    assert proxy.show is team.show
    assert "plugin_utils.team" in repr(proxy)


def test_a_missing_module_fails_when_used_not_when_declared():
    proxy = lazy_import.lazy("no_such_module")
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        proxy.anything  # noqa: B018
