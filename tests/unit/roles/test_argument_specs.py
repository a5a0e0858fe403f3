"""Every role's meta/argument_specs.yml and defaults/main.yml must agree.

A variable in defaults but not in the spec escapes type checking; one in the spec with a
different default documents a behaviour the role does not have. Both fail here.
The spec is the one place a variable is described: defaults keep at most one-line comments,
and every entry point says what it does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
ROLE_DIRS = sorted(p for p in ROLES.iterdir() if p.is_dir()) if ROLES.is_dir() else []


def _load(path: Path) -> dict:
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def compare_specs(defaults: dict, specs: dict) -> list[str]:
    """Return the disagreements between a role's defaults and its argument spec."""
    problems = []
    main = (specs.get("argument_specs") or {}).get("main")
    if main is None:
        return ["meta/argument_specs.yml has no argument_specs.main entry point"]
    options = main.get("options") or {}
    for name, value in defaults.items():
        if name not in options:
            problems.append(f"{name}: in defaults/main.yml but not in meta/argument_specs.yml")
            continue
        spec = options[name]
        if spec.get("required"):
            problems.append(f"{name}: has a default but the spec marks it required")
        elif "default" not in spec:
            problems.append(f"{name}: spec has no default; defaults/main.yml has {value!r}")
        elif spec["default"] != value:
            problems.append(f"{name}: default differs: spec {spec['default']!r} vs defaults/main.yml {value!r}")
    for name, spec in options.items():
        if name not in defaults and "default" in spec:
            problems.append(f"{name}: spec has default {spec['default']!r} but defaults/main.yml lacks it")
        if not spec.get("description"):
            problems.append(f"{name}: spec has no description")
    return problems


def long_comment_blocks(text: str) -> list[str]:
    """Each run of two or more full-line comments in a defaults file: where it starts and what it sits above."""
    lines = text.splitlines()
    found, start = [], None
    for number, line in enumerate([*lines, ""], start=1):
        if re.match(r"\s*#", line):
            start = start or number
            continue
        if start is not None and number - start > 1:
            below = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*):", line)
            what = f"above {below.group(1)}" if below else "not above a variable"
            found.append(f"line {start}: a {number - start}-line comment block {what}")
        start = None
    return found


def entry_point_problems(specs: dict) -> list[str]:
    """Entry points that do not say what they do."""
    return [f"entry point {name}: no {key}" for name, spec in (specs.get("argument_specs") or {}).items()
            for key in ("short_description", "description") if not (spec or {}).get(key)]


@pytest.mark.parametrize("role", ROLE_DIRS, ids=[p.name for p in ROLE_DIRS])
def test_defaults_keep_one_line_comments(role: Path) -> None:
    """A longer comment repeats (or replaces) the argument spec's description: it belongs there, once."""
    path = role / "defaults" / "main.yml"
    blocks = long_comment_blocks(path.read_text()) if path.exists() else []
    assert not blocks, (f"{role.name}: defaults/main.yml " + "; ".join(blocks)
                        + ". Keep at most one comment line; describe the variable in meta/argument_specs.yml")


@pytest.mark.parametrize("role", ROLE_DIRS, ids=[p.name for p in ROLE_DIRS])
def test_entry_points_are_described(role: Path) -> None:
    problems = entry_point_problems(_load(role / "meta" / "argument_specs.yml"))
    assert not problems, f"{role.name}: meta/argument_specs.yml " + "; ".join(problems)


def test_long_comment_blocks_found() -> None:
    text = ("---\n# one line is fine\nr_a: 1\n# two lines\n# are prose\nr_b: 2\n"
            "  # indented\n  # too\n# trailing\n# block\n")
    assert long_comment_blocks(text) == [
        "line 4: a 2-line comment block above r_b",
        "line 7: a 4-line comment block not above a variable",
    ]
    assert long_comment_blocks("---\nr_a: 1  # inline\n# one\n\n# one\nr_b: 2\n") == []


def test_entry_point_problems_found() -> None:
    specs = {"argument_specs": {"main": {"short_description": "m", "description": ["d"]},
                                "render": {"short_description": "r"}}}
    assert entry_point_problems(specs) == ["entry point render: no description"]


@pytest.mark.parametrize("role", ROLE_DIRS, ids=[p.name for p in ROLE_DIRS])
def test_role_argument_specs_match_defaults(role: Path) -> None:
    assert (role / "meta" / "argument_specs.yml").exists(), f"{role.name}: meta/argument_specs.yml is missing"
    problems = compare_specs(_load(role / "defaults" / "main.yml"), _load(role / "meta" / "argument_specs.yml"))
    assert not problems, f"{role.name}: " + "; ".join(problems)


def test_compare_specs_catches_drift() -> None:
    specs = {
        "argument_specs": {
            "main": {
                "options": {
                    "r_a": {"type": "int", "default": 1, "description": "a"},
                    "r_b": {"type": "str", "description": "b"},
                    "r_c": {"type": "str", "default": "x", "description": "c"},
                }
            }
        }
    }
    problems = compare_specs({"r_a": 2, "r_b": "y", "r_d": True}, specs)
    assert any(p.startswith("r_a: default differs") for p in problems)
    assert any(p.startswith("r_b: spec has no default") for p in problems)
    assert any(p.startswith("r_c: spec has default") for p in problems)
    assert any(p.startswith("r_d: in defaults") for p in problems)
    assert (
        compare_specs(
            {"r_a": 1}, {"argument_specs": {"main": {"options": {"r_a": {"default": 1, "description": "a"}}}}}
        )
        == []
    )
