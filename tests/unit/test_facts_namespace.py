"""Facts only under ansible_facts: ansible.cfg and the Molecule base config set ``inject_facts_as_vars = false``, so
a run does not copy every gathered fact into a top-level ``ansible_<name>`` variable as well. ansible-core merges
that copy into each host's variables for every task (``VariableManager.get_vars`` -> ``clean_facts``) and for each
read of ``hostvars[host]``; the collection reads facts as ``ansible_facts['name']`` only (``ansible_local`` is
kept top-level by ansible either way). docs/performance.md, "Facts under ansible_facts", says what it saves.

The scan: no tracked role, playbook, plugin, Molecule or test file reads an injected fact (``ansible_<name>`` for a
name setup really returns, read from one ``setup`` run on localhost): with injection off such a read is undefined
in every run of a site using this ansible.cfg, and the scenarios exercise only some code paths."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
from pathlib import Path

import yaml
from ansible_env import playbook_env

REPO = Path(__file__).resolve().parents[2]
TOPS = ("roles", "playbooks", "plugins", "molecule", "tests", "bench", "scripts", "inventories", "gpuops_run")
SUFFIXES = {".yml", ".yaml", ".j2", ".py", ".cfg"}
# Top-level names ansible keeps (or that are not facts) and that setup also returns under ansible_facts.
KEPT = {"local"}
MIN_FACT_NAMES = 40  # fewer names than this from a full setup run means it returned almost nothing
MIN_SCANNED_FILES = 600


def _setup_fact_names() -> set[str]:
    """The fact names one real ``setup`` run on localhost returns (no ``ansible_`` prefix)."""
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-m", "ansible.builtin.setup", "-o"],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=300,
        env=playbook_env(REPO, cache="memory", extra={"ANSIBLE_LOCALHOST_WARNING": "false"}),
    )
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout.split("=>", 1)[1])
    names = {name.removeprefix("ansible_") for name in document["ansible_facts"]}
    assert len(names) >= MIN_FACT_NAMES, sorted(names)
    return names - KEPT


def _reads(text: str, names: set[str]) -> list[str]:
    """Each ``ansible_<name>`` in ``text`` that names an injected fact."""
    return [match for match in re.findall(r"\bansible_([a-z0-9_]+)\b", text) if match in names]


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", *TOPS], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    return [REPO / rel for rel in listed.split("\0")
            if rel and Path(rel).suffix in SUFFIXES and (REPO / rel).is_file()]


def test_ansible_cfg_keeps_facts_under_ansible_facts():
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config["defaults"].getboolean("inject_facts_as_vars") is False


def test_the_molecule_base_config_keeps_facts_under_ansible_facts():
    config = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    assert config["provisioner"]["config_options"]["defaults"]["inject_facts_as_vars"] is False


def test_no_tracked_file_reads_an_injected_fact():
    names = _setup_fact_names()
    assert {"distribution", "os_family", "hostname"} <= names
    this = Path(__file__).resolve()
    files = [path for path in _tracked() if path != this]
    assert len(files) >= MIN_SCANNED_FILES, f"git ls-files found {len(files)} files"
    # tests/ansible_env.py, the tests' environment builder, is imported by that name: in Python only, env is not
    # taken for the fact.
    found = [f"{path.relative_to(REPO)}: ansible_{name}" for path in files
             for name in _reads(path.read_text(errors="replace"), names - {"env"} if path.suffix == ".py" else names)]
    assert found == [], "read facts as ansible_facts['<name>'] (injection is off): " + "; ".join(found)


def test_the_scan_finds_an_injected_read_and_passes_the_namespaced_one():
    names = {"distribution", "os_family"}
    assert _reads("when: ansible_distribution == 'Debian'", names) == ["distribution"]
    assert _reads("{{ ansible_os_family | lower }}", names) == ["os_family"]
    assert _reads("when: ansible_facts['distribution'] == 'Debian'", names) == []
    assert _reads("ansible_local.gpuops_test_mirror.fingerprint", names) == []
