"""gpu_health's scheduled sweep checks the GPU count the plan expects (issue 38's review).

The timer's service unit passes ``--expected-gpus <n>`` (gpu_health_metrics' missing-GPU check) from the plan's
``hosts.<host>.gpu_count`` (plugins/plugin_utils/plan.py SCHEMA; roles/gpu_health/vars/main.yml
``_gpu_health_sweep_expected_gpus``). It read ``gpu.count``, a key the plan does not have, so the check was never
armed. The unit is rendered here by ansible-playbook on the controller from the role's own template and variables,
for each case a host of one run (case_hosts.py): a plan with a count, a plan that read none (preflight without GPU
facts: null), and no plan.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from case_hosts import run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "gpu_health_sweep_unit.yml"
TIMER = {"form": "timer", "reason": "compose: gpu_health's systemd timer"}
# case -> this host's part of the plan (None: no gpuops_plan at all)
CASES = {
    "counted": {"gpu_count": 8, "health_sweep": TIMER},
    "not_read": {"gpu_count": None, "health_sweep": TIMER},
    "no_plan": None,
}


@pytest.fixture(scope="module")
def exec_starts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("sweep_unit")
    hosts = {}
    for name, part in CASES.items():
        hosts[name] = {"gpu_health_test_unit": str(root / f"{name}.service")}
        if part is not None:
            hosts[name]["gpuops_plan"] = {"source": "preflight", "hosts": {name: part}}
    run = run_cases(PLAYBOOK, hosts, root, cache="memory")
    assert not any(case.failed for case in run.cases.values()), run.stdout[-3000:]
    found = {}
    for name in CASES:
        (found[name],) = [line for line in (root / f"{name}.service").read_text().splitlines()
                          if line.startswith("ExecStart=")]
    return found


def test_the_plans_gpu_count_arms_the_missing_gpu_check(exec_starts):
    assert exec_starts["counted"].endswith(" --expected-gpus 8"), exec_starts["counted"]


@pytest.mark.parametrize("case", ["not_read", "no_plan"])
def test_without_a_count_the_sweep_is_not_told_one(exec_starts, case):
    assert "--expected-gpus" not in exec_starts[case], exec_starts[case]
    assert "--dcgm-level " in exec_starts[case]  # the rest of the command line is there
