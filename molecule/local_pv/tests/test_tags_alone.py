"""One stage rule (issue 11): each documented local_pv tag, run alone against the converged node.

One ansible-playbook run of stage_tags.yml (the whole role, as converge.yml's disk A) per tag: rc 0, nothing
failed, nothing changed, and some task of the role ran (molecule/resources/stage_tags.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-localpv-node"]
ROLE = "local_pv"
TAGS = stage_tags.documented_tags(ROLE)


def test_every_stage_tag_is_documented():
    assert stage_tags.stage_tags(ROLE) == TAGS


@pytest.mark.parametrize("tag", TAGS)
def test_tag_alone_on_the_converged_node(tag):
    run = stage_tags.run_tag(SCENARIO / "stage_tags.yml", tag, ROLE)
    assert run.problems() == [], stage_tags.report(run)
