"""One stage rule (issue 11): every documented stage tag of nvidia_driver and nvidia_container_toolkit, alone.

One ansible-playbook run of converge.yml per tag against both converged nodes: rc 0, nothing failed, nothing
changed, and some task of the role ran (molecule/resources/stage_tags.py). Runs before test_90_negative.py
and test_95_upgrade.py, which change the nodes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-driver-deb12"]
ROLES = ("nvidia_driver", "nvidia_container_toolkit")
CASES = [(role, tag) for role in ROLES for tag in stage_tags.documented_tags(role)]


def test_every_stage_tag_is_documented():
    for role in ROLES:
        assert stage_tags.documented_tags(role) == stage_tags.stage_tags(role), role


@pytest.mark.parametrize(("role", "tag"), CASES, ids=[tag for _role, tag in CASES])
def test_tag_alone_on_the_converged_nodes(role, tag):
    # reuse: test_15_kernel.py made the nvidia_driver_verify run already, on the same converged nodes.
    run = stage_tags.run_tag(SCENARIO / "converge.yml", tag, role, reuse=True)
    assert run.problems() == [], stage_tags.report(run)
