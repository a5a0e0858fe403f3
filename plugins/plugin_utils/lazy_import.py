# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""plugin_utils modules for the filter files, imported on first use.

Ansible finds a collection's filter by importing the collection's filter files in name order until one of them
defines it, in every forked worker (each host of each task), and compiles collection code from source with no
bytecode cache. A filter file that imported its plugin_utils modules when loaded therefore made every lookup of a
filter in a later file pay for all of them: preflight's one per-host task compiled burnin's, health's and kube's
rules (and imported ``cryptography``) on every host. The filter files hold these proxies instead, so loading a
filter file costs its own few lines and a module is imported only by a filter that uses it
(docs/performance.md, "Filter lookup").
"""

from __future__ import annotations

import importlib
from typing import Any

_PACKAGE = "ansible_collections.gpuops.cluster.plugins.plugin_utils"


class LazyModule:
    """``plugin_utils.<name>``, imported when an attribute is first read (then from ``sys.modules``)."""

    def __init__(self, name: str) -> None:
        self.__dict__["_module_name"] = f"{_PACKAGE}.{name}"

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__dict__["_module_name"]), attr)

    def __repr__(self) -> str:
        return f"<lazy {self.__dict__['_module_name']}>"


lazy = LazyModule  # lazy("<name>"): the proxy of plugin_utils.<name>
