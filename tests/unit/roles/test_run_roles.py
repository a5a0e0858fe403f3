"""Every role a platform play applies has its inputs checked before the host layer (playbooks/vars/run_roles.yml).

playbooks/check_inputs.yml runs each listed role's `assert` entry point (include_role tasks_from: assert), so
Ansible validates the role's own argument spec and then runs its assert stage, before the host layer changes
anything; a role a play applies but the list forgets would be checked only when its play reaches it, after the
driver is installed. Internal roles (leading underscore) are called by the others and checked through them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYS = {"host": "host.yml", "compose": "compose.yml", "kubernetes": "kubernetes.yml"}
ROLE = re.compile(r"^\s*(?:-\s*role|name):\s*gpuops\.cluster\.([a-z][a-z0-9_]*)\s*$", re.M)


def _listed() -> dict[str, list[str]]:
    return yaml.safe_load((REPO / "playbooks" / "vars" / "run_roles.yml").read_text())["_gpuops_run_roles"]


@pytest.mark.parametrize("layer", PLAYS)
def test_every_role_a_play_applies_is_checked_before_the_host_layer(layer: str) -> None:
    applied = set(ROLE.findall((REPO / "playbooks" / PLAYS[layer]).read_text()))
    assert applied, f"no roles found in playbooks/{PLAYS[layer]}: the pattern no longer matches"
    missing = sorted(applied - set(_listed()[layer]))
    assert not missing, f"playbooks/{PLAYS[layer]} applies {missing}; playbooks/vars/run_roles.yml does not list them"


def test_every_listed_role_has_an_assert_stage() -> None:
    for layer, roles in _listed().items():
        for role in roles:
            assert (REPO / "roles" / role / "tasks" / "assert.yml").is_file(), f"{layer}: {role} has no assert stage"


def _entry_points(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def assert_entry_point_problems(specs: dict) -> list[str]:
    """Why include_role tasks_from: assert would not validate what the role's main entry point validates."""
    if "assert" not in specs:
        return ["no `assert` entry point: include_role tasks_from: assert would validate nothing"]
    main, check = specs["main"].get("options") or {}, specs["assert"].get("options") or {}
    if check != main:
        differ = sorted(set(main) ^ set(check) | {k for k in set(main) & set(check) if main[k] != check[k]})
        return [f"the `assert` entry point's options differ from main's: {', '.join(differ)}"]
    return []


@pytest.mark.parametrize("role", sorted({r for roles in _listed().values() for r in roles}))
def test_every_listed_role_validates_its_own_spec_in_its_assert_entry_point(role: str) -> None:
    problems = assert_entry_point_problems(_entry_points(role))
    assert not problems, f"{role}: " + "; ".join(problems) + " (share main's options with a YAML anchor)"


def test_assert_entry_point_problems_found() -> None:
    option = {"type": "str", "description": "x"}
    assert assert_entry_point_problems({"main": {"options": {"r_a": option}}}) != []
    assert assert_entry_point_problems({"main": {"options": {"r_a": option}},
                                        "assert": {"options": {"r_a": {**option, "type": "int"}}}}) == [
        "the `assert` entry point's options differ from main's: r_a"]
    same = {"main": {"options": {"r_a": option}}, "assert": {"options": {"r_a": option}}}
    assert assert_entry_point_problems(same) == []


def test_no_role_keeps_a_flag_of_its_own_for_the_input_check() -> None:
    """The skip in a run whose input check passed is one fact for every role (gpuops_inputs_checked)."""
    flags = sorted(str(p.relative_to(REPO)) for p in (REPO / "roles").glob("*/defaults/main.yml")
                   if "_inputs_checked" in p.read_text())
    assert flags == [], f"role-specific input-check flags: {flags}; use gpuops_inputs_checked"


@pytest.mark.parametrize("role", sorted({r for roles in _listed().values() for r in roles}))
def test_every_listed_role_skips_its_variable_checks_once_the_input_check_passed(role: str) -> None:
    """One tier: every role's assert stage reads the one run-scoped fact, so a run checks each role's variables once."""
    text = (REPO / "roles" / role / "tasks" / "assert.yml").read_text()
    assert "role_name not in (gpuops_inputs_checked | default([]))" in text, (
        f"{role}: its assert stage runs its checks again after playbooks/check_inputs.yml passed them; guard them "
        "with `when: role_name not in (gpuops_inputs_checked | default([]))`")
