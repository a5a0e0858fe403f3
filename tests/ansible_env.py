"""The environment ansible runs with in the tests, the benches, `make gpu-check` and the Molecule verifiers: one
builder.

Every caller runs a checkout's own ansible.cfg and collections/ (``project``, this one by default) with
``ANSIBLE_NOCOLOR=1``, on top of the caller's environment. What differs between callers differs on purpose, and is
a parameter:

- ``cache``: ``ANSIBLE_CACHE_PLUGIN``. ``"memory"`` where facts must not outlive the run (tests/container_node.py,
  tests/render, tests/site_check run against throwaway hosts); unset, ansible.cfg's jsonfile cache;
- ``cache_dir``: ``ANSIBLE_CACHE_PLUGIN_CONNECTION``, where that jsonfile cache lives: the bench's own folder under
  build/bench, a unit test's tmp_path; unset, ansible.cfg's;
- ``callback``: ``ANSIBLE_STDOUT_CALLBACK``, e.g. ``ansible.posix.json`` for molecule/resources/stage_tags.py, which
  reads each run as one JSON document;
- ``bin_dir``: a folder put first on ``PATH`` (the venv's bin), for playbooks that call the venv's own tools;
- ``extra``: any other variable, set last (result format, colour, the localhost warning, ...); ``NO_PROFILE_TASKS``
  there keeps ansible.cfg's callbacks but profile_tasks (the collection's preload and the timer), for the tests' runs
  that read no task timings.

``play_recap`` reads the PLAY RECAP of a run's stdout. ``inventory_vars`` reads an inventory's host variables as a
play would see them, without running one.
``run_playbook`` runs one of the tests' playbooks on localhost with its variables as an extra-vars file: the one
runner of the role tests under tests/unit/roles that need no inventory (tests/unit/case_hosts.py runs one on an
inventory of one host per case).

Importable by name: from tests/ (pyproject's pytest ``pythonpath``), and from bench/, scripts/gpu_check.py and
molecule/resources/, which put tests/ on ``sys.path``; standard library only until ``inventory_vars`` is called.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
NO_PROFILE_TASKS = {"ANSIBLE_CALLBACKS_ENABLED": "gpuops.cluster.preload, ansible.builtin.timer"}


def playbook_env(
    project: Path = REPO,
    *,
    cache: str | None = None,
    cache_dir: Path | str | None = None,
    callback: str | None = None,
    bin_dir: Path | str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """``os.environ`` with the ansible-playbook settings of ``project`` and the caller's differences (module doc)."""
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(Path(project) / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(Path(project) / "collections"),
        ANSIBLE_NOCOLOR="1",
    )
    if cache is not None:
        env["ANSIBLE_CACHE_PLUGIN"] = cache
    if cache_dir is not None:
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(cache_dir)
    if callback is not None:
        env["ANSIBLE_STDOUT_CALLBACK"] = callback
    env.update(extra or {})
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def json_document(stdout: str) -> dict:
    """The json stdout callback's document (``callback="ansible.posix.json"``) out of a run's stdout: other callbacks,
    e.g. the timer, may print around it. ``{}`` when there is none."""
    start = stdout.find("{")
    if start < 0:
        return {}
    try:
        document, _end = json.JSONDecoder().raw_decode(stdout[start:])
    except ValueError:
        return {}
    return document


def play_recap(stdout: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP lines of a run's stdout: host -> counts (ok, changed, unreachable, failed, ...)."""
    block = stdout.split("PLAY RECAP", 1)[1]
    hosts = {}
    for line in block.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+: (.*)$", line)
        if not match:
            break
        hosts[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return hosts


def inventory_vars(source: Path | str) -> dict[str, dict]:
    """host -> its variables, as the inventory at ``source`` gives them (Ansible's loader: group_vars, host_vars,
    groups; no facts)."""
    # imported here: scripts/gpu_check.py builds its environment with the host's Python, before the venv exists
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(source)])
    variables = VariableManager(loader=loader, inventory=manager)
    return {host.name: variables.get_vars(host=host, include_hostvars=False) for host in manager.get_hosts()}


def run_playbook(playbook: Path, variables: dict, folder: Path, **env: Any) -> subprocess.CompletedProcess:
    """``ansible-playbook <playbook> -e @<folder>/vars.json`` from this checkout, ``variables`` written there as JSON;
    ``env`` as ``playbook_env`` takes it (the localhost warning is off). Skips the test where the venv has no
    ansible-playbook."""
    import pytest  # noqa: PLC0415 (only the tests call this; bench/ and molecule/resources/ import the module too)

    ansible_playbook = BIN / "ansible-playbook"
    if not ansible_playbook.exists():
        pytest.skip(f"ansible-playbook not found at {ansible_playbook} (run make venv)")
    folder.mkdir(parents=True, exist_ok=True)
    vars_file = folder / "vars.json"
    vars_file.write_text(json.dumps(variables))
    env["extra"] = {"ANSIBLE_LOCALHOST_WARNING": "false", **(env.get("extra") or {})}
    return subprocess.run([str(ansible_playbook), str(playbook), "-e", f"@{vars_file}"], cwd=REPO,
                          env=playbook_env(REPO, **env), capture_output=True, text=True, check=False, timeout=300)
