"""One stage rule (docs/host-layer.md): in every role's tasks/main.yml the assert stage runs under every stage tag.

Running any stage's tag alone (for example --tags compose_stack_configure) must first run the input checks and
compute what the later stages read from them. The Molecule scenarios run each tag alone for real
(molecule/resources/stage_tags.py, from each scenario's test_*_tags_alone.py); this is the cheap static half:
the assert stage carries every stage tag, an include carries its tags to its tasks, and the role's page names
every tag (what the scenarios run is what a user reads).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
DOCS = REPO / "docs" / "roles"
# Roles whose first stage, the one every stage tag must run, is not assert.yml, with the reason. Keep this short.
FIRST_STAGE = {
    "preflight": "gather.yml",  # gather -> evaluate -> report -> assert (refuse): the facts every later stage judges
    "validate": "gather.yml",  # gather -> report: the steps' outputs the report judges (the settings: argument spec)
    "diagnose": "gather.yml",  # gather -> walk: the outputs the walk judges (the settings: argument spec)
    "docker_engine": "vars.yml",  # the OS values (its checks are all of its inputs, tasks/inputs.yml)
}
# The values stage (tasks/vars.yml: the OS variables, loaded once, before the assert stage's host checks) runs under
# every stage tag too, where a role has one.
VALUES_STAGE = "vars.yml"


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def stage_imports(main: list) -> list[dict]:
    return [t for t in main or [] if "ansible.builtin.import_tasks" in t or "import_tasks" in t]


def assert_tag_problems(role: str, main: list, first: str = "assert.yml") -> list[str]:
    """What breaks the rule in a role's tasks/main.yml (empty when it holds); ``first`` runs under every tag."""
    imports = stage_imports(main)
    if not any(tag.startswith(f"{role}_") for t in imports for tag in (t.get("tags") or [])):
        return []  # no stage tags (a helper role used through tasks_from): nothing to run alone
    asserts = [t for t in imports if (t.get("ansible.builtin.import_tasks") or t.get("import_tasks")) == first]
    if not asserts:
        return [f"{role}: tasks/main.yml imports no {first}"]
    assert_tags = set(asserts[0].get("tags") or [])
    stage_tags = {tag for t in imports for tag in (t.get("tags") or []) if tag.startswith(f"{role}_")}
    missing = sorted(stage_tags - assert_tags)
    problems = [f"{role}: the {first} stage does not run under {missing}"] if missing else []
    return problems + include_tag_problems(role, main)


def include_tag_problems(role: str, main: list) -> list[str]:
    """An include_tasks' own tags select the include, not its tasks: without apply, --tags <tag> runs none of them."""
    problems = []
    for task in main or []:
        include = task.get("ansible.builtin.include_tasks", task.get("include_tasks"))
        tags = [tag for tag in task.get("tags") or [] if tag.startswith(f"{role}_")]
        if include is None or not tags:
            continue
        applied = set(((include.get("apply") or {}).get("tags") or []) if isinstance(include, dict) else [])
        if not set(tags) <= applied:
            problems.append(f"{role}: include_tasks {task.get('name')!r} is tagged {tags} without apply: tags: {tags}")
    return problems


ROLE_MAINS = sorted(p for p in ROLES.glob("*/tasks/main.yml") if not p.parts[-3].startswith("_"))


@pytest.mark.parametrize("main", ROLE_MAINS, ids=[p.parts[-3] for p in ROLE_MAINS])
def test_assert_runs_under_every_stage_tag(main):
    role = main.parts[-3]
    text = yaml.load(main.read_text(), Loader=_Loader)
    first = FIRST_STAGE.get(role, "assert.yml")
    if not (main.parent / first).is_file() and (main.parent / "inputs.yml").is_file():
        # Every check the role makes is of its inputs, which the inputs pass checks before the run (playbooks/tasks/
        # inputs.yml): no first stage to carry, and none may be imported.
        assert [t for t in stage_imports(text) if first in str(t)] == [], f"{role}: imports a missing {first}"
        return
    assert assert_tag_problems(role, text, first) == []
    if first != VALUES_STAGE and (main.parent / VALUES_STAGE).is_file():
        assert assert_tag_problems(role, text, VALUES_STAGE) == []


