"""nvidia_driver pins its packages at the plan's driver pin (gpuops_plan.hosts[<host>].packages.driver), and refuses
a plan made for another pin (an old plan.json after the inventory's nvidia_driver_version changed).

Runs tests/unit/roles/playbooks/driver_pin.yml on the controller: the plan from the inventory (as
playbooks/tasks/plan.yml makes it where no preflight ran), then the role's assert stage, which resolves the package
set and its versions without touching the host. Both cases are hosts of one run (case_hosts.py): the refusal stops
its own host only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from case_hosts import Case, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "driver_pin.yml"
# Debian's two driver versions in the scenario's mirror (molecule/driver), one branch.
PIN, NEWER = "535.261.03", "535.309.01"
CASES = {"pinned": {}, "another_pin": {"nvidia_driver_version": NEWER, "test_plan_driver_pin": PIN}}
PINNED = "The versions the packages are pinned at"


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    tmp_path = tmp_path_factory.mktemp("driver_pin")
    sysfs = tmp_path / "sys"
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    hosts = {name: {"fake_sysfs": str(sysfs), "nvidia_driver_version": PIN, "nvidia_driver_source": "distro",
                    "nvidia_driver_kernel_module_type": "proprietary", **extra} for name, extra in CASES.items()}
    return run_cases(PLAYBOOK, hosts, tmp_path, cache_dir=tmp_path / "facts").cases


def test_the_packages_are_pinned_at_the_plans_pin(cases):
    out = cases["pinned"]
    assert not out.failed, out.text[-3000:]
    message = out.result(PINNED)["msg"]
    assert message.startswith("pinned: "), message
    pinned = json.loads(message.removeprefix("pinned: "))
    driver = {package: version for package, version in pinned.items() if version}
    assert driver, pinned
    assert set(driver.values()) == {PIN}, pinned


def test_a_plan_made_for_another_pin_is_refused(cases):
    out = cases["another_pin"]
    assert out.failed, out.text[-3000:]
    text = out.text
    assert (f"the plan (inventory) pins the driver of another_pin at {PIN} "
            "(gpuops_plan.hosts.another_pin.packages.driver), "
            f"but nvidia_driver_version is '{NEWER}': the plan was made for another pin. Nothing was changed.") in text
    assert "Fix: run playbooks/preflight.yml or site.yml again (a new plan), or move the driver with " \
        "playbooks/upgrade_driver.yml" in text
    assert not [task for task in out.statuses if PINNED in task]
