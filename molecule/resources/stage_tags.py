"""Run each documented stage tag of a role alone against a converged scenario (issue 11, one stage rule).

Shared by the scenarios' testinfra files (molecule/<scenario>/tests/test_*tags_alone.py), each a declaration
(playbook, roles) over the two tests ``tags_alone_tests`` makes. For every stage tag a
role documents (its page docs/roles/<role>.md names the tags of its tasks/main.yml; the unit test
tests/unit/roles/test_stage_tags.py keeps page and tasks in step), one ansible-playbook run of the scenario's
converge playbook with ``--tags <tag>`` against the already converged hosts, through the scenario's inventory.
The run must end with rc 0, no failed or unreachable host, no changed task (the host is converged: this
also proves each tag idempotent on its own), and at least one task of the role itself run: a tag that selects
nothing would pass every other check.

The hosts' facts: a play that gathers facts would gather the same ones on the same converged hosts in every tag's
run (each run must change nothing), so the tags-alone runs start from what ``gather_facts`` found on them once in
this pytest session (``_gathered_facts``), each run from a fresh copy of it in a jsonfile fact cache, with
ansible.cfg's ``gathering = smart``: a gathering play skips the hosts it holds. Only what gather_facts found is
carried: facts a module or ``set_fact`` sets in one run never reach the next, so a stage that forgets to read what
it needs still fails alone. Other runs (``run_tag`` without ``gathered``) gather for themselves.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

# tests/ansible_env.py, on sys.path through pyproject's pytest pythonpath
from ansible_env import NO_PROFILE_TASKS, json_document, playbook_env
from ci_skips import skip_by_design

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[2]))
ROLES = PROJECT / "roles"
DOCS = PROJECT / "docs" / "roles"


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def stage_tags(role: str) -> list[str]:
    """The role's stage tags, in the order its tasks/main.yml first names them (role-prefixed tags only)."""
    main = yaml.load((ROLES / role / "tasks" / "main.yml").read_text(), Loader=_Loader) or []
    tags: list[str] = []
    for task in main:
        for tag in task.get("tags") or []:
            if tag.startswith(f"{role}_") and tag not in tags:
                tags.append(tag)
    return tags


def documented_tags(role: str) -> list[str]:
    """The stage tags the role's page names (in tasks/main.yml order); what a user may run alone."""
    page = (DOCS / f"{role}.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+)`", page))
    return [tag for tag in stage_tags(role) if tag in named]


@dataclass
class TagRun:
    """One ansible-playbook run, as the json callback reported it."""

    tag: str
    rc: int
    seconds: float
    stats: dict = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    role_tasks: int = 0
    tail: str = ""
    document: dict = field(default_factory=dict, repr=False)

    def results(self, task_name: str, host: str | None = None) -> list[dict]:
        """The results of the tasks whose name contains ``task_name`` (on ``host``, else on every host)."""
        return [result for play in self.document.get("plays", []) for task in play.get("tasks", [])
                if task_name in task.get("task", {}).get("name", "")
                for name, result in task.get("hosts", {}).items() if host in (None, name)]

    def problems(self) -> list[str]:
        found = []
        if self.rc != 0:
            found.append(f"rc {self.rc}")
        for host, stat in self.stats.items():
            if stat.get("failures") or stat.get("unreachable"):
                found.append(f"{host}: {stat.get('failures', 0)} failed, {stat.get('unreachable', 0)} unreachable")
        if not self.stats:
            found.append("no play recap (the run did not reach any host)")
        found += [f"failed: {task}" for task in self.failed]
        found += [f"changed on a converged host: {task}" for task in self.changed]
        if self.role_tasks == 0:
            found.append(f"--tags {self.tag} ran no task of the role (the tag selects nothing)")
        return found


_RUNS: dict[tuple, TagRun] = {}


_GATHERED: dict[str, Path | None] = {}


def _gathered_facts(inventory: str) -> Path | None:
    """A jsonfile fact cache holding what ``gather_facts`` found on every host of ``inventory``, gathered once in this
    pytest session (module doc); None when that gather failed (each run then gathers for itself)."""
    if inventory not in _GATHERED:
        cache = Path(tempfile.mkdtemp(prefix="gpuops-tag-facts-"))
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        env = playbook_env(PROJECT, cache="ansible.builtin.jsonfile", cache_dir=cache)
        proc = subprocess.run(["ansible", "-i", inventory, "all", "-m", "ansible.builtin.gather_facts"],
                              capture_output=True, text=True, env=env, timeout=600, check=False)
        _GATHERED[inventory] = cache if proc.returncode == 0 and any(cache.iterdir()) else None
    return _GATHERED[inventory]


