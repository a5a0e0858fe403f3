"""nvidia_driver pins its packages at the plan's driver pin (gpuops_plan.hosts[<host>].packages.driver), and refuses
a plan made for another pin (an old plan.json after the inventory's nvidia_driver_version changed).

Runs tests/unit/roles/playbooks/driver_pin.yml on localhost: the plan from the inventory (as playbooks/tasks/plan.yml
makes it where no preflight ran), then the role's assert stage, which resolves the package set and its versions
without touching the host.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from ansible_env import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_pin.yml"
PLAYBOOK_FAILED = 2  # ansible-playbook's exit status when a task failed
# Debian's two driver versions in the scenario's mirror (molecule/driver), one branch.
PIN, NEWER = "535.261.03", "535.309.01"


def run(tmp_path: Path, **extra) -> subprocess.CompletedProcess:
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    variables = {"fake_sysfs": str(sysfs), "nvidia_driver_version": PIN, "nvidia_driver_source": "distro",
                 "nvidia_driver_kernel_module_type": "proprietary", **extra}
    return run_playbook(PLAYBOOK, variables, tmp_path, cache_dir=tmp_path / "facts")


def test_the_packages_are_pinned_at_the_plans_pin(tmp_path):
    out = run(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    found = re.search(r'"msg": "pinned: (\{.*\})"', out.stdout)
    assert found, out.stdout[-3000:]
    pinned = json.loads(found.group(1).replace('\\"', '"'))
    driver = {package: version for package, version in pinned.items() if version}
    assert driver, pinned
    assert set(driver.values()) == {PIN}, pinned


def test_a_plan_made_for_another_pin_is_refused(tmp_path):
    out = run(tmp_path, nvidia_driver_version=NEWER, test_plan_driver_pin=PIN)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = " ".join(out.stdout.split())
    assert (f"the plan (inventory) pins the driver of localhost at {PIN} "
            "(gpuops_plan.hosts.localhost.packages.driver), "
            f"but nvidia_driver_version is '{NEWER}': the plan was made for another pin. Nothing was changed.") in text
    assert "Fix: run playbooks/preflight.yml or site.yml again (a new plan), or move the driver with " \
        "playbooks/upgrade_driver.yml" in text
    assert "The versions the packages are pinned at" not in out.stdout
