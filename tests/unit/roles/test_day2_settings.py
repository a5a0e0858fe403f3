"""Day-2 playbooks keep their settings where the inventory can override them (issue 18).

Play ``vars:`` (and ``vars_files:``) outrank group_vars and host_vars, so a setting written there could be changed
with ``-e`` only. Each play of a day-2 playbook lists its settings-only roles (``roles/<role>/defaults/main.yml``,
described in its argument spec) and keeps in its play vars only values derived from those settings (``__<role>_*``).
burnin.yml also reads validate's CUDA devel image, and both it and diagnose.yml validate's PCIe generation, so their
plays list both roles; no play reads a role's files by path (test_role_boundaries.py). The parameters and outputs of
a role's other entry points (burnin's nccl_tests_source, which validate includes) are no settings. What the
inventory's value does at run time is tested against the demo node in tests/ops/test_gpuops_run_demo.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible.parsing.yaml.loader import AnsibleLoader  # vars files carry !unsafe values (docker's Go templates)

REPO = Path(__file__).resolve().parents[3]


def role_tasks(role: str) -> list[str]:
    """The task files of a role that holds a day-2 playbook's logic, relative to playbooks/."""
    return [f"../roles/{role}/tasks/{p.name}" for p in sorted((REPO / "roles" / role / "tasks").glob("*.yml"))]


# playbook -> (its settings roles, the files it reads settings in, play keywords given with -e only)
DAY2 = {
    "validate.yml": (["validate"], ["validate.yml", *role_tasks("validate"), "../roles/validate/vars/main.yml"],
                     {"validate_hosts"}),
    "burnin.yml": (["burnin", "validate"], ["burnin.yml", "../roles/burnin/vars/main.yml", *role_tasks("burnin")],
                   {"burnin_hosts"}),
    "diagnose.yml": (["diagnose", "validate"],
                     ["diagnose.yml", *role_tasks("diagnose"), "../roles/diagnose/vars/main.yml"], {"diagnose_hosts"}),
    "upgrade_driver.yml": (["upgrade"], ["upgrade_driver.yml", *role_tasks("upgrade")],
                           {"upgrade_hosts", "upgrade_serial"}),
}


def settings_used(text: str, prefix: str) -> set[str]:
    """``<prefix>_*`` names a playbook reads (not ``__<prefix>_*`` internals, filters, file names or tags; no
    comments)."""
    code = "\n".join(line.split(" # ", 1)[0] for line in text.splitlines()
                     if not line.lstrip().startswith(("#", "tags:")))
    return set(re.findall(rf"(?<![\w./]){re.escape(prefix)}_[a-z0-9_]+(?!\w)(?!\.yml)", code))


def entry_point_names(role: str) -> set[str]:
    """The interface of a role's entry points other than main and inputs (which checks main's options, the settings) -
    their options and what their description says they set ("Sets C(<name>)"): parameters and outputs, not settings,
    so not in defaults/main.yml."""
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    names = set()
    for entry, spec in specs.items():
        if entry not in ("main", "inputs"):
            text = " ".join(spec.get("description") or [])
            names |= set(spec.get("options") or {}) | set(re.findall(r"Sets C\((\w+)\)", text))
    return names


def play_problems(play: dict, roles: list[str], base: Path = REPO / "playbooks") -> list[str]:
    """Why a day-2 play's settings would not be overridable from the inventory (vars_files relative to ``base``)."""
    play_vars = dict(play.get("vars") or {})
    for name in play.get("vars_files") or []:
        play_vars.update(yaml.safe_load((base / name).read_text()) or {})
    problems = [f"play var {name} is a setting: play vars outrank the inventory; make it a default of roles/{roles[0]}"
                for name in play_vars if not name.startswith("__")]
    listed = [r if isinstance(r, str) else r.get("role", r.get("name")) for r in play.get("roles") or []]
    # a role imported, for its defaults only (pre_tasks) or to run it after the inputs pass (tasks)
    tasks = (play.get("pre_tasks") or []) + (play.get("tasks") or [])
    listed += [t["ansible.builtin.import_role"]["name"] for t in tasks if "ansible.builtin.import_role" in t]
    problems += [f"the play does not list gpuops.cluster.{role} in roles: (its defaults would be undefined)"
                 for role in roles if f"gpuops.cluster.{role}" not in listed]
    return problems


@pytest.mark.parametrize("playbook", DAY2)
def test_day2_settings_are_role_defaults_not_play_vars(playbook: str) -> None:
    roles, files, keywords = DAY2[playbook]
    plays = yaml.safe_load((REPO / "playbooks" / playbook).read_text())
    assert plays
    for number, play in enumerate(plays, start=1):
        assert play_problems(play, roles) == [], f"{playbook} play {number} ({play.get('name')})"
    for role in roles:
        defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
        used = set().union(*(settings_used((REPO / "playbooks" / f).read_text(), role) for f in files))
        assert used, f"no {role}_* settings found in {files}: the pattern no longer matches"
        missing = sorted(used - set(defaults) - keywords - entry_point_names(role))
        assert not missing, f"{playbook} reads {missing}, which roles/{role}/defaults/main.yml does not define"
        role_vars = REPO / "roles" / role / "vars" / "main.yml"  # role vars outrank the inventory too
        role_vars = yaml.load(role_vars.read_text(), Loader=AnsibleLoader) if role_vars.is_file() else None
        settings = [n for n in role_vars or {} if not n.startswith(f"_{role}_")]
        assert settings == [], f"roles/{role}/vars/main.yml holds {settings}: only derived _{role}_* values go there"