def all_stage_tags(role: str, main: list) -> list[str]:
    return sorted({tag for t in main or [] for tag in (t.get("tags") or []) if tag.startswith(f"{role}_")})


@pytest.mark.parametrize("main", ROLE_MAINS, ids=[p.parts[-3] for p in ROLE_MAINS])
def test_the_role_page_names_every_stage_tag(main):
    """docs/roles/<role>.md documents the tags (molecule/resources/stage_tags.py runs the documented ones)."""
    role = main.parts[-3]
    tags = all_stage_tags(role, yaml.load(main.read_text(), Loader=_Loader))
    page = (DOCS / f"{role}.md").read_text()
    assert [tag for tag in tags if f"`{tag}`" not in page] == [], f"docs/roles/{role}.md does not name these tags"


def test_the_rule_catches_an_include_whose_tasks_lose_the_tag():
    bare = {"name": "join", "ansible.builtin.include_tasks": "join.yml", "tags": ["r_configure"]}
    applied = {
        "name": "join",
        "ansible.builtin.include_tasks": {"file": "join.yml", "apply": {"tags": ["r_configure"]}},
        "tags": ["r_configure"],
    }
    assert include_tag_problems("r", [bare]) == [
        "r: include_tasks 'join' is tagged ['r_configure'] without apply: tags: ['r_configure']"]
    assert include_tag_problems("r", [applied]) == []


def test_the_rule_catches_a_stage_tag_without_assert():
    main = [
        {"ansible.builtin.import_tasks": "assert.yml", "tags": ["r_assert", "r_install"]},
        {"ansible.builtin.import_tasks": "install.yml", "tags": ["r_install"]},
        {"ansible.builtin.import_tasks": "configure.yml", "tags": ["r_configure"]},
    ]
    assert assert_tag_problems("r", main) == ["r: the assert.yml stage does not run under ['r_configure']"]
    assert assert_tag_problems("r", main[1:]) == ["r: tasks/main.yml imports no assert.yml"]
    assert assert_tag_problems("r", [{"ansible.builtin.import_tasks": "objects.yml"}]) == []


def _helper():
    """molecule/resources/stage_tags.py, the runner every scenario's tags-alone test uses."""
    path = REPO / "molecule" / "resources" / "stage_tags.py"
    spec = importlib.util.spec_from_file_location("stage_tags_helper", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def _one_role_play(tmp_path: Path, main_yml: str, play_keys: str) -> Path:
    """A role r (roles/r/tasks/main.yml = main_yml) and play.yml running it; play_keys: the play's other keys."""
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(main_yml)
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"- name: P\n  {play_keys}\n  roles: [r]\n")
    return playbook


def test_the_scenario_runner_reports_changed_failed_and_empty_tags(tmp_path):
    """A real ansible-playbook run on localhost: what the scenarios' tags-alone tests would see."""
    playbook = _one_role_play(
        tmp_path,
        "- name: A change\n  ansible.builtin.command: 'true'\n  tags: [r_changes]\n"
        "- name: A failure\n  ansible.builtin.fail:\n    msg: refused\n  tags: [r_fails]\n"
        "- name: Nothing\n  ansible.builtin.debug:\n    msg: fine\n  changed_when: false\n  tags: [r_clean]\n",
        "hosts: localhost\n  gather_facts: false\n  connection: local",
    )
    helper = _helper()

    def run(tag: str):
        return helper.run_tag(playbook, tag, "r", "localhost,", ("-e", f"ansible_python_interpreter={sys.executable}"))

    clean = run("r_clean")
    assert clean.problems() == [], helper.report(clean)
    changes = run("r_changes")
    assert [p.split(":")[0] for p in changes.problems()] == ["changed on a converged host"], helper.report(changes)
    fails = run("r_fails")
    assert "rc 2" in fails.problems()
    assert any(p.startswith("failed: localhost: r : A failure") and p.endswith("refused") for p in fails.problems()), (
        fails.problems()
    )
    nothing = run("r_none")
    assert "--tags r_none ran no task of the role (the tag selects nothing)" in nothing.problems()