def run_tag(playbook: Path, tag: str, role: str, inventory: str | None = None, extra: tuple[str, ...] = (),
            timeout: int = 900, reuse: bool = False, gathered: bool = False) -> TagRun:
    """Run ``playbook`` with ``--tags tag`` through the scenario's inventory; parse the json callback's result.

    ``reuse``: return the result of the same run made earlier in this pytest session, if any (one run serves two
    test files that both need the converged state, e.g. the driver's kernel test and its tags-alone test).
    ``gathered``: start from the facts gather_facts found once on the converged hosts (module doc), not a fresh
    gather; only for runs on hosts where gather_facts would still find the same (as converged, or changed only in what
    no gathered fact shows, such as test_15_kernel.py's stand-in kernel packages).
    """
    key = (str(playbook), tag, role, inventory, tuple(extra))
    if reuse and key in _RUNS:
        return _RUNS[key]
    inventory = inventory or os.environ.get("MOLECULE_INVENTORY_FILE")
    assert inventory, "MOLECULE_INVENTORY_FILE is not set: run these tests through `molecule verify`"
    facts = _gathered_facts(inventory) if gathered else None
    run_cache = Path(tempfile.mkdtemp(prefix="gpuops-tag-run-facts-")) if facts else None
    if facts and run_cache:
        shutil.copytree(facts, run_cache, dirs_exist_ok=True)
    env = playbook_env(
        PROJECT,
        callback="ansible.posix.json",
        cache="ansible.builtin.jsonfile" if run_cache else None,
        cache_dir=run_cache,
        extra={**NO_PROFILE_TASKS, "ANSIBLE_RETRY_FILES_ENABLED": "0",
               **({"ANSIBLE_GATHERING": "smart"} if run_cache else {})},
    )
    started = time.monotonic()
    try:
        proc = subprocess.run(
            ["ansible-playbook", "-i", inventory, str(playbook), "--tags", tag, *extra],
            capture_output=True, text=True, env=env, timeout=timeout, check=False,
        )
    finally:
        if run_cache:
            shutil.rmtree(run_cache, ignore_errors=True)
    run = TagRun(tag=tag, rc=proc.returncode, seconds=time.monotonic() - started,
                 tail=f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    document = json_document(proc.stdout)
    run.document = document
    run.stats = document.get("stats", {})
    role_dir = f"/roles/{role}/"
    for play in document.get("plays", []):
        for task in play.get("tasks", []):
            name = task.get("task", {}).get("name", "?")
            path = task.get("task", {}).get("path", "")
            for host, result in task.get("hosts", {}).items():
                label = f"{host}: {name} ({path})"
                if result.get("failed") and not result.get("ignore_errors", False):
                    run.failed.append(f"{label}: {str(result.get('msg', ''))[:500]}")
                if result.get("changed"):
                    run.changed.append(label)
                if role_dir in path and not result.get("skipped"):
                    run.role_tasks += 1
    _RUNS[key] = run
    return run


def report(run: TagRun) -> str:
    """A failure message: what went wrong, then the run's output tail."""
    return f"--tags {run.tag} alone ({run.seconds:.0f} s): " + "; ".join(run.problems()) + f"\n{run.tail}"


def tags_alone_tests(playbook: Path, roles: tuple[str, ...], *, reuse: bool = False, not_here: dict | None = None):
    """The two tests of a scenario's test_*tags_alone.py, parametrised over what the scenario declares.

    ``playbook`` is run once per documented stage tag of each of ``roles`` (``reuse``: see ``run_tag``). The
    scenario's file binds the returned functions to the names pytest collects, e.g.::

        test_every_stage_tag_is_documented, test_tag_alone_on_the_converged_node = stage_tags.tags_alone_tests(
            SCENARIO / "converge.yml", ("local_pv",)
        )

    Test ids: ``test_every_stage_tag_is_documented[<role>]`` and ``<name>[<tag>]`` (tags are role-prefixed).
    ``not_here``: tag -> why the stage has no task on this scenario's hosts (it skips, by design, with the reason).
    """
    cases = [(role, tag) for role in roles for tag in documented_tags(role)]

    @pytest.mark.parametrize("role", roles)
    def test_every_stage_tag_is_documented(role):
        """Every stage tag of the role's tasks/main.yml is on its page, so every one is run alone below."""
        assert documented_tags(role) == stage_tags(role), role

    @pytest.mark.parametrize(("role", "tag"), cases, ids=[tag for _role, tag in cases])
    def test_tag_alone(role, tag):
        """``--tags <tag>`` alone on the converged hosts: rc 0, nothing failed or changed, a task of the role ran."""
        if tag in (not_here or {}):
            skip_by_design(not_here[tag])
        run = run_tag(playbook, tag, role, reuse=reuse, gathered=True)
        assert run.problems() == [], report(run)

    return test_every_stage_tag_is_documented, test_tag_alone
