"""One tier of input checks: every role a platform play applies has its inputs checked once per run, before any host
changes, by the one inputs pass (playbooks/tasks/inputs.yml), and never again by the role's own stages.

The pass runs each listed role's `inputs` entry point (include_role tasks_from: inputs): Ansible validates the role's
own argument spec, then the role's tasks/inputs.yml checks what a spec cannot say. preflight.yml runs it for every
role of a site.yml run (playbooks/vars/run_roles.yml); a platform playbook run alone runs it from its plan entry point
(playbooks/tasks/plan.yml, ``plan_roles``); a day-2 playbook (burnin.yml) names its roles there itself. A role a play
applies but the list forgets would never be checked; a role whose stages include its inputs again would check them
twice.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from task_tree import every_task

REPO = Path(__file__).resolve().parents[3]
PLAYS = {"host": "host.yml", "compose": "compose.yml", "kubernetes": "kubernetes.yml"}
ROLE = re.compile(r"^\s*(?:-\s*role|name):\s*gpuops\.cluster\.([a-z][a-z0-9_]*)\s*$", re.M)
# A role import (import_role or include_role of a role of the collection) and the keywords under it.
# A task line (not a comment) that runs a role's tasks/inputs.yml.
RERUN = re.compile(r"^[^#\n]*(?:_tasks:|file:|tasks_from:)\s*[\"']?inputs(?:\.yml)?\b", re.M)
ROLE_IMPORT = re.compile(r"ansible\.builtin\.(?:import|include)_role:\n((?:\s{8,}.*\n)+)")
# A day-2 playbook hands its roles to the plan entry point by name: plan_roles: [burnin].
DAY2_PLAN_ROLES = re.compile(r"^\s+plan_roles: \[([a-z0-9_, ]+)\]\s*$", re.M)


def _listed() -> dict[str, list[str]]:
    return yaml.safe_load((REPO / "playbooks" / "vars" / "run_roles.yml").read_text())["_gpuops_run_roles"]


def _day2_plan_roles() -> dict[str, list[str]]:
    """playbook -> the roles it names in plan_roles (a day-2 playbook's; the platform plays give run_roles.yml's)."""
    found = {}
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        for names in DAY2_PLAN_ROLES.findall(path.read_text()):
            found.setdefault(path.name, []).extend(name.strip() for name in names.split(","))
    return found


def _listed_roles() -> list[str]:
    day2 = {role for roles in _day2_plan_roles().values() for role in roles}
    return sorted({role for roles in _listed().values() for role in roles} | day2)


@pytest.mark.parametrize("layer", PLAYS)
def test_every_role_a_play_applies_is_listed(layer: str) -> None:
    applied = set(ROLE.findall((REPO / "playbooks" / PLAYS[layer]).read_text()))
    assert applied, f"no roles found in playbooks/{PLAYS[layer]}: the pattern no longer matches"
    missing = sorted(applied - set(_listed()[layer]) - {"_gpuops_vars"})
    assert not missing, f"playbooks/{PLAYS[layer]} applies {missing}; playbooks/vars/run_roles.yml does not list them"


@pytest.mark.parametrize("layer", PLAYS)
def test_a_platform_play_run_alone_checks_its_roles_once_and_validates_no_spec_again(layer: str) -> None:
    """The play hands its roles to the plan entry point (plan_roles), and imports them without Ansible's implicit
    spec validation, which the inputs pass made (or preflight.yml's in a site.yml run)."""
    text = (REPO / "playbooks" / PLAYS[layer]).read_text()
    assert re.search(rf"plan_roles: .*_gpuops_run_roles\.{layer}\b", text), (
        f"playbooks/{PLAYS[layer]} does not pass _gpuops_run_roles.{layer} as plan_roles to tasks/plan.yml")
    unvalidated = [body for body in ROLE_IMPORT.findall(text) if "rolespec_validate: false" not in body]
    assert unvalidated == [], f"playbooks/{PLAYS[layer]}: role imports that validate their spec again: {unvalidated}"
    roles_entries = re.findall(r"^\s+- role: .*$", text, re.M)
    assert roles_entries == [], f"playbooks/{PLAYS[layer]}: roles: entries validate their spec again: {roles_entries}"


def entry_point_problems(specs: dict) -> list[str]:
    """Why include_role tasks_from: inputs would not validate what the role's main entry point validates."""
    if "inputs" not in specs:
        return ["no `inputs` entry point: include_role tasks_from: inputs would validate nothing"]
    main, check = specs["main"].get("options") or {}, specs["inputs"].get("options") or {}
    if check != main:
        differ = sorted(set(main) ^ set(check) | {k for k in set(main) & set(check) if main[k] != check[k]})
        return [f"the `inputs` entry point's options differ from main's: {', '.join(differ)}"]
    return []


@pytest.mark.parametrize("role", _listed_roles())
def test_every_listed_role_checks_its_spec_and_inputs_in_its_inputs_entry_point(role: str) -> None:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    problems = entry_point_problems(specs)
    assert not problems, f"{role}: " + "; ".join(problems) + " (share main's options with a YAML anchor)"
    assert (REPO / "roles" / role / "tasks" / "inputs.yml").is_file(), f"{role} has no tasks/inputs.yml"


def test_entry_point_problems_found() -> None:
    option = {"type": "str", "description": "x"}
    assert entry_point_problems({"main": {"options": {"r_a": option}}}) != []
    assert entry_point_problems({"main": {"options": {"r_a": option}},
                                 "inputs": {"options": {"r_a": {**option, "type": "int"}}}}) == [
        "the `inputs` entry point's options differ from main's: r_a"]
    assert entry_point_problems({"main": {"options": {"r_a": option}}, "inputs": {"options": {"r_a": option}}}) == []


def stage_reruns(role_dir: Path) -> list[str]:
    """The task files of a role, other than tasks/inputs.yml itself, that run its inputs check again."""
    return sorted(str(path.relative_to(role_dir)) for path in (role_dir / "tasks").glob("*.yml")
                  if path.name != "inputs.yml" and RERUN.search(path.read_text()))


@pytest.mark.parametrize("role", _listed_roles())
def test_no_stage_of_a_listed_role_checks_its_inputs_again(role: str) -> None:
    assert stage_reruns(REPO / "roles" / role) == [], f"{role}: a stage runs tasks/inputs.yml again"


def test_stage_reruns_found(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "inputs.yml").write_text("- ansible.builtin.import_tasks: assert.yml\n")
    assert stage_reruns(tmp_path) == []
    (tmp_path / "tasks" / "assert.yml").write_text("# the checks are in tasks/inputs.yml\n")
    assert stage_reruns(tmp_path) == []
    (tmp_path / "tasks" / "main.yml").write_text("- ansible.builtin.import_tasks: inputs.yml\n")
    (tmp_path / "tasks" / "verify.yml").write_text("- ansible.builtin.include_role:\n    tasks_from: inputs\n")
    assert stage_reruns(tmp_path) == ["tasks/main.yml", "tasks/verify.yml"]


def test_no_run_fact_guards_a_check() -> None:
    """No second tier: nothing skips a check because another play passed it (the old gpuops_inputs_checked guards)."""
    found = sorted(str(p.relative_to(REPO)) for d in ("roles", "playbooks", "plugins") for p in (REPO / d).rglob("*")
                   if p.is_file() and p.suffix in {".yml", ".py", ".j2"} and "_inputs_checked" in p.read_text())
    assert found == [], f"files guarding a check on a run fact: {found}"


def role_runs_validating(tasks: list, role: str) -> list[str]:
    """The names of the tasks (blocks walked) that run ``role``'s main entry point with its spec validated again."""
    found = []
    for task in tasks or []:
        for part in ("block", "rescue", "always"):
            found += role_runs_validating(task.get(part), role)
        call = task.get("ansible.builtin.import_role") or task.get("ansible.builtin.include_role") or {}
        if (call.get("name") == f"gpuops.cluster.{role}" and "tasks_from" not in call
                and call.get("rolespec_validate") is not False):
            found.append(task.get("name"))
    return found


@pytest.mark.parametrize("playbook", sorted(_day2_plan_roles()))
def test_a_day2_playbook_runs_the_roles_its_inputs_pass_checked_without_validating_them_again(playbook: str) -> None:
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    applied = [(entry if isinstance(entry, str) else entry["role"]).removeprefix("gpuops.cluster.")
               for play in plays for entry in play.get("roles") or []]
    for role in _day2_plan_roles()[playbook]:
        assert role not in applied, f"playbooks/{playbook}: roles: entry {role} validates its spec again"
        in_play = [name for play in plays for key in ("pre_tasks", "tasks", "post_tasks")
                   for name in role_runs_validating(play.get(key), role)]
        in_roles = [name for other in applied for path in sorted((REPO / "roles" / other / "tasks").glob("*.yml"))
                    for name in role_runs_validating(yaml.safe_load(path.read_text()), role)]
        assert in_play + in_roles == [], f"playbooks/{playbook}: {role} runs with its spec validated again"


def test_day2_plan_roles_found_and_a_validating_run_found() -> None:
    assert {"burnin.yml": ["burnin"]}.items() <= _day2_plan_roles().items()
    include = {"name": "move", "ansible.builtin.include_role": {"name": "gpuops.cluster.nvidia_driver"}}
    assert role_runs_validating([{"block": [include]}], "nvidia_driver") == ["move"]
    include["ansible.builtin.include_role"]["rolespec_validate"] = False
    assert role_runs_validating([{"block": [include]}], "nvidia_driver") == []


def _repository_callers() -> list[str]:
    """The roles that give _pinned_packages a repository of their own (pinned_packages_repo in a task file)."""
    return sorted({path.parents[1].name for path in (REPO / "roles").glob("*/tasks/*.yml")
                   if path.parents[1].name != "_pinned_packages" and "pinned_packages_repo:" in path.read_text()})


@pytest.mark.parametrize("role", _repository_callers())
def test_every_repository_key_fingerprint_is_refused_by_the_inputs_pass(role: str) -> None:
    """The key fingerprint's form is judged by _pinned_packages' inputs step in the role's inputs pass (tasks/inputs.yml
    or a file it imports), naming the role's variable: preflight refuses a bad fingerprint before the key probe would
    (docker_engine and kube_node left it to the probe)."""
    tasks = REPO / "roles" / role / "tasks"
    inputs = (tasks / "inputs.yml").read_text()
    text = inputs + "".join((tasks / name).read_text() for name in re.findall(r"import_tasks: (\S+\.yml)", inputs))
    assert re.search(r"_pinned_step: inputs\n", text), f"{role}: its inputs pass does not run _pinned_packages' inputs"
    assert f"pinned_packages_fingerprint_variable: {role}_" in (tasks / "pinned.yml").read_text(), role


def test_the_repository_callers_are_found() -> None:
    assert {"docker_engine", "kube_node", "nvidia_driver", "nvidia_container_toolkit", "gpu_health"} <= set(
        _repository_callers())


# The plays whose inputs pass must stop every host when one host's inputs are refused, before any host changes:
# playbook -> the start of the play's name.
STOP_ALL = {"preflight.yml": "Preflight | the inputs", "render.yml": "Render | every cluster host",
            "kubernetes.yml": "Kubernetes | 0."}


def _plays_running_the_inputs_pass() -> dict[str, dict]:
    """'<playbook>: <play name>' -> play, for each play that runs tasks/inputs.yml, itself or through tasks/plan.yml."""
    found = {}
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            tasks = every_task([play.get(key) for key in ("pre_tasks", "tasks", "post_tasks")])
            if any(re.search(r"\btasks/(?:inputs|plan)\.yml\b", str(task)) for task in tasks):
                found[f"{path.name}: {play['name']}"] = play
    return found


def test_a_play_that_runs_the_inputs_pass_stops_every_host_without_any_errors_fatal() -> None:
    """any_errors_fatal sends every other host into role_inputs.yml's rescue when one host's inputs are refused: each
    keeps a '?' problem, with no failure of its own (the bad-input case kube-one-host-node-reserve). max_fail_percentage
    0 stops every host, and each host names only its own problems."""
    plays = _plays_running_the_inputs_pass()
    fatal = [key for key, play in plays.items() if play.get("any_errors_fatal")]
    assert not fatal, f"any_errors_fatal on a play that runs the inputs pass: {fatal}"
    for playbook, name in STOP_ALL.items():
        [play] = [play for key, play in plays.items() if key.startswith(f"{playbook}: {name}")]
        assert play.get("max_fail_percentage") == 0, f"{playbook}: {name}... goes on with the hosts not refused"
