"""One stage rule (issue 11): every documented stage tag of the roles this scenario converges, run alone.

One ansible-playbook run of converge.yml per tag against the converged node: rc 0, nothing failed, nothing
changed, and some task of the role ran (molecule/resources/stage_tags.py). Named test_05 so that it runs
before test_compose.py, whose last test removes the stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-compose-node"]
ROLES = ("docker_engine", "compose_stack", "training_image")
CASES = [(role, tag) for role in ROLES for tag in stage_tags.documented_tags(role)]


def test_every_stage_tag_is_documented():
    for role in ROLES:
        assert stage_tags.documented_tags(role) == stage_tags.stage_tags(role), role


@pytest.mark.parametrize(("role", "tag"), CASES, ids=[tag for _role, tag in CASES])
def test_tag_alone_on_the_converged_node(role, tag):
    run = stage_tags.run_tag(SCENARIO / "converge.yml", tag, role)
    assert run.problems() == [], stage_tags.report(run)
