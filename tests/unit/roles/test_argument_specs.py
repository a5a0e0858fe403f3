"""Every role's meta/argument_specs.yml and defaults/main.yml must agree.

A variable in defaults but not in the spec escapes type checking; one in the spec with a
different default documents a behaviour the role does not have. Both fail here.
"""

from __future__ import annotations

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
