"""Every key of gpuops_plan that roles/, playbooks/ and plugins/ read is one the plan has (plugins/plugin_utils/plan.py
SCHEMA).

The plan is decided once, in preflight; a reader that names a key the plan does not have reads nothing, and a
``| default(...)`` after it hides that for good. Issue 38's review found one: gpu_health's sweep read
``gpuops_plan.hosts[<host>].gpu.count`` where the plan's key is ``gpu_count``, so its missing-GPU check was never
armed from the plan. This test walks each direct read - ``gpuops_plan`` followed by ``.key``, ``['key']`` or
``[expression]`` steps, in templates, task files, variables and module docs alike (a doc that names a wrong key
teaches it) - down the schema: a literal key must be one of the object's properties (or any key of a map); an
expression indexes a map (``hosts[inventory_hostname]``) or an array; a dict method (``.get``, ``.items``) ends the
walk. A read through parentheses (``(gpuops_plan.hosts | default({}))[host].x``) is checked up to the parenthesis
only. A read of this host's part through ``gpuops_plan_host`` (roles/_gpuops_vars/vars/main.yml) is walked as
``gpuops_plan.hosts[inventory_hostname]`` followed by its steps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan

REPO = Path(__file__).resolve().parents[2]
TOPS = ("roles", "playbooks", "plugins")
SUFFIXES = {".yml", ".yaml", ".j2", ".py"}
READ = re.compile(r"gpuops_plan(_host)?((?:\.[A-Za-z_]\w*|\[[^\[\]]*\])+)")
# gpuops_plan_host is gpuops_plan.hosts[inventory_hostname] (roles/_gpuops_vars/vars/main.yml).
THIS_HOST = ".hosts[inventory_hostname]"
STEP = re.compile(r"\.([A-Za-z_]\w*)|\[([^\[\]]*)\]")
LITERAL = re.compile(r"""^\s*(['"])(\w+)\1\s*$""")
METHODS = {"get", "items", "keys", "values"}
SCALARS = {"string", "integer", "number", "boolean", "null"}
# Fewer direct reads than this means the scan missed the tree (a moved folder, a broken pattern).
MIN_READS = 100


def _scalar(node: dict) -> bool:
    """A leaf: a const, an enum, or only string/number/boolean/null types (nothing under it to read)."""
    types = node.get("type")
    types = [types] if isinstance(types, str) else types or []
    return "const" in node or "enum" in node or (bool(types) and set(types) <= SCALARS)


def wrong_step(path: str) -> str | None:
    """Where the read ``gpuops_plan<path>`` leaves the schema, or None when every step is a key the plan has."""
    node, walked = plan.SCHEMA, "gpuops_plan"
    for match in STEP.finditer(path):
        name, index = match.group(1), match.group(2)
        literal = LITERAL.match(index) if index is not None else None
        key = name or (literal.group(2) if literal else None)
        properties, mapped, items = node.get("properties"), node.get("additionalProperties"), node.get("items")
        if key in METHODS and name:
            return None
        if key is not None and properties is not None and key in properties:
            node = properties[key]
        elif key is not None and isinstance(mapped, dict) and not properties:
            node = mapped  # a key of a map (hosts.<name>, team.members.<name>)
        elif key is None and isinstance(mapped, dict):
            node = mapped  # hosts[inventory_hostname]
        elif key is None and isinstance(items, dict):
            node = items  # nodes.gpu[0]
        elif properties is None and not isinstance(mapped, dict) and not isinstance(items, dict) and not _scalar(node):
            return None  # past what the schema describes (topology, kubelet_policy): not checked deeper
        else:
            known = ", ".join(sorted(properties or {})) or "map keys or array indexes only"
            return f"{walked}{match.group(0)}: the plan has no {match.group(0)!r} there (it has: {known})"
        walked += match.group(0)
    return None


def reads_in(line: str) -> list[str]:
    """The path after gpuops_plan of each direct read in ``line`` (one of this host's part from its hosts map)."""
    return [(THIS_HOST if m.group(1) else "") + m.group(2) for m in READ.finditer(line)]


def plan_reads() -> list[tuple[str, str]]:
    """``(file:line, path)`` of each direct read of gpuops_plan under TOPS."""
    found = []
    for top in TOPS:
        for file in sorted((REPO / top).rglob("*")):
            if not file.is_file() or file.suffix not in SUFFIXES:
                continue
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
                found += [(f"{file.relative_to(REPO)}:{number}", path) for path in reads_in(line)]
    return found


def test_every_plan_key_read_is_in_the_plan_schema() -> None:
    reads = plan_reads()
    assert len(reads) >= MIN_READS, f"only {len(reads)} reads of gpuops_plan under {TOPS}: the scan missed the tree"
    wrong = [f"{where}: {why}" for where, path in reads if (why := wrong_step(path))]
    assert not wrong, "reads of gpuops_plan keys the plan does not have (plan.py SCHEMA):\n" + "\n".join(wrong)


@pytest.mark.parametrize("path", [
    ".hosts[inventory_hostname].gpu.count",  # issue 38's review: the plan's key is gpu_count
    ".pins.drivr",
    "['hosts'][inventory_hostname]['gpu_cnt']",
    ".platform.name.x",
    ".hosts[inventory_hostname].health_sweep.level",
])
def test_a_key_the_plan_does_not_have_is_named(path: str) -> None:
    why = wrong_step(path)
    assert why is not None
    assert "the plan has no" in why, why


@pytest.mark.parametrize("path", [
    ".hosts[inventory_hostname].gpu_count",
    ".hosts[inventory_hostname].health_sweep.form",
    "['hosts'][host]['packages']",
    ".pools[pool].nccl",
    ".team.members.alice",
    ".hosts.get",
    ".nodes.gpu[0]",
    ".pins.registry_mirror",
])
def test_keys_the_plan_has_pass(path: str) -> None:
    assert wrong_step(path) is None


def test_a_read_of_this_hosts_part_is_walked_from_the_hosts_map() -> None:
    line = ("{{ gpuops_plan_host.gpu.count | default(0) }} {{ gpuops_plan.pins.driver }}"
            " {{ gpuops_plan_host['packages'] }}")
    assert reads_in(line) == [".hosts[inventory_hostname].gpu.count", ".pins.driver",
                              ".hosts[inventory_hostname]['packages']"]
    assert "the plan has no" in (wrong_step(reads_in(line)[0]) or ""), "a wrong key of this host's part is named"
