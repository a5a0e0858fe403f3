"""The role settings gpuops_plan reads (plugins/plugin_utils/plan.py ROLE_SETTINGS): one documented map, the only place
plan.py names a role variable (issue 37 §3: "the plan reads role settings through one documented map").

Read from the code itself: plan.py's syntax tree, the roles' argument specs, plan.SCHEMA and docs/plan.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_plan, mps, plan

REPO = Path(__file__).resolve().parents[4]
PLAN_PY = REPO / "plugins" / "plugin_utils" / "plan.py"
# Ansible's own variables (and the gpu facts' key) that plan.py reads with get_var: not role settings.
ANSIBLE_NAMES = {"ansible_facts", "group_names", "groups", "gpu"}
# Owners' specs that do not describe a setting yet; each entry must still be missing (the list only shrinks).
UNDOCUMENTED: dict[str, str] = {}


def _calls(name: str) -> list[ast.Call]:
    tree = ast.parse(PLAN_PY.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def _literal_names(name: str) -> set[str]:
    """The string literals passed as the variable name (second argument) to each call of ``name`` in plan.py."""
    return {c.args[1].value for c in _calls(name) if len(c.args) > 1 and isinstance(c.args[1], ast.Constant)}


def _role_variables() -> set[str]:
    """Every variable a role's argument spec describes, and every gpuops_* name."""
    names = set()
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"] or {}).values():
            names |= set((entry or {}).get("options") or {})
    return names


def _function_strings() -> list[tuple[int, str]]:
    """(line, text) of every string literal inside plan.py's functions (not the module-level map or schema)."""
    tree = ast.parse(PLAN_PY.read_text(encoding="utf-8"))
    found = []
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        found += [
            (n.lineno, n.value) for n in ast.walk(func) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
    return found


def test_functions_read_role_settings_only_through_the_map():
    """get_var in plan.py reads only Ansible's own names; every role variable a function names is a _setting call's
    argument, and in ROLE_SETTINGS."""
    assert _literal_names("get_var") <= ANSIBLE_NAMES, "plan.py reads a role setting around ROLE_SETTINGS (get_var)"
    read = _literal_names("_setting")
    assert read, "plan.py reads no setting through _setting: the test looks at the wrong calls"
    assert read <= set(plan.ROLE_SETTINGS), f"read but not in ROLE_SETTINGS: {sorted(read - set(plan.ROLE_SETTINGS))}"
    variables = _role_variables() | set(plan.ROLE_SETTINGS)
    setting_args = {
        (c.args[1].lineno, c.args[1].value) for c in _calls("_setting") if isinstance(c.args[1], ast.Constant)
    }
    stray = [
        f"plan.py:{line} {text}"
        for line, text in _function_strings()
        if text in variables and (line, text) not in setting_args and not text.startswith("gpuops_plan")
    ]
    assert not stray, f"role variables named in plan.py's functions outside _setting(...): {stray}"


def test_every_setting_in_the_map_is_read():
    """No entry is documented but unread: read by name, or through the tuples made from the map or owned by the
    rules' modules (mps.VARIABLES, kube_plan.RESERVATIONS)."""
    read = (
        _literal_names("_setting")
        | set(plan._NODE_VARS)
        | set(mps.VARIABLES)
        | {name for name, _kind in kube_plan.RESERVATIONS.values()}
    )
    assert set(plan.ROLE_SETTINGS) == read


def test_an_unmapped_setting_is_refused():
    with pytest.raises(KeyError, match=r"not in plan\.ROLE_SETTINGS"):
        plan._setting({"nvidia_driver_branch": "580"}, "nvidia_driver_branch")


def test_mapped_setting_reads_the_inventory_value():
    assert plan._setting({"nvidia_driver_fabric_manager": True}, "nvidia_driver_fabric_manager") is True
    assert plan._setting({}, "nvidia_driver_fabric_manager") is None


@pytest.mark.parametrize("name", sorted(plan.ROLE_SETTINGS))
def test_owner_documents_the_setting(name):
    owner = plan.ROLE_SETTINGS[name].owner
    path = REPO / owner if owner.endswith(".yml") else REPO / "roles" / owner / "meta" / "argument_specs.yml"
    assert path.is_file(), f"{name}: owner {owner} has no {path.relative_to(REPO)}"
    documented = re.search(rf"\b{name}\b", path.read_text(encoding="utf-8")) is not None
    if name in UNDOCUMENTED:
        assert not documented, f"{name} is documented now: drop it from UNDOCUMENTED"
    else:
        assert documented, f"{name}: its owner {path.relative_to(REPO)} does not name it"


def _schema_has(key: str) -> bool:
    node = plan.SCHEMA
    for part in key.split("."):
        node = node.get("additionalProperties") if part == "<name>" else (node.get("properties") or {}).get(part)
        if not isinstance(node, dict):
            return False
    return True


def test_plan_keys_are_schema_keys():
    wrong = {name: key for name, s in plan.ROLE_SETTINGS.items() for key in s.keys if not _schema_has(key)}
    assert not wrong
    assert not _schema_has("hosts.<name>.no_such_key")


def test_docs_plan_lists_exactly_the_map():
    text = (REPO / "docs" / "plan.md").read_text(encoding="utf-8")
    table = text.split("| variable | owner | plan keys | what the plan does with it |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, flags=re.MULTILINE)
    assert [(name, owner.strip()) for name, owner in rows] == [(n, s.owner) for n, s in plan.ROLE_SETTINGS.items()]
