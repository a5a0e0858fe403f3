"""One stage rule (issue 11): every documented stage tag of the kube roles this scenario converges, run alone.

One ansible-playbook run of playbooks/kubernetes.yml per tag against the converged nodes: rc 0, nothing failed,
nothing changed, and some task of the role ran (the tests: molecule/resources/stage_tags.py, tags_alone_tests).
The roles whose stages need a live API server (kube_cni, kube_tenancy, kube_monitoring, gpu_operator, _kube_apply)
end with the scenario's stated reason (gpuops_kube_skip_api_stages) and are covered by the static stage-tag test
(tests/unit/roles/test_stage_tags.py) and the rendered-object tests instead. Runs after test_30_cluster.py, whose
call records it reads: a tag run that called kubeadm again would show there, and is refused here as a change.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCENARIO.parent / "resources"))
import stage_tags  # noqa: E402  (shared helper, one source for every scenario)

testinfra_hosts = ["gpuops-kube-cp"]

test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_nodes = stage_tags.tags_alone_tests(
    stage_tags.PROJECT / "playbooks" / "kubernetes.yml", ("kube_node", "kube_control_plane", "kube_join")
)
