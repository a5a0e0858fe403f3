"""Facts are injected as top-level variables, and the boilerplate play refuses unknown gpuops_* names:
so no module of the collection may return a fact called gpuops_* (a warm fact cache would refuse the next run)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

MODULES = sorted(p.stem for p in (Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("name", MODULES)
def test_no_module_returns_a_gpuops_fact(name):
    module = importlib.import_module(f"ansible_collections.gpuops.cluster.plugins.modules.{name}")
    returned = yaml.safe_load(module.RETURN) or {}
    facts = (returned.get("ansible_facts") or {}).get("contains") or {}
    assert not [key for key in facts if key.startswith("gpuops_")], f"{name} returns gpuops_* facts: {list(facts)}"
