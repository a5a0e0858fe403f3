"""One stage rule (docs/host-layer.md): in every role's tasks/main.yml the assert stage runs under every stage tag.

Running any stage's tag alone (for example --tags compose_stack_configure) must first run the input checks and
compute what the later stages read from them. The Molecule scenarios run each tag alone for real
(molecule/resources/stage_tags.py); this is the cheap static half.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
# Roles whose main.yml does not follow the assert-first layout yet, with the reason. Keep this short.
EXCEPTIONS = {
    "preflight": "stages are gather -> evaluate -> report -> assert (refuse); being rewritten by issue #13 part A",
}


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def stage_imports(main: list) -> list[dict]:
    return [t for t in main or [] if "ansible.builtin.import_tasks" in t or "import_tasks" in t]


def assert_tag_problems(role: str, main: list) -> list[str]:
    """What breaks the rule in a role's tasks/main.yml (empty when it holds)."""
    imports = stage_imports(main)
    if not any(tag.startswith(f"{role}_") for t in imports for tag in (t.get("tags") or [])):
        return []  # no stage tags (a helper role used through tasks_from): nothing to run alone
    asserts = [t for t in imports if (t.get("ansible.builtin.import_tasks") or t.get("import_tasks")) == "assert.yml"]
    if not asserts:
        return [f"{role}: tasks/main.yml imports no assert.yml"]
    assert_tags = set(asserts[0].get("tags") or [])
    stage_tags = {tag for t in imports for tag in (t.get("tags") or []) if tag.startswith(f"{role}_")}
    missing = sorted(stage_tags - assert_tags)
    return [f"{role}: the assert stage does not run under {missing}"] if missing else []


ROLE_MAINS = sorted(p for p in ROLES.glob("*/tasks/main.yml") if not p.parts[-3].startswith("_"))


@pytest.mark.parametrize("main", ROLE_MAINS, ids=[p.parts[-3] for p in ROLE_MAINS])
def test_assert_runs_under_every_stage_tag(main):
    role = main.parts[-3]
    if role in EXCEPTIONS:
        pytest.skip(EXCEPTIONS[role])
    text = yaml.load(main.read_text(), Loader=_Loader)
    assert assert_tag_problems(role, text) == []


def test_the_rule_catches_a_stage_tag_without_assert():
    main = [
        {"ansible.builtin.import_tasks": "assert.yml", "tags": ["r_assert", "r_install"]},
        {"ansible.builtin.import_tasks": "install.yml", "tags": ["r_install"]},
        {"ansible.builtin.import_tasks": "configure.yml", "tags": ["r_configure"]},
    ]
    assert assert_tag_problems("r", main) == ["r: the assert stage does not run under ['r_configure']"]
    assert assert_tag_problems("r", main[1:]) == ["r: tasks/main.yml imports no assert.yml"]
    assert assert_tag_problems("r", [{"ansible.builtin.import_tasks": "objects.yml"}]) == []
