"""One home for the shared defaults (issue 37 §3): roles/_gpuops_vars/defaults/main.yml, as kubespray_defaults.

Every play imports the _gpuops_vars role first, so its defaults are the play's; nothing else defaults a gpuops_*
variable, nor the cluster settings homed there beside them (SHARED_CLUSTER_SETTINGS: kube_version, kube_pod_cidr,
kube_service_cidr, kube_dns_domain, kube_image_repository, kube_config_dir, gpu_operator_namespace,
training_stack_namespace, kube_monitoring_namespace, kube_monitoring_release_name,
training_stack_mlflow_namespace, gpu_health_textfile_dir, gpu_health_state_dir,
kube_control_plane_credentials_dir, kube_control_plane_endpoint, kube_control_plane_bind_port, Compose's
publish addresses and ports, read by compose_stack and diagnose, and the data folders preflight measures,
compose_stack_data_dir and docker_engine_data_root). This test reads
the text of roles/, playbooks/, plugins/ and molecule/ (comments count too: a default written in a comment is a
second home in words) and fails, naming file:line, on

* an inline Jinja default of a gpuops_* variable or a shared cluster setting (``gpuops_x | default(...)``,
  ``kube_pod_cidr | default(...)``) outside roles/_gpuops_vars;
* a Python read of a gpuops_* variable with its own default (``get_var(hostvars, "gpuops_x", ...)``,
  ``vars.get("gpuops_x", ...)``): plugin_utils' ``get_var`` reads the shared default itself;
* a play of playbooks/ that runs a role or a task file without importing _gpuops_vars.

The allowances name paths other helpers of issue 37 are changing now, each with why; one that no longer matches
fails too, so the list only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import platform

REPO = Path(__file__).resolve().parents[2]
HOME = "roles/_gpuops_vars/"
TOPS = ("roles", "playbooks", "plugins", "molecule")
SUFFIXES = {".yml", ".yaml", ".j2", ".py"}
# Fewer scanned files than this means the scan missed the tree (a moved folder, a broken glob).
MIN_SCANNED_FILES = 400
MIN_PLAYS = 20  # the same for the plays of playbooks/
# The home's names that are not gpuops_*: the cluster's release, networks, DNS domain and image repository, read by the
# kube roles and the kube plan, and the GPU Operator's namespace, read by gpu_operator, validate and diagnose, and the
# Training Operator's, read by training_stack and kube_monitoring, and the monitoring stack's, read by kube_monitoring,
# kube_tenancy and diagnose, and MLflow's, read by training_stack, kube_tenancy and grow.
SHARED_CLUSTER_SETTINGS = (
    "kube_version",
    "kube_pod_cidr",
    "kube_service_cidr",
    "kube_dns_domain",
    "kube_image_repository",
    "kube_config_dir",
    "gpu_operator_namespace",
    "training_stack_namespace",
    "kube_monitoring_namespace",
    "kube_monitoring_release_name",
    "training_stack_mlflow_namespace",
    "gpu_health_textfile_dir",
    "gpu_health_state_dir",
    "kube_control_plane_credentials_dir",
    "kube_control_plane_endpoint",
    "kube_control_plane_bind_port",
    "compose_stack_bind_address",
    "compose_stack_service_bind_address",
    "compose_stack_ports",
    "compose_stack_data_dir",
    "docker_engine_data_root",
)
# \b: an internal fact (_gpuops_*, __gpuops_*: set by a task, not an inventory variable) has no shared default.
JINJA_DEFAULT = re.compile(rf"(?:\bgpuops_\w+|\b(?:{'|'.join(SHARED_CLUSTER_SETTINGS)})\b)\s*\|\s*default\(")
PYTHON_DEFAULT = re.compile(r"(?:get_var\(.*?|\.get\(\s*)[\"']gpuops_(\w+)[\"']\s*,\s*[^)\s]")
# Paths with inline defaults that other helpers are changing in this round (remove an entry once it is done).
ALLOWED: dict[str, str] = {}
# Plays that run a role or a task file and need no gpuops_* variable: the reason.
PLAYS_WITHOUT_IMPORT = {
    "playbooks/demo_node.yml": "starts the demo node's container on the controller (tasks/node_container.yml)",
}


def _files() -> list[Path]:
    return sorted(p for top in TOPS for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def inline_defaults(path: str, text: str) -> list[str]:
    """``path:line: text`` of each default of a gpuops_* variable written in ``text`` ."""
    pattern = PYTHON_DEFAULT if path.endswith(".py") else JINJA_DEFAULT
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.search(line):
            found.append(f"{path}:{number}: {line.strip()}")
    return found


def _all_inline_defaults() -> dict[str, list[str]]:
    files = _files()
    assert len(files) >= MIN_SCANNED_FILES, f"only {len(files)} files under {TOPS}: the scan missed the tree"
    by_path = {}
    for path in files:
        relative = str(path.relative_to(REPO))
        if relative.startswith(HOME):
            continue
        found = inline_defaults(relative, path.read_text(encoding="utf-8"))
        if found:
            by_path[relative] = found
    return by_path


def test_no_gpuops_default_outside_its_home() -> None:
    found = [hit for path, hits in _all_inline_defaults().items() if path not in ALLOWED for hit in hits]
    assert not found, (
        "a gpuops_* variable or shared cluster setting defaulted outside roles/_gpuops_vars (its one home: give the "
        "default there, in defaults/main.yml and meta/argument_specs.yml, and import the role in the play):\n"
        + "\n".join(found)
    )


def test_each_allowance_still_matches() -> None:
    found = _all_inline_defaults()
    stale = sorted(path for path in ALLOWED if path not in found)
    assert not stale, f"no inline gpuops_* default left in {stale}: remove them from ALLOWED"


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        ("roles/r/defaults/main.yml", "r_x: \"{{ gpuops_registry_mirror | default('') }}\"", 1),
        ("roles/r/templates/t.j2", "image: {{ i | mirror_image(gpuops_registry_mirror|default('', true)) }}", 1),
        ("roles/r/tasks/assert.yml", "when: role_name not in (gpuops_inputs_checked | default([]))", 1),
        ("playbooks/tasks/t.yml", "{{ _gpuops_plan_made_by_this_run | default(gpuops_plan is defined) }}", 0),
        ("roles/r/defaults/main.yml", 'r_x: "{{ gpuops_registry_mirror }}"', 0),
        ("roles/r/defaults/main.yml", "r_pod_cidr: \"{{ kube_pod_cidr | default('10.244.0.0/16') }}\"", 1),
        ("playbooks/tasks/t.yml", "'service_cidr': kube_service_cidr|default('10.96.0.0/12'),", 1),
        ("roles/r/defaults/main.yml", 'r_pod_cidr: "{{ kube_pod_cidr }}"', 0),
        ("roles/r/defaults/main.yml", "r_version: \"{{ kube_version | default('') }}\"", 1),
        ("roles/r/defaults/main.yml", "- path: \"{{ docker_engine_data_root | default('/var/lib/docker') }}\"", 1),
        ("roles/r/defaults/main.yml", "r_x: \"{{ kube_version_minor | default('') }}\"", 0),
        ("roles/r/defaults/main.yml", "r_dns: \"{{ kube_dns_domain | default('cluster.local') }}\"", 1),
        ("roles/r/templates/t.j2", "{{ kube_image_repository|default(gpuops_plan.pins.registry_mirror) }}", 1),
        ("roles/r/tasks/main.yml", "cidr: \"{{ kube_cni_pod_cidr | default('') }}\"", 0),
        ("roles/r/tasks/main.yml", "cidr: \"{{ my_kube_pod_cidr | default('') }}\"", 0),
        ("plugins/plugin_utils/p.py", 'multi = get_var(hostvars[first], "gpuops_multi_node_training", False)', 1),
        ("plugins/plugin_utils/p.py", "chosen = variables.get('gpuops_report_dir', 'reports')", 1),
        ("plugins/plugin_utils/p.py", 'pool = get_var(hostvars, "gpuops_pool") or None', 0),
        ("plugins/plugin_utils/p.py", 'chosen = variables.get("gpuops_report_dir")', 0),
    ],
)
def test_the_scan_finds_a_default_in_each_form(path: str, text: str, expected: int) -> None:
    assert len(inline_defaults(path, text)) == expected, text


def _runs_something(play: dict) -> bool:
    text = repr(play)
    return bool(play.get("roles")) or any(word in text for word in ("_role", "import_tasks", "include_tasks"))


def test_every_play_that_runs_roles_imports_the_shared_defaults() -> None:
    plays = []
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        relative = str(path.relative_to(REPO))
        for play in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            if "hosts" in play and _runs_something(play) and relative not in PLAYS_WITHOUT_IMPORT:
                plays.append((relative, play))
    assert len(plays) >= MIN_PLAYS, f"only {len(plays)} plays found under playbooks/: the scan missed them"
    missing = [f"{path}: {play.get('name')}" for path, play in plays
               if not _imports_the_defaults(play, REPO / "playbooks")]
    assert not missing, (
        "plays without the _gpuops_vars import (pre_tasks: ansible.builtin.import_role name: "
        "gpuops.cluster._gpuops_vars, rolespec_validate: false), itself or through the plan entry point "
        "(tasks/plan.yml imports it):\n" + "\n".join(missing)
    )


def _imports_the_defaults(tasks: object, folder: Path) -> bool:
    """The play (or task list) imports _gpuops_vars statically - import_role, whose defaults are the play's from
    the start - itself or in a task file it imports (import_tasks, followed)."""
    if isinstance(tasks, dict):
        role = tasks.get("ansible.builtin.import_role")
        if isinstance(role, dict) and role.get("name") == "gpuops.cluster._gpuops_vars":
            return True
        imported = tasks.get("ansible.builtin.import_tasks")
        if isinstance(imported, str) and "{{" not in imported:
            path = folder / imported
            return _imports_the_defaults(yaml.safe_load(path.read_text(encoding="utf-8")), path.parent)
        return any(_imports_the_defaults(value, folder) for value in tasks.values())
    return isinstance(tasks, list) and any(_imports_the_defaults(item, folder) for item in tasks)


def test_the_plan_entry_point_imports_the_defaults_statically() -> None:
    """Plays that take the defaults through tasks/plan.yml rely on its import staying an import (not include_role,
    whose defaults reach only the tasks after it, and only when it runs)."""
    plan = yaml.safe_load((REPO / "playbooks" / "tasks" / "plan.yml").read_text(encoding="utf-8"))
    assert plan[0]["ansible.builtin.import_role"]["name"] == "gpuops.cluster._gpuops_vars"
    assert not _imports_the_defaults([{"ansible.builtin.include_role": {"name": "gpuops.cluster._gpuops_vars"}}],
                                     REPO / "playbooks")


def test_python_reads_the_shared_defaults_from_their_home() -> None:
    defaults = yaml.safe_load((REPO / HOME / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert platform.role_defaults() == defaults
    assert all(name.startswith("gpuops_") or name in SHARED_CLUSTER_SETTINGS for name in defaults), sorted(defaults)
    assert set(SHARED_CLUSTER_SETTINGS) <= set(defaults), "each shared cluster setting has its default in the home"
    # Unset, each variable reads as its home's default; set, as the host's value; a variable without a default there
    # (computed when unset, such as gpuops_team_size) reads as None, and a caller's own default still wins.
    assert {name: platform.get_var({}, name) for name in defaults} == defaults
    assert platform.get_var({"gpuops_platform": "compose"}, "gpuops_platform") == "compose"
    assert platform.get_var({}, "gpuops_team_size") is None
    assert platform.get_var({}, "nvidia_driver_version", "") == ""
    assert platform.platform_request({}) == {
        "platform": defaults["gpuops_platform"],
        "team_size": None,
        "gpu_count": None,
        "multi_node_training": defaults["gpuops_multi_node_training"],
    }


# A shared folder's default spelt where it is not that setting: (path, setting) -> why.
NOT_COPIES = {
    ("playbooks/tasks/node_container.yml", "docker_engine_data_root"): "the test and demo node container's anonymous "
    "volume for the dockerd inside it (nested Docker needs a non-overlay state folder), made before any inventory",
    ("roles/compose_stack/defaults/main.yml", "compose_stack_data_dir"): "compose_stack_scratch_dir's default, "
    "/var/lib/gpuops/scratch: a setting of its own (inventories/small-team sets both)",
    ("roles/compose_stack/meta/argument_specs.yml", "compose_stack_data_dir"): "the same default, in its spec",
}


def test_no_role_spells_a_shared_folder_by_its_default() -> None:
    """A folder homed here (kube_config_dir, gpu_health_textfile_dir, ...) is named by its variable everywhere else:
    a literal copy of its default keeps the old folder when the inventory moves it (compose's node-exporter read
    /var/lib/node_exporter/textfile_collector whatever gpu_health_textfile_dir said; kube_cni wrote its manifest to
    /etc/kubernetes/gpuops whatever kube_config_dir said)."""
    defaults = yaml.safe_load((REPO / HOME / "defaults" / "main.yml").read_text(encoding="utf-8"))
    folders = {name: value for name, value in defaults.items() if isinstance(value, str) and value.startswith("/")}
    assert {"kube_config_dir", "gpu_health_textfile_dir"} <= set(folders), sorted(folders)
    hits = [(str(path.relative_to(REPO)), number, line.strip(), name)
            for path in _files() if not str(path.relative_to(REPO)).startswith((HOME, "molecule/"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            for name, folder in folders.items() if re.search(re.escape(folder) + r"(?![\w-])", line)]
    copies = [f"{path}:{number}: {line} (the default of {name})" for path, number, line, name in hits
              if (path, name) not in NOT_COPIES]
    assert not copies, "a shared folder spelt by its default; name its variable instead:\n" + "\n".join(copies)
    stale = set(NOT_COPIES) - {(path, name) for path, _number, _line, name in hits}
    assert not stale, f"no such literal left: remove {sorted(stale)} from NOT_COPIES"
