"""Every role a platform play applies has its inputs checked before the host layer (playbooks/vars/run_roles.yml).

playbooks/check_inputs.yml runs each listed role's argument spec and assert stage before the host layer changes
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
