"""compose_stack's directory probe (roles/compose_stack/tasks/install.yml): one read-only ``find`` of every directory
the role keeps, whose lines let the next task skip each directory already as wanted. The role's YAML is templated
here as Ansible templates it (ansible-core's Templar, on the task file as Ansible loads it) and ``find`` runs on a
real directory, without a playbook run. With the format's backslashes doubled (before 2026-12-06), find printed
a literal backslash-t and no newline, no line ever matched, and every re-run called the file module on each
directory (42 calls, about 16 s of each compose_stack_install run on the Molecule node)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

TASKS = Path(__file__).resolve().parents[3] / "roles" / "compose_stack" / "tasks" / "install.yml"


def _task(tasks: list[dict], prefix: str) -> dict:
    return next(task for task in tasks if task["name"].startswith(prefix))


def _runs_file_module(tmp_path: Path, mode: str) -> bool:
    """Whether the directory task runs for ``tmp_path`` wanted at ``mode``, after the probe task's find."""
    loader = DataLoader()
    tasks = loader.load_from_file(str(TASKS))
    probe, keep = _task(tasks, "Read the directories"), _task(tasks, "The directories the role keeps")
    stat = tmp_path.stat()
    wanted = {"paths": [str(tmp_path)], "mode": mode, "owner": stat.st_uid, "group": stat.st_gid}
    argv = Templar(loader=loader, variables={"_compose_stack_dirs": [wanted]}).template(
        trust_as_template(probe["ansible.builtin.command"]["argv"]))
    found = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert found.endswith("\n"), found
    variables = {"item": [wanted, str(tmp_path)], "__compose_stack_dirs_probe": {"stdout_lines": found.splitlines()}}
    return Templar(loader=loader, variables=variables).evaluate_conditional(trust_as_template(keep["when"]))


@pytest.mark.parametrize(("mode", "runs"), [("0750", False), ("0755", True)])
def test_a_directory_already_as_wanted_is_skipped_and_another_mode_is_set(tmp_path: Path, mode: str,
                                                                          runs: bool) -> None:
    os.chmod(tmp_path, 0o750)
    assert _runs_file_module(tmp_path, mode) is runs