def playbook_include_problems(play_files) -> list[str]:
    """A play that runs a whole role with include_role must carry the role's stage tags on the include: a tag on an
    include selects the include itself, so without them the role's documented --tags <role>_<stage> selects nothing
    there (the molecule kubernetes scenario's tags-alone test found this on stage 4)."""
    problems = []
    for path in play_files:
        for play in yaml.load(path.read_text(), Loader=_Loader) or []:
            for task in (play.get("pre_tasks") or []) + (play.get("tasks") or []) + (play.get("post_tasks") or []):
                include = task.get("ansible.builtin.include_role")
                if not isinstance(include, dict) or include.get("tasks_from", "main") not in ("main", "main.yml"):
                    continue
                role = str(include.get("name", "")).rsplit(".", maxsplit=1)[-1]
                main = ROLES / role / "tasks" / "main.yml"
                if not main.exists():
                    continue
                wanted = set(all_stage_tags(role, yaml.load(main.read_text(), Loader=_Loader)))
                missing = sorted(wanted - set(task.get("tags") or []))
                if missing:
                    problems.append(f"{path.name}: include_role {role} ({task.get('name')!r}) lacks the tags {missing}")
    return problems


def test_plays_that_include_a_role_carry_its_stage_tags():
    plays = [*sorted((REPO / "playbooks").glob("*.yml")), REPO / "site.yml"]
    assert playbook_include_problems(plays) == []


def test_the_playbook_rule_catches_an_include_without_the_stage_tags(tmp_path):
    play = tmp_path / "p.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "tasks": [
        {"name": "Join", "ansible.builtin.include_role": {"name": "gpuops.cluster.kube_join"}, "tags": ["kube_join"]},
    ]}]))
    assert playbook_include_problems([play]) == [
        "p.yml: include_role kube_join ('Join') lacks the tags "
        "['kube_join_configure', 'kube_join_labels', 'kube_join_verify']"]


def test_gathered_runs_start_from_gathered_facts_only(tmp_path):
    """run_tag(gathered=True), as the tags-alone tests run: a gathering play skips the host gather_facts already
    found (no setup in the run) and reads those facts; a fact one run sets (set_fact, cacheable) never reaches the
    next run; without gathered, the play gathers."""
    playbook = _one_role_play(
        tmp_path,
        "- name: Leave a fact\n  ansible.builtin.set_fact:\n    leftover: here\n    cacheable: true\n"
        "  tags: [r_leave]\n"
        "- name: Read\n  ansible.builtin.debug:\n"
        "    msg: \"{{ ansible_facts['distribution'] }} {{ leftover | default('none') }}\"\n  tags: [r_read]\n",
        "hosts: all\n  gather_facts: true",
    )
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    helper = _helper()
    distribution = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines()
                        if "=" in line)["NAME"].strip('"').split()[0]

    left = helper.run_tag(playbook, "r_leave", "r", str(inventory), gathered=True)
    assert left.problems() == [], helper.report(left)
    assert left.results("Gathering Facts") == [], "the gathered facts were not used: the play gathered again"
    read = helper.run_tag(playbook, "r_read", "r", str(inventory), gathered=True)
    assert read.problems() == [], helper.report(read)
    assert read.results("Gathering Facts") == []
    [said] = read.results("Read")
    assert said["msg"] == f"{distribution} none", said
    fresh = helper.run_tag(playbook, "r_read", "r", str(inventory))
    assert fresh.results("Gathering Facts"), "without gathered the play gathers"
