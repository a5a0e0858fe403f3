"""One stage rule (issue 11): every documented stage tag of nvidia_driver, nvidia_container_toolkit and gpu_health,
alone.

One ansible-playbook run per tag against the converged nodes: rc 0, nothing failed, nothing changed, and some task
of the role ran (the tests: molecule/resources/stage_tags.py, tags_alone_tests). Each role's tags run on the
playbook of the role's own plays, as converge.yml imports it (nvidia_driver.yml, nvidia_container_toolkit.yml,
gpu_health.yml): a tag of one role selects no task in another role's play, whose plan and inputs steps would
only run again. Runs before test_90_negative.py and test_95_upgrade.py, which change the nodes.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-driver-deb12"]

# reuse: test_15_kernel.py made the nvidia_driver_verify run already, on the same converged nodes.
test_every_nvidia_driver_stage_tag_is_documented, test_nvidia_driver_tag_alone = stage_tags.tags_alone_tests(
    SCENARIO / "nvidia_driver.yml", ("nvidia_driver",), reuse=True
)
test_every_toolkit_stage_tag_is_documented, test_toolkit_tag_alone = stage_tags.tags_alone_tests(
    SCENARIO / "nvidia_container_toolkit.yml", ("nvidia_container_toolkit",)
)
test_every_gpu_health_stage_tag_is_documented, test_gpu_health_tag_alone = stage_tags.tags_alone_tests(
    SCENARIO / "gpu_health.yml", ("gpu_health",)
)
