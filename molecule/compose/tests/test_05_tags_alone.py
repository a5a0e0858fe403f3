"""One stage rule (issue 11): every documented stage tag of the roles this scenario converges, run alone.

One ansible-playbook run per tag against the converged node: rc 0, nothing failed, nothing changed, and some task
of the role ran (the tests: molecule/resources/stage_tags.py, tags_alone_tests). Each role's tags run on the
playbook that runs the role, as converge.yml imports it: docker_engine's and compose_stack's on
playbooks/compose.yml, training_image's on playbooks/training_image.yml (converge.yml is the two, in that order; a
tag of one role selects no task in the other's play, whose plan step would only run again). The docker_engine_configure
run is test_05_faults.py's last one (reuse: the node repaired after the invalid daemon.json, run through
stage_tags.run_tag), where it ran. Named test_05 so that it runs before test_compose.py, whose last test removes
the stack.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-compose-node"]
PLAYBOOKS = stage_tags.PROJECT / "playbooks"

test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_node = stage_tags.tags_alone_tests(
    PLAYBOOKS / "compose.yml", ("docker_engine", "compose_stack"), reuse=True
)
test_every_training_image_stage_tag_is_documented, test_training_image_tag_alone = stage_tags.tags_alone_tests(
    PLAYBOOKS / "training_image.yml", ("training_image",)
)
