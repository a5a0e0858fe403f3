"""One stage rule (issue 11): every documented stage tag of nvidia_driver, nvidia_container_toolkit and gpu_health,
alone.

One ansible-playbook run of converge.yml per tag against the converged nodes: rc 0, nothing failed, nothing
changed, and some task of the role ran (the tests: molecule/resources/stage_tags.py, tags_alone_tests). Runs
before test_90_negative.py and test_95_upgrade.py, which change the nodes.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-driver-deb12"]

# reuse: test_15_kernel.py made the nvidia_driver_verify run already, on the same converged nodes.
test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_nodes = stage_tags.tags_alone_tests(
    SCENARIO / "converge.yml", ("nvidia_driver", "nvidia_container_toolkit", "gpu_health"), reuse=True
)
