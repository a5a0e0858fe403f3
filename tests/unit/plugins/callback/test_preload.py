"""plugins/callback/preload.py: constructed in ansible-playbook's own process, it imports the collection's
controller-side Python there, and loads the usual connection, shell and become plugins (defining their options), so
the workers forked after it inherit them instead of loading them again; a module that fails to import, or a plugin
that fails to load, is named in a warning and the run goes on. And every place that configures the callbacks of a
run enables it."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.gpuops.cluster.plugins.callback import preload
from ansible_env import NO_PROFILE_TASKS, playbook_env

REPO = Path(__file__).resolve().parents[4]
PLUGINS = REPO / "plugins"
PACKAGE = "ansible_collections.gpuops.cluster.plugins"
PRELOAD = "gpuops.cluster.preload"
KINDS = ("plugin_utils", "filter", "test", "lookup", "action")
# The plugins a worker loads for its task that the callback loads, as "type name" (the names the runs give them).
TASK_PLUGINS = ["connection ssh", "connection local", "connection community.docker.docker", "shell sh",
                "become sudo"]

# In a fresh interpreter, with the collection loader set up as ansible-playbook sets it up (init_plugin_loader over
# the collection paths), before and after the callback is constructed: the collection's plugin modules in
# sys.modules, and which of TASK_PLUGINS have their options defined in the config manager (under the name a worker's
# loader resolves theirs to, as it checks before it reads a plugin's documentation).
_PROBE = """
import json, sys
from ansible import constants as C
from ansible.plugins.loader import become_loader, callback_loader, connection_loader, init_plugin_loader, shell_loader
init_plugin_loader([sys.argv[1]])
LOADERS = {"connection": connection_loader, "shell": shell_loader, "become": become_loader}
def ours():
    return sorted(name for name in sys.modules if name.startswith("ansible_collections.gpuops.cluster.plugins."))
def defined():
    found = []
    for plugin in json.loads(sys.argv[2]):
        kind, name = plugin.split()
        resolved = LOADERS[kind].find_plugin_with_context(name).plugin_resolved_name
        if resolved and C.config.has_configuration_definition(kind, resolved):
            found.append(plugin)
    return found
before = {"modules": ours(), "defined": defined()}
assert callback_loader.get("gpuops.cluster.preload") is not None, "the callback was not found"
print(json.dumps({"before": before["modules"], "after": ours(), "defined_before": before["defined"],
                  "defined_after": defined()}))
