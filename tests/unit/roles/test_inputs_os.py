"""The inputs pass judges the host's OS once, for every role it checks that a run uses: one refusal naming each role
that refuses the OS, before any role's own checks (which assume a supported OS); a supported OS passes on to them.

Runs playbooks/tasks/inputs.yml with ansible-playbook on the controller, every case a host of one run
(case_hosts.py), each with its own OS facts (``case_facts``, in place of the controller's: no setup runs) and roles.
The tables are the roles' own (meta/main.yml platforms): the host layer's take Debian 12/13, Ubuntu 22.04/24.04 and
EL 9; docker_engine's and compose_stack's the same less EL 9.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from case_hosts import Case, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "inputs_os.yml"
OS_TASK = "Inputs | the OS is one every role this host runs supports"
ROLE_CHECKS = "Inputs | each role's argument spec and checks"
HOST_LAYER = ["nvidia_driver", "nvidia_container_toolkit", "gpu_health"]
ROCKY9 = {"distribution": "Rocky", "distribution_version": "9.4"}
UBUNTU2004 = {"distribution": "Ubuntu", "distribution_version": "20.04"}
DEBIAN12 = {"distribution": "Debian", "distribution_version": "12.7"}
NO_DCGM = {"gpu_health_install_dcgm": False}  # gpu_health's checks then need no plan: the pass can pass
CASES = {
    "rocky_compose": {"case_facts": ROCKY9, "case_roles": ["gpu_health", "docker_engine", "compose_stack"]},
    "ubuntu2004_host_layer": {"case_facts": UBUNTU2004, "case_roles": HOST_LAYER},
    "debian12_gpu_health": {"case_facts": DEBIAN12, "case_roles": ["gpu_health"], **NO_DCGM},
    "rocky9_gpu_health": {"case_facts": ROCKY9, "case_roles": ["gpu_health"], **NO_DCGM},
    # render.yml: no fact gathered (inputs_facts false), none known: the OS is not judged
    "no_facts_render": {"case_facts": {}, "inputs_facts": False, "case_roles": ["gpu_health"], **NO_DCGM},
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    return run_cases(PLAYBOOK, CASES, tmp_path_factory.mktemp("inputs_os")).cases


def refusal(case: Case) -> str:
    """The OS task's one failure message, once the host was refused by it and no role's checks ran."""
    assert case.failed, case.text[-2000:]
    assert case.status(OS_TASK) == "failed", case.statuses
    assert ROLE_CHECKS not in case.statuses, "a role's checks ran on an OS a role refuses"
    return case.result(OS_TASK)["msg"]


def test_every_case_ran_as_a_host_of_its_own(cases) -> None:
    assert set(cases) == set(CASES)


def test_an_os_refused_by_some_roles_names_each_of_them_and_no_other(cases) -> None:
    msg = refusal(cases["rocky_compose"])
    assert msg.startswith("Rocky 9.4 is not supported by gpuops.cluster.docker_engine, gpuops.cluster.compose_stack; ")
    assert "gpuops.cluster.gpu_health" not in msg  # gpu_health takes EL 9
    assert "supported by every role this host runs: Debian 12/13; Ubuntu 22.04/24.04 (" in msg
    assert "meta/main.yml platforms" in msg
    assert "Fix: run this host on one of those releases" in msg


def test_an_os_refused_by_every_role_is_one_refusal_naming_all_of_them(cases) -> None:
    msg = refusal(cases["ubuntu2004_host_layer"])
    assert msg.startswith("Ubuntu 20.04 is not supported by " + ", ".join(f"gpuops.cluster.{r}" for r in HOST_LAYER))
    assert msg.count("is not supported") == 1
    assert "Debian 12/13; Ubuntu 22.04/24.04; RedHat 9; Rocky 9; AlmaLinux 9" in msg


@pytest.mark.parametrize("name", ["debian12_gpu_health", "rocky9_gpu_health"])
def test_a_supported_os_passes_on_to_the_roles_checks(cases, name) -> None:
    case = cases[name]
    assert case.status(OS_TASK) == "ok", case.statuses
    assert case.status("gpu_health_sweep_interval is a systemd time span") == "ok", case.statuses
    assert not case.failed, case.text[-2000:]
    assert "is not supported" not in case.text


def test_with_no_fact_gathered_and_none_known_the_os_is_not_judged(cases) -> None:
    case = cases["no_facts_render"]
    assert case.status(OS_TASK) == "skipped", case.statuses
    assert not case.failed, case.text[-2000:]
