"""One stage rule (issue 11): each documented preflight tag, run alone against the scenario's node.

One ansible-playbook run of converge.yml (playbooks/preflight.yml) per tag: rc 0, nothing failed, nothing
changed on the host, and some task of the role ran (the tests: molecule/resources/stage_tags.py,
tags_alone_tests). Named to run after test_preflight.py, which reads the newest report.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-preflight-node"]

test_every_stage_tag_is_documented, test_tag_alone_on_the_node = stage_tags.tags_alone_tests(
    SCENARIO / "converge.yml", ("preflight",)
)