"""


def _probe(collections: Path, env: dict[str, str]) -> tuple[dict, str]:
    run = subprocess.run([sys.executable, "-c", _PROBE, str(collections), json.dumps(TASK_PLUGINS)],
                         capture_output=True, text=True,
                         check=False, cwd=collections, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), run.stderr


def test_constructing_the_callback_imports_every_controller_side_module():
    expected = {f"{PACKAGE}.{kind}.{path.stem}" for kind in KINDS for path in (PLUGINS / kind).glob("*.py")}
    some = {f"{PACKAGE}.plugin_utils.{name}" for name in ("plan", "platform", "lazy_import")}
    assert some <= expected, f"plugins/plugin_utils/ not found from {PLUGINS}"
    loaded, _stderr = _probe(REPO / "collections", playbook_env(REPO))
    assert sorted(expected & set(loaded["before"])) == []
    assert sorted(expected - set(loaded["after"])) == []


def test_constructing_the_callback_defines_the_options_of_the_usual_connection_shell_and_become_plugins():
    loaded, stderr = _probe(REPO / "collections", playbook_env(REPO))
    assert loaded["defined_before"] == []
    assert loaded["defined_after"] == TASK_PLUGINS
    assert "gpuops.cluster.preload" not in stderr


def _collection(root: Path, files: dict[str, str]) -> Path:
    """A collection gpuops.cluster under root holding this preload callback and ``files`` (path under root's
    ansible_collections/gpuops/cluster, or under root when it starts with ansible_collections/: text)."""
    tree = root / "ansible_collections" / "gpuops" / "cluster"
    (tree / "plugins" / "callback").mkdir(parents=True)
    shutil.copy(preload.__file__, tree / "plugins" / "callback" / "preload.py")
    for rel, text in files.items():
        path = root / rel if rel.startswith("ansible_collections/") else tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_module_that_fails_to_import_is_named_in_a_warning_and_the_rest_load(tmp_path):
    root = _collection(tmp_path, {
        "plugins/plugin_utils/fine.py": "VALUE = 1\n",
        "plugins/plugin_utils/needs_missing.py": "import gpuops_no_such_dependency\n",
        "plugins/filter/broken.py": "def broken(:\n",
        "plugins/filter/raises.py": "raise RuntimeError('refused at import')\n",
    })
    env = playbook_env(REPO, extra={"ANSIBLE_COLLECTIONS_PATH": str(root)})
    loaded, stderr = _probe(root, env)
    assert f"{PACKAGE}.plugin_utils.fine" in loaded["after"]
    text = " ".join(stderr.split())  # the display wraps long warnings
    warnings = re.findall(r"could not import (\S+):", text)
    assert sorted(warnings) == [f"{PACKAGE}.filter.broken", f"{PACKAGE}.filter.raises",
                                f"{PACKAGE}.plugin_utils.needs_missing"], stderr
    assert "ModuleNotFoundError: No module named 'gpuops_no_such_dependency'" in text
    assert "SyntaxError" in text
    assert "RuntimeError: refused at import" in text


def test_a_plugin_that_fails_to_load_is_named_in_a_warning_and_the_rest_load(tmp_path):
    # this community.docker, first on the collection path, shadows the one the ansible package bundles
    root = _collection(tmp_path, {
        "ansible_collections/community/docker/plugins/connection/docker.py": "raise RuntimeError('refused at load')\n",
    })
    env = playbook_env(REPO, extra={"ANSIBLE_COLLECTIONS_PATH": str(root)})
    loaded, stderr = _probe(root, env)
    assert loaded["defined_after"] == [plugin for plugin in TASK_PLUGINS if "docker" not in plugin]
    text = " ".join(stderr.split())  # the display wraps long warnings
    assert re.findall(r"could not (?:import|load) .*?:", text) == [
        "could not load the connection plugin community.docker.docker:"], stderr
    assert "RuntimeError: refused at load" in text


def test_a_plugin_that_is_not_installed_is_left_out_without_a_warning(tmp_path):
    root = _collection(tmp_path, {})
    # only this collection: not the ones the ansible package bundles, community.docker among them
    env = playbook_env(REPO, extra={"ANSIBLE_COLLECTIONS_PATH": str(root),
                                    "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"})
    loaded, stderr = _probe(root, env)
    assert loaded["defined_after"] == [plugin for plugin in TASK_PLUGINS if "docker" not in plugin]
    assert "gpuops.cluster.preload" not in stderr


# ---------------------------------------------------------------------------- every run configuration enables it

SETTING = re.compile(r"callbacks_enabled\W*[:=]", re.IGNORECASE)


def _callbacks(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _settings_without_preload(text: str) -> list[str]:
    """The lines of ``text`` that set the enabled callbacks and leave this one out."""
    return [line.strip() for line in text.splitlines() if SETTING.search(line) and PRELOAD not in line]


def test_ansible_cfg_enables_it():
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert PRELOAD in _callbacks(config["defaults"]["callbacks_enabled"])


def test_the_molecule_base_config_enables_it():
    config = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    assert PRELOAD in _callbacks(config["provisioner"]["config_options"]["defaults"]["callbacks_enabled"])


def test_the_tests_callbacks_without_profile_tasks_keep_it():
    assert PRELOAD in _callbacks(NO_PROFILE_TASKS["ANSIBLE_CALLBACKS_ENABLED"])


def _tracked() -> list[Path]:
    """The checkout's files that may set a run's callbacks: code and configuration (not docs, not this file)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    paths = [REPO / rel for rel in listed.split("\0") if Path(rel).suffix in {".py", ".yml", ".yaml", ".cfg", ".sh"}]
    return [path for path in paths if path.is_file() and path != Path(__file__).resolve()]


def test_no_other_setting_of_the_callbacks_leaves_it_out():
    tracked = _tracked()
    assert {REPO / "ansible.cfg", REPO / "tests" / "ansible_env.py"} <= set(tracked), "git ls-files found too little"
    found = {str(path.relative_to(REPO)): lines for path in tracked
             if (lines := _settings_without_preload(path.read_text(encoding="utf-8", errors="replace")))}
    assert found == {}, f"these set the enabled callbacks without {PRELOAD}: {found}"


def test_the_setting_check_finds_a_setting_that_leaves_it_out():
    samples = ("callbacks_enabled = ansible.builtin.timer\n"
               'extra={"ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.timer"}\n'
               "      callbacks_enabled: ansible.posix.profile_tasks\n"
               "the callbacks_enabled setting, in prose\n")
    assert _settings_without_preload(samples) == [
        "callbacks_enabled = ansible.builtin.timer",
        'extra={"ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.timer"}',
        "callbacks_enabled: ansible.posix.profile_tasks",
    ]
    assert _settings_without_preload(f"callbacks_enabled = {PRELOAD}, ansible.builtin.timer\n") == []