# Day 2 has one shape (issue 37 section 4): each play of a day-2 playbook picks its hosts and runs roles - the role
# whose logic it is, other roles' defaults, and the plan entry point (tasks/plan.yml) - and holds no task of its own.
ROLES_ONLY = [*DAY2, "health.yml", "grow.yml", "grow_apply.yml"]


def own_tasks(play: dict) -> list[str]:
    """The tasks of a play (blocks walked) that are not a role of the collection or the plan entry point."""
    def walk(tasks: list) -> list[str]:
        found = []
        for task in tasks or []:
            if any(part in task for part in ("block", "rescue", "always")):
                found += walk(task.get("block")) + walk(task.get("rescue")) + walk(task.get("always"))
                continue
            role = task.get("ansible.builtin.import_role") or task.get("ansible.builtin.include_role") or {}
            if str(role.get("name", "")).startswith("gpuops.cluster."):
                continue
            if task.get("ansible.builtin.import_tasks") == "tasks/plan.yml":
                continue
            found.append(str(task.get("name")))
        return found
    return [name for key in ("pre_tasks", "tasks", "post_tasks", "handlers") for name in walk(play.get(key))]


@pytest.mark.parametrize("playbook", ROLES_ONLY)
def test_day2_playbooks_import_roles_only(playbook: str) -> None:
    plays = [play for play in yaml.safe_load((REPO / "playbooks" / playbook).read_text())
             if "ansible.builtin.import_playbook" not in play]
    assert plays, f"{playbook} has no play"
    found = {play.get("name"): tasks for play in plays if (tasks := own_tasks(play))}
    assert found == {}, f"{playbook}: tasks of its own - move them into the role's tasks/ (an entry point per step)"


def test_own_tasks_found() -> None:
    role = {"name": "Run it", "ansible.builtin.import_role": {"name": "gpuops.cluster.grow", "tasks_from": "check"}}
    plan = {"name": "The plan", "ansible.builtin.import_tasks": "tasks/plan.yml"}
    stat = {"name": "A stat", "ansible.builtin.stat": {"path": "/x"}}
    assert own_tasks({"pre_tasks": [plan], "tasks": [role]}) == []
    assert own_tasks({"tasks": [role, {"block": [stat]}]}) == ["A stat"]
    assert own_tasks({"tasks": [{"name": "Grow", "ansible.builtin.import_tasks": "tasks/grow_plan.yml"}]}) == ["Grow"]
    assert own_tasks({"post_tasks": [{"ansible.builtin.include_role": {"name": "other.collection.role"}}]}) == ["None"]


def test_the_checks_find_settings_in_vars_files(tmp_path: Path) -> None:
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars" / "b.yml").write_text("__burnin: {}\nburnin_timeout: 5\n")
    play = {"vars_files": ["vars/b.yml"], "roles": ["gpuops.cluster.burnin", {"role": "gpuops.cluster.validate"}]}
    assert play_problems(play, ["burnin", "validate"], tmp_path) == [
        "play var burnin_timeout is a setting: play vars outrank the inventory; make it a default of roles/burnin"]


def test_the_checks_find_play_var_settings_and_stray_names() -> None:
    play = {"vars": {"validate_cuda_image": "x", "__validate_images": {}}, "roles": ["gpuops.cluster.validate"]}
    assert play_problems(play, ["validate"]) == [
        "play var validate_cuda_image is a setting: play vars outrank the inventory; make it a default of "
        "roles/validate"]
    assert play_problems({"roles": [{"role": "gpuops.cluster.validate"}]}, ["validate"]) == []
    assert play_problems({}, ["diagnose"]) != []
    assert play_problems({"roles": ["gpuops.cluster.burnin"]}, ["burnin", "validate"]) == [
        "the play does not list gpuops.cluster.validate in roles: (its defaults would be undefined)"]
    imported = {"pre_tasks": [{"ansible.builtin.import_role": {"name": "gpuops.cluster.validate"}, "when": False}],
                "roles": ["gpuops.cluster.burnin"]}
    assert play_problems(imported, ["burnin", "validate"]) == []
    imported["tasks"] = [{"ansible.builtin.import_role": {"name": "gpuops.cluster.burnin"}}]
    assert play_problems({k: v for k, v in imported.items() if k != "roles"}, ["burnin", "validate"]) == []
    text = ("# validate_in_a_comment\nx: \"{{ validate_timeout }} {{ __validate_rows }}\"\n"
            "y: \"{{ a | gpuops.cluster.validate_rows }}\"  # validate_trailing\nz: tasks/validate_report.yml\n"
            "w: validate_x.yml moves; {{ validate_pod.split('/') }}\n  tags: [validate_report]\n")
    assert settings_used(text, "validate") == {"validate_timeout", "validate_pod"}
    # burnin's entry point nccl_tests_source (validate includes it): its parameter and its output.
    assert entry_point_names("burnin") == {"burnin_nccl_tests_for", "burnin_nccl_tests_tree"}
    assert entry_point_names("validate") == {"validate_workspaces"}  # workspaces' output (diagnose includes it)
