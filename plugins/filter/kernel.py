# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters: kernel_headers, kernel_holds, newest_kernel (rules in plugins/plugin_utils/kernel.py).

Documentation in kernel_headers.yml, kernel_holds.yml and newest_kernel.yml next to this file.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

_rule = lazy("kernel")


def kernel_headers(installed, pkg_mgr: str = "apt") -> list[str]:
    return _rule.header_packages(installed, pkg_mgr)


def kernel_holds(installed, pkg_mgr: str = "apt") -> list[str]:
    return _rule.hold_packages(installed, pkg_mgr)


def newest_kernel(releases) -> str:
    return _rule.newest_release(releases)


class FilterModule:
    """gpuops.cluster kernel filters."""

    def filters(self) -> dict:
        return {"kernel_headers": kernel_headers, "kernel_holds": kernel_holds, "newest_kernel": newest_kernel}
