"""One stage rule (issue 11): every documented stage tag of the roles this scenario converges, run alone.

One ansible-playbook run of converge.yml per tag against the converged node: rc 0, nothing failed, nothing
changed, and some task of the role ran (the tests: molecule/resources/stage_tags.py, tags_alone_tests). Named
test_05 so that it runs before test_compose.py, whose last test removes the stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-compose-node"]

test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_node = stage_tags.tags_alone_tests(
    SCENARIO / "converge.yml", ("docker_engine", "compose_stack", "training_image")
)
