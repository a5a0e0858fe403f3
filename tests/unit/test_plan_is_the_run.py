"""The plan is the run (issue 37): no role or playbook computes again a decision that gpuops_plan holds.

Preflight decides once, into gpuops_plan (plugins/plugin_utils/plan.py, docs/plan.md); roles and playbooks read it.
This test parses the YAML of roles/ and playbooks/ (comments do not count: only tasks and the strings they
template) and fails on a decision made again:

* the GPU topology read again (gpuops.cluster.gpu_facts with topology: true) outside preflight: the plan holds each
  host's topology (hosts.<host>.topology) and what derives from it;
* member workspaces planned or sized again (filters workspace_plan and workspace_shares, gone;
  plugin_utils/workspaces.plan_workspaces, size_workspaces) outside plugin_utils/plan.py, or a role or playbook
  reading the host's memory or CPU count (memtotal_mb, processor_vcpus): the plan holds the workspaces with their
  memory and CPU limits (hosts.<host>.workspaces, sized in preflight on the host's memory and CPUs);
* Fabric Manager decided again from the GPU facts (fabric_manager.required): the plan holds it
  (hosts.<host>.packages.fabric_manager_needed);
* GPU presence judged again from the GPU facts in a playbook (gpu.present): the plan holds it
  (hosts.<host>.gpus_present);
* node lists built again by walking the inventory's groups through hostvars (groups[...] ... extract hostvars) in a
  role or playbook: the plan's site part holds them (nodes);
* this host's part of the plan looked up by hand (gpuops_plan.hosts[inventory_hostname], .hosts.get(inventory_hostname),
  (gpuops_plan.hosts | default({}))[inventory_hostname] ...) outside its one definition, gpuops_plan_host
  (roles/_gpuops_vars/vars/main.yml, which every play imports): one form, one answer where there is no plan or no
  part for the host.

Each rule lists what it still allows, with the reason; an allowance that no longer matches fails too, so the lists
only shrink.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAN_MODULE = "plugins/plugin_utils/plan.py"
# Fewer parsed YAML files than this means the scan missed the roles (a moved tree, a broken loader).
MIN_PARSED_FILES = 200
# Where a rule looks: task files, defaults, vars, handlers and playbooks; argument specs and other meta/ files only
# describe the variables (their prose may name a fact the plan reads).
CODE = re.compile(r"^(playbooks/|roles/[^/]+/(tasks|defaults|vars|handlers|templates)/)")


def _yaml_files() -> list[Path]:
    return sorted(p for top in ("roles", "playbooks") for p in (REPO / top).rglob("*.yml") if p.is_file())


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML as Ansible reads it: with libyaml's parser where PyYAML has it, as Ansible's loader does (the same data as
    the pure-Python one for every file here, in a seventh of the time); a !unsafe string (validate's and diagnose's
    vars) is a string to scan too."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
# Files that did not parse (each rule would pass over them unseen): none expected.
UNPARSED: list[str] = []


def _load(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # a safe loader's subclass
    except yaml.YAMLError:
        UNPARSED.append(_rel(path))
        return None


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of every mapping in ``node``, depth first; list items and strings with key ''."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key), value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            if not isinstance(item, (dict, list)):
                yield "", item
            yield from _walk(item)


def _strings(node: Any) -> Iterator[str]:
    """Every string a task or variable holds (values, and keys: a `when` list item, a loop, a module argument)."""
    for key, value in _walk(node):
        yield key
        if isinstance(value, str):
            yield value


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


PARSED = {_rel(p): _load(p) for p in _yaml_files()}
JINJA = {_rel(p): p.read_text(encoding="utf-8") for top in ("roles", "playbooks")
         for p in (REPO / top).rglob("*.j2")}


def _module_uses(module: str) -> dict[str, int]:
    """File -> how many tasks call ``module`` (FQCN or short name)."""
    short = module.rsplit(".", 1)[-1]
    found: dict[str, int] = {}
    for path, data in PARSED.items():
        count = sum(1 for key, value in _walk(data) if key in (module, short) and isinstance(value, (dict, type(None))))
        if count:
            found[path] = count
    return found


def _matches(pattern: re.Pattern, scope: re.Pattern) -> set[str]:
    """Files in ``scope`` (a path pattern) with a string that matches ``pattern``; comments are not strings."""
    hits = {path for path, data in PARSED.items() if scope.search(path)
            and any(pattern.search(text) for text in _strings(data))}
    hits |= {path for path, text in JINJA.items() if scope.search(path)
             and any(pattern.search(line) for line in text.splitlines() if not line.lstrip().startswith("{#"))}
    return hits


def test_the_scan_reads_the_roles_and_playbooks():
    """The rules below pass only on a scan that saw the code: enough files, parsed, with tasks in them."""
    parsed = [path for path, data in PARSED.items() if data is not None]
    assert len(parsed) > MIN_PARSED_FILES, parsed
    assert not UNPARSED, f"{UNPARSED} did not parse: no rule below would see them"
    assert "roles/validate/vars/main.yml" in parsed, "a vars file with !unsafe strings is scanned too"
    assert "roles/compose_stack/tasks/inputs.yml" in parsed
    assert _module_uses("ansible.builtin.assert")["roles/compose_stack/tasks/inputs.yml"] >= 1


# --- the topology is read once, by preflight --------------------------------------------------------------------

# file -> why it may still read the topology itself; add an entry only for a read-only use that reports, or the
# plan's own input, never one that decides (burn-in and validate judge against the plan's: a link lost since
# preflight must fail their checks, not lower what they expect).
TOPOLOGY_READS_ALLOWED: dict[str, str] = {
    "playbooks/tasks/plan.yml": "the plan's input where no preflight ran in this run (plan_gpu_topology: compose.yml)",
}
GPU_FACTS = ("gpuops.cluster.gpu_facts", "gpu_facts")


def _topology_reads(data: Any) -> list:
    """The ``topology`` argument of each task in ``data`` that calls gpu_facts with it set to anything but false."""
    return [value["topology"] for key, value in _walk(data)
            if key in GPU_FACTS and isinstance(value, dict) and value.get("topology") not in (None, False)]


def test_no_topology_read_outside_preflight():
    uses = {path for path, data in PARSED.items() if _topology_reads(data) and not path.startswith("roles/preflight/")}
    assert uses <= set(TOPOLOGY_READS_ALLOWED), (
        f"{sorted(uses - set(TOPOLOGY_READS_ALLOWED))} read the GPU topology again (gpuops.cluster.gpu_facts with "
        "topology: true); the plan holds it (gpuops_plan.hosts[<host>].topology). Fix: read the plan, or list a "
        "read-only use in TOPOLOGY_READS_ALLOWED with the reason")
    assert not set(TOPOLOGY_READS_ALLOWED) - uses, "an allowance no longer used: remove it"


def test_the_module_rule_finds_a_topology_read():
    sample = yaml.safe_load(
        "- gpuops.cluster.gpu_facts:\n    topology: true\n- gpu_facts:\n    topology: '{{ x }}'\n"
        "- gpuops.cluster.gpu_facts:\n    topology: false\n- gpuops.cluster.gpu_facts:\n"
    )
    assert _topology_reads(sample) == [True, "{{ x }}"]


# --- workspaces are planned once, in plan.py --------------------------------------------------------------------

def test_no_workspace_plan_outside_the_plan():
    planner = re.compile(r"\b(workspace_plan|plan_workspaces|workspace_shares|size_workspaces)\b")
    yaml_uses = _matches(planner, CODE)
    assert not yaml_uses, (
        f"{sorted(yaml_uses)} plan or size member workspaces again; the plan holds them with their memory and CPU "
        "limits (gpuops_plan.hosts[<host>].workspaces). Fix: read the plan's workspaces")
    for function in ("plan_workspaces", "size_workspaces"):
        callers = {_rel(p) for p in (REPO / "plugins").rglob("*.py")
                   if re.search(rf"\b{function}\(", p.read_text(encoding="utf-8"))}
        assert callers == {PLAN_MODULE, "plugins/plugin_utils/workspaces.py"}, (
            f"{function} is called by {sorted(callers)}; expected only {PLAN_MODULE} (and its own module)")
    assert planner.search("{{ x | gpuops.cluster.workspace_shares(1) }}"), "the pattern finds the old sizing step"


def test_no_role_sizes_workspaces_from_the_hosts_memory_or_cpus():
    reads = re.compile(r"\b(memtotal_mb|processor_vcpus|compose_stack_member_memory_pool_mb|"
                       r"compose_stack_member_cpus_pool)\b")
    found = _matches(reads, CODE) - {"roles/compose_stack/defaults/main.yml"}
    assert not found, (
        f"{sorted(found)} read the host's memory or CPU count, or the workspaces' pools; the plan sizes the "
        "workspaces on them (gpuops_plan.hosts[<host>].workspaces.sizing, workspaces.host_pools). Fix: read the "
        "members' memory_mb and cpus from the plan")
    assert reads.search("{{ ansible_facts['memtotal_mb'] * 0.8 }}"), "the pattern finds the old default"


# --- Fabric Manager and GPU presence are the plan's -------------------------------------------------------------

def test_fabric_manager_is_not_decided_again_from_the_gpu_facts():
    decides = re.compile(r"fabric_manager\W{1,4}required")
    found = _matches(decides, CODE)
    assert not found, (
        f"{sorted(found)} decide Fabric Manager from the GPU facts again; the plan holds it "
        "(gpuops_plan.hosts[<host>].packages.fabric_manager_needed). Fix: read the plan")
    assert decides.search("ansible_facts['gpu']['fabric_manager']['required']"), "the pattern finds the old read"


# file -> why it still reads the GPU facts' presence itself. (nvidia_container_toolkit's CDI default reads the plan's
# gpus_present and its own probe of the loaded driver since 2026-12-06.)
GPU_PRESENCE_READS_ALLOWED: dict[str, str] = {}


def test_gpu_presence_is_not_judged_again():
    presence = re.compile(r"\['gpu'\]\['present'\]|\bgpu\.present\b")
    found = _matches(presence, CODE)
    assert found <= set(GPU_PRESENCE_READS_ALLOWED), (
        f"{sorted(found - set(GPU_PRESENCE_READS_ALLOWED))} judge GPU presence from the GPU facts again; the plan "
        "holds it (gpuops_plan.hosts[<host>].gpus_present). Fix: read the plan")
    assert not set(GPU_PRESENCE_READS_ALLOWED) - found, "an allowance no longer used: remove it"
    assert presence.search("ansible_facts['gpu']['present']"), "the pattern finds the old read"
    host = PARSED["playbooks/host.yml"]
    assert any("gpus_present" in text for text in _strings(host)), "host.yml skips a GPU-less host by the plan"


# --- node lists are the plan's site part ------------------------------------------------------------------------

NODE_LIST_WALK = re.compile(r"groups\[[^\]]+\][^{}]*?map\(\s*'extract'\s*,\s*hostvars")

# file -> why it may still walk the inventory's groups through hostvars. The entry point resolves the plan itself.
# (gpu_operator, training_stack and kube_tenancy defaults and grow's plan read gpuops_plan.nodes since 642cb78.)
NODE_LIST_WALKS_ALLOWED = {
    "playbooks/tasks/plan.yml": "the plan's entry point: it takes a plan another GPU host holds (this run's preflight)",
    "playbooks/tasks/kube_plan_assert.yml": "an input check (each GPU node's gpuops_pool, each host's "
    "kube_control_plane_schedulable and ansible_host against the cluster rules), not a node list the run acts on; "
    "it belongs in preflight's one problems pass (issue 37 part 2)",
}


def test_no_node_list_is_built_from_hostvars():
    found = _matches(NODE_LIST_WALK, CODE)
    allowed = set(NODE_LIST_WALKS_ALLOWED)
    assert found <= allowed, (
        f"{sorted(found - allowed)} build a node list by walking the inventory through hostvars; the plan holds the "
        "node lists (gpuops_plan.nodes). Fix: read the plan")
    stale = sorted(allowed - found)
    assert not stale, f"{stale} no longer walk hostvars for a node list: remove them from the allowances"


def test_no_role_default_reads_other_hosts():
    """A role's defaults are its settings; what other hosts hold (node lists, their GPUs) is the plan's."""
    defaults = re.compile(r"^roles/[^/]+/defaults/")
    assert len([path for path in PARSED if defaults.search(path)]) > MIN_PARSED_FILES // 10, "the scan saw the defaults"
    found = _matches(re.compile(r"\bhostvars\b"), defaults)
    assert not found, f"{sorted(found)} read other hosts' variables (hostvars) in a role default. Fix: read gpuops_plan"


@pytest.mark.parametrize("text", [
    "{{ groups['gpu_nodes'] | default([]) | map('extract', hostvars) | gpuops.cluster.kube_gpu_nodes }}",
    "{{ gpuops_gpu_count | default(groups['gpu_nodes'] | default([]) | map('extract', hostvars)\n | sum) }}",
])
def test_the_node_list_rule_finds_a_walk(text: str):
    assert NODE_LIST_WALK.search(text)


# --- this host's part of the plan is read one way ----------------------------------------------------------------

# The plan's hosts map (.hosts, ['hosts'], .get('hosts'...)), then - across no bracket or brace but an empty {} (a
# default and the parentheses around it) - this host's name as its subscript, a call's first argument (.get) or its
# last (selectattr('key', 'eq', ...)); or the name extracted from the map.
_PLAN_HOSTS = r"""gpuops_plan\s*(?:\.\s*hosts\b|\[\s*['"]hosts['"]\s*\]|\.\s*get\(\s*['"]hosts['"])"""
_THIS_HOST = r"(?:\[\s*inventory_hostname\s*\]|\(\s*inventory_hostname\b|,\s*inventory_hostname\s*\))"
_EXTRACTED = r"""\binventory_hostname\s*\]?\s*\|\s*map\(\s*['"]extract['"]\s*,\s*"""
THIS_HOST_LOOKUP = re.compile(rf"{_PLAN_HOSTS}(?:[^\[\]{{}}]|\{{\s*\}})*?{_THIS_HOST}|{_EXTRACTED}{_PLAN_HOSTS}")
# Its one definition: gpuops_plan_host, this host's part ({} where there is no plan or no part for the host).
THIS_HOST_HOME = "roles/_gpuops_vars/vars/main.yml"


def test_this_hosts_part_of_the_plan_is_read_through_gpuops_plan_host():
    found = _matches(THIS_HOST_LOOKUP, CODE)
    assert THIS_HOST_HOME in found, "the rule finds gpuops_plan_host's own definition (the scan saw it)"
    assert "gpuops_plan_host" in PARSED[THIS_HOST_HOME], "gpuops_plan_host is defined in the shared vars"
    others = sorted(found - {THIS_HOST_HOME})
    assert not others, (
        f"{others} look up this host's part of the plan by hand; it has one form, gpuops_plan_host "
        f"({THIS_HOST_HOME}, which every play imports; {{}} where there is no plan or no part for this host). "
        "Fix: read gpuops_plan_host.<key> (test gpuops_plan is defined where a message must tell 'no plan' apart)")


def test_the_documentation_shows_this_hosts_part_as_gpuops_plan_host():
    """What a user copies - a plugin's DOCUMENTATION and EXAMPLES (ansible-doc prints them), the docs pages - reads
    this host's part of the plan through the documented entry point too."""
    pages = sorted(p for top in ("plugins", "docs") for p in (REPO / top).rglob("*")
                   if p.suffix in (".py", ".yml", ".md") and p.is_file())
    assert REPO / "plugins" / "modules" / "gpu_health.py" in pages, "the scan reads the modules"
    assert REPO / "docs" / "plan.md" in pages, "the scan reads the docs"
    found = [_rel(p) for p in pages if THIS_HOST_LOOKUP.search(p.read_text(encoding="utf-8"))]
    assert not found, f"{found} show this host's part of the plan looked up by hand; show gpuops_plan_host.<key>"


@pytest.mark.parametrize("text", [
    "{{ gpuops_plan.hosts[inventory_hostname].workspaces }}",
    "{{ gpuops_plan.hosts[ inventory_hostname ] is defined }}",
    "{{ (gpuops_plan.hosts.get(inventory_hostname) or {}).get('topology') }}",
    "{{ ((gpuops_plan.hosts | default({}))[inventory_hostname] | default({})).gpu_count | default(none) }}",
    "{{ gpuops_plan['hosts'][inventory_hostname] }}",
    "{{ gpuops_plan.get('hosts', {}).get(inventory_hostname, {}) }}",
    "{{ (gpuops_plan.hosts | dict2items | selectattr('key', 'eq', inventory_hostname) | first).value }}",
    "{{ [inventory_hostname] | map('extract', gpuops_plan.hosts) | first }}",
    "{{ gpuops_plan.hosts\n     [inventory_hostname].packages }}",
])
def test_the_this_host_rule_finds_a_lookup_by_hand(text: str):
    assert THIS_HOST_LOOKUP.search(text)


@pytest.mark.parametrize("text", [
    "{{ gpuops_plan_host.workspaces | default(none) }}",
    "{{ gpuops_plan.hosts[n].topology | default(none) }}",  # another host's part, in a loop
    "{{ (gpuops_plan['hosts'] | default({})).values() | selectattr('health_sweep', 'defined') | list }}",
    "the plan pins {{ inventory_hostname }} (gpuops_plan.hosts.{{ inventory_hostname }}.packages.driver)",
    "{{ gpuops_plan | combine({'hosts': {inventory_hostname: {'packages': p}}}, recursive=True) }}",
    "{{ gpuops_plan.hosts | length }} GPU host(s) for {{ inventory_hostname }}",
])
def test_the_this_host_rule_leaves_other_reads_alone(text: str):
    assert not THIS_HOST_LOOKUP.search(text)


# --- package pins are the plan's --------------------------------------------------------------------------------

# role -> its pin variable (the plan carries it: gpuops_plan.hosts.<host>.packages), and the tasks that may still
# template it: the inputs pass's format check, and the assert that refuses a plan made for another pin. Every other
# task (the pinned set, its names) takes the plan's pin.
PLAN_PINS = {
    "nvidia_driver": ("nvidia_driver_version", {
        ("inputs.yml", "Inputs | nvidia_driver_version is a dotted driver version, not a branch"),
        ("assert.yml", "Assert | the plan pins the driver this inventory pins"),
    }),
    "nvidia_container_toolkit": ("nvidia_container_toolkit_version", {
        ("inputs.yml", "Inputs | nvidia_container_toolkit_version is an exact version"),
        ("assert.yml", "Assert | the plan pins the toolkit this inventory pins"),
    }),
}
_JINJA_KEYS = ("that", "when", "failed_when", "changed_when", "until")


def _templates(node: Any, variable: str) -> bool:
    """Whether ``node`` templates ``variable`` (in {{ }}, or in a bare-Jinja key such as that: or when:)."""
    word = re.compile(rf"\b{variable}\b")
    return any(
        word.search(text) and (key in _JINJA_KEYS or re.search(rf"{{{{[^}}]*\b{variable}\b", text))
        for key, value in _walk(node) for text in ([value] if isinstance(value, str) else
                                                   [str(value)] if key in _JINJA_KEYS else [])
    )


@pytest.mark.parametrize("role", sorted(PLAN_PINS))
def test_package_pins_are_read_from_the_plan(role):
    variable, allowed = PLAN_PINS[role]
    used = set()
    for path, data in PARSED.items():
        if re.match(rf"roles/{role}/(tasks|vars|handlers)/", path) and isinstance(data, (list, dict)):
            items = data if isinstance(data, list) else [{"name": key, "value": value} for key, value in data.items()]
            used |= {(path.rsplit("/", 1)[1], item.get("name")) for item in items if _templates(item, variable)}
    assert used == allowed, (
        f"{role} templates {variable} in {sorted(used - allowed)}; the plan holds the pin "
        f"(gpuops_plan.hosts.<host>.packages). Fix: read the plan's pin" if used - allowed else
        f"{sorted(allowed - used)} no longer template {variable}: remove them from the allowances")


def test_the_pin_rule_finds_a_pin_computed_again():
    old = {"name": "Pinned toolkit packages", "ansible.builtin.include_role": {"vars": {"pinned_packages_versions": (
        "{{ dict(nvidia_container_toolkit_packages | zip(nvidia_container_toolkit_packages\n"
        " | map('regex_replace', '^.*$', nvidia_container_toolkit_version))) }}")}}}
    assert _templates(old, "nvidia_container_toolkit_version")
    assert _templates({"ansible.builtin.assert": {"that": "x == nvidia_driver_version"}}, "nvidia_driver_version")
    assert not _templates({"vars": {"pinned_packages_version_variable": "nvidia_driver_version"}},
                          "nvidia_driver_version"), "a variable's name is not a use of it"
