"""One stage rule (issue 11): each documented preflight tag, run alone against the scenario's node.

One ansible-playbook run of converge.yml (playbooks/preflight.yml) per tag: rc 0, nothing failed, nothing
changed on the host, and some task of the role ran (molecule/resources/stage_tags.py). Named to run after
test_preflight.py, which reads the newest report.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-preflight-node"]
ROLE = "preflight"
TAGS = stage_tags.documented_tags(ROLE)


def test_every_stage_tag_is_documented():
    assert stage_tags.stage_tags(ROLE) == TAGS


@pytest.mark.parametrize("tag", TAGS)
def test_tag_alone_on_the_node(tag):
    run = stage_tags.run_tag(SCENARIO / "converge.yml", tag, ROLE)
    assert run.problems() == [], stage_tags.report(run)
