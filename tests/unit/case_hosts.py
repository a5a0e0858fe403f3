"""One ansible-playbook run for many cases of a role test: each case is a host of its own.

``run_cases`` writes an inventory in which every case is a host (its variables as host variables; each host connects
locally with this Python) and runs one of the tests' playbooks (``hosts: all``) on it once, with the json callback. A
failed task stops its host only, so each case gets its own verdict, refusals included, as a site's hosts each get
their own. What a test asserts of its case is read from that host's results alone (``Case``). Only cases that
nothing fleet-wide mixes (no run_once, groups or a plan of several hosts) may share a run.

Host variables rank below a role's vars/main.yml and set_fact, where the extra variables of ``run_playbook`` ranked
above them: a case's value of a role's own variable is an extra variable templated from a host variable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_env import BIN, NO_PROFILE_TASKS, REPO, json_document, playbook_env


@dataclass
class Case:
    failed: bool  # a task failed on this host (or it was unreachable)
    text: str  # every string of the host's results but gathered facts, whitespace flattened
    statuses: dict[str, list[str]] = field(default_factory=dict)  # task name -> ok/changed/failed/skipped, in order
    results: dict[str, list[dict]] = field(default_factory=dict)  # task name -> this host's results, in order

    def status(self, task: str) -> str:
        """The status of the one run on this host of the one task whose name holds ``task``."""
        found = [s for name, runs in self.statuses.items() if task in name for s in runs]
        assert len(found) == 1, (task, self.statuses)
        return found[0]

    def result(self, task: str) -> dict:
        """This host's result of the one run of the one task whose name holds ``task``."""
        found = [r for name, runs in self.results.items() if task in name for r in runs]
        assert len(found) == 1, (task, self.statuses)
        return found[0]


@dataclass
class Run:
    cases: dict[str, Case]
    stdout: str  # the whole run's output (every host's results)


def kubectl_stand_in(folder: Path, answer: str) -> Path:
    """A LABELLED TEST STAND-IN kubectl in ``folder / "bin"`` (the returned folder, for PATH): it records each call's
    argv (one call a line, tab-separated, in ``folder / "kubectl.log"``, read by ``kubectl_calls``), then runs
    ``answer``, shell that sees the call's ``$@`` and gives the call's output and exit status. The line is written
    with one write (printf of the whole line, O_APPEND): the hosts of one run call kubectl at the same time, and a
    line written piece by piece interleaved with another host's (seen under load: a call recorded as
    ``['', 'node', ...]``)."""
    bin_dir, log = folder / "bin", folder / "kubectl.log"
    bin_dir.mkdir(parents=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n# LABELLED TEST STAND-IN for kubectl: records its argv (one call a line, tab-separated)\n"
        "tab=$(printf '\\t'); line=kubectl; for a in \"$@\"; do line=\"$line$tab$a\"; done\n"
        f"printf '%s\\n' \"$line\" >> '{log}'\n"
        f"{answer}\n")
    kubectl.chmod(0o755)
    return bin_dir


def kubectl_calls(folder: Path) -> list[list[str]]:
    """The calls the stand-in of ``kubectl_stand_in(folder, ...)`` recorded, in order."""
    log = folder / "kubectl.log"
    return [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):  # gathered facts are the machine's, not the case's
        return [s for k, v in value.items() if k != "ansible_facts" for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _status(result: dict) -> str:
    if result.get("failed") or result.get("unreachable"):
        return "failed"
    if result.get("skipped"):
        return "skipped"
    return "changed" if result.get("changed") else "ok"


def run_cases(playbook: Path, cases: dict[str, dict], folder: Path, *options: str, extra_vars: dict | None = None,
              **env: Any) -> Run:
    """Run ``playbook`` once on an inventory of one local host per case (name -> host variables), with ``options``
    and ``extra_vars`` (-e, templated per host: a role's own variable a case sets, e.g. ``"{{ case_value }}"``);
    ``env`` as ``playbook_env`` takes it. Skips the test where the venv has no ansible-playbook."""
    ansible_playbook = BIN / "ansible-playbook"
    if not ansible_playbook.exists():
        pytest.skip(f"ansible-playbook not found at {ansible_playbook} (run make venv)")
    folder.mkdir(parents=True, exist_ok=True)
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **variables}
             for name, variables in cases.items()}
    inventory = folder / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    env["callback"] = "ansible.posix.json"
    env["extra"] = {**NO_PROFILE_TASKS, "ANSIBLE_FORKS": str(max(len(hosts), 1)), **(env.get("extra") or {})}
    extra = ["-e", json.dumps(extra_vars)] if extra_vars else []
    out = subprocess.run([str(ansible_playbook), "-i", str(inventory), str(playbook), *extra, *options], cwd=REPO,
                         env=playbook_env(REPO, **env), capture_output=True, text=True, check=False, timeout=600)
    document = json_document(out.stdout)
    assert document.get("stats"), out.stdout[-3000:] + out.stderr[-2000:]
    found = {}
    for name in hosts:
        results = [(task["task"]["name"], task["hosts"][name]) for play in document["plays"]
                   for task in play["tasks"] if name in task["hosts"]]
        statuses: dict[str, list[str]] = {}
        by_task: dict[str, list[dict]] = {}
        for task, result in results:
            statuses.setdefault(task, []).append(_status(result))
            by_task.setdefault(task, []).append(result)
        stats = document["stats"].get(name, {})
        text = " ".join(" ".join(_strings([result for _task, result in results])).split())
        found[name] = Case(failed=stats.get("failures", 0) > 0 or stats.get("unreachable", 0) > 0, text=text,
                           statuses=statuses, results=by_task)
    return Run(cases=found, stdout=out.stdout)
