"""gpu_health's scheduled sweep checks the GPU count the plan expects (issue 38's review).

The timer's service unit passes ``--expected-gpus <n>`` (gpu_health_metrics' missing-GPU check) from the plan's
``hosts.<host>.gpu_count`` (plugins/plugin_utils/plan.py SCHEMA; roles/gpu_health/vars/main.yml
``_gpu_health_sweep_expected_gpus``). It read ``gpu.count``, a key the plan does not have, so the check was never
armed. The unit is rendered here by ansible-playbook from the role's own template and variables, one host per case:
a plan with a count, a plan that read none (preflight without GPU facts: null), and no plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_env import playbook_env

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "gpu_health_sweep_unit.yml"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
# case -> the host's part of the plan (None: no gpuops_plan at all)
CASES = {
    "counted": {"gpu_count": 8, "health_sweep": {"form": "timer", "reason": "compose: gpu_health's systemd timer"}},
    "not_read": {"gpu_count": None, "health_sweep": {"form": "timer", "reason": "compose: gpu_health's systemd timer"}},
    "no_plan": None,
}


@pytest.fixture(scope="module")
def exec_starts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    playbook = BIN / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not found at {playbook} (run make venv)")
    tmp_path = tmp_path_factory.mktemp("gpu_health_sweep_unit")
    hosts = {}
    for name, part in CASES.items():
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "gpu_health_test_unit": str(tmp_path / f"{name}.service")}
        if part is not None:
            hosts[name]["gpuops_plan"] = {"source": "preflight", "hosts": {name: part}}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    env = playbook_env(REPO, cache="memory", extra={"ANSIBLE_FORKS": "3"})
    run = subprocess.run([str(playbook), "-i", str(inventory), str(PLAYBOOK)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    found = {}
    for name in CASES:
        lines = (tmp_path / f"{name}.service").read_text().splitlines()
        (found[name],) = [line for line in lines if line.startswith("ExecStart=")]
    return found


def test_the_plans_gpu_count_arms_the_missing_gpu_check(exec_starts):
    assert exec_starts["counted"].endswith(" --expected-gpus 8"), exec_starts["counted"]


@pytest.mark.parametrize("case", ["not_read", "no_plan"])
def test_without_a_count_the_sweep_is_not_told_one(exec_starts, case):
    assert "--expected-gpus" not in exec_starts[case], exec_starts[case]
    assert "--dcgm-level " in exec_starts[case]  # the rest of the command line is there
