"""One stage rule (issue 11): each documented local_pv tag, run alone against the converged node.

One ansible-playbook run of stage_tags.yml (the whole role, as converge.yml's disk A) per tag: rc 0, nothing
failed, nothing changed, and some task of the role ran (the tests: molecule/resources/stage_tags.py,
tags_alone_tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-localpv-node"]

test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_node = stage_tags.tags_alone_tests(
    SCENARIO / "stage_tags.yml",
    ("local_pv",),
    not_here={"local_pv_configure": "local_pv_configure applies the provisioner on the first control plane only, and "
              "this scenario has no cluster (its inputs, which the tag ran here before, are the inputs pass's now)"},
)
