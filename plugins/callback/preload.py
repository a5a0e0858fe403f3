# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Callback gpuops.cluster.preload: import the collection's controller-side Python, and load the usual connection,
shell and become plugins, once, in ansible-playbook's own process, so that the workers it forks inherit them instead
of loading them again (docs/performance.md, "Preload")."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: preload
author:
  - gpuops.cluster maintainers (@gpuops)
version_added: "0.2.0"
type: aggregate
short_description: Loads the collection's Python and the usual connection plugins once, before the workers fork
description:
  - Ansible runs each task on each host in a worker process forked from the main process, and loads a collection's
    filters, tests, lookups and action plugins there, compiling their Python from source with no bytecode cache.
  - When it is loaded, this callback imports every module of the collection's C(plugins/plugin_utils),
    C(plugins/filter), C(plugins/test), C(plugins/lookup) and C(plugins/action) packages (those that exist) in the
    main process, so every worker finds them already imported.
  - Each worker also loads its task's connection plugin, with its shell and become plugins, and reads their
    documentation to define their options, unless the main process has done so. So the callback also loads, there,
    the connection plugins C(ssh) (a site's hosts), C(local) (tasks on the controller) and
    C(community.docker.docker) (the Molecule scenarios and the tests; when that collection is installed), the shell
    plugin C(sh) and the become plugin C(sudo). A run that uses others loads them in each worker as before.
  - A module that fails to import, or a plugin that fails to load, is named, with its error, in a warning, and the
    run goes on; a task that needs it fails, or not, exactly as it would without this callback.
  - It prints nothing else and changes no result.
requirements:
  - Enabled in C(callbacks_enabled) (C(ANSIBLE_CALLBACKS_ENABLED)); this collection's C(ansible.cfg) enables it.
notes:
  - Controller side only. The C(module_utils) that ship to hosts with modules are imported only where an action
    plugin imports them anyway.
"""

EXAMPLES = r"""
# ansible.cfg
# [defaults]
# callbacks_enabled = gpuops.cluster.preload, ansible.builtin.timer
"""

import importlib
import pkgutil

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import become_loader, connection_loader, shell_loader
from ansible.utils.display import Display

_PLUGINS = "ansible_collections.gpuops.cluster.plugins"
_PACKAGES = ("plugin_utils", "filter", "test", "lookup", "action")
# The connection, shell and become plugins a worker loads for its task, by the names the runs give them (ansible
# records a plugin's option definitions under the name it resolves that name to, and ssh and ansible.builtin.ssh
# resolve to two): ssh, the default connection, for a site's hosts; local for the tasks on the controller;
# community.docker.docker for the Molecule scenarios' and the tests' containers.
_TASK_PLUGINS = (
    (connection_loader, "ssh"),
    (connection_loader, "local"),
    (connection_loader, "community.docker.docker"),
    (shell_loader, "sh"),
    (become_loader, "sudo"),
)


def _import(name: str, display: Display):
    """The module ``name``; None for a package the collection does not have, or for a module that fails to import
    (named in a warning with its error: a worker that needs it meets the same error as it would without us)."""
    try:
        return importlib.import_module(name)
    except Exception as error:  # any error an import can raise: the run goes on
        if not (isinstance(error, ModuleNotFoundError) and error.name == name):
            display.warning(f"gpuops.cluster.preload: could not import {name}: {type(error).__name__}: {error}")
        return None


def _load(loader, name: str, display: Display) -> None:
    """Load the plugin ``name`` of ``loader``'s type, which defines its options in the config manager; nothing for a
    plugin that is not installed; a warning naming it and its error for one that fails to load (a worker that needs
    it meets the same error as it would without us)."""
    try:
        loader.get(name, class_only=True)
    except Exception as error:  # any error loading a plugin can raise: the run goes on
        display.warning(f"gpuops.cluster.preload: could not load the {loader.type} plugin {name}: "
                        f"{type(error).__name__}: {error}")


def _preload(display: Display) -> None:
    """Import every module of the packages above that exist, and load the plugins above."""
    for kind in _PACKAGES:
        package = _import(f"{_PLUGINS}.{kind}", display)
        if package is not None:
            for module in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
                _import(module.name, display)
    for loader, name in _TASK_PLUGINS:
        _load(loader, name, display)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuops.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display: Display | None = None, options: dict | None = None) -> None:
        super().__init__(display=display, options=options)
        _preload(self._display)
