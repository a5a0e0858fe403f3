# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters: ``groups['gpu_nodes'] | gpuops.cluster.inventory_plan(hostvars)`` and
``hostvars[inventory_hostname] | gpuops.cluster.platform_request``.

Thin: the plan lives in plugins/plugin_utils/plan.py (preflight_fleet builds the same shape from what preflight
read); documentation in inventory_plan.yml and platform_request.yml next to this file.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

plan = lazy("plan")
platform = lazy("platform")


def inventory_plan(gpu_hosts: Any, hostvars: Any, with_play: Any = None, platform: Any = None) -> dict:
    if not isinstance(gpu_hosts, list):
        raise AnsibleFilterError(f"inventory_plan: expected the list of gpu_nodes hosts, got {gpu_hosts!r}")
    try:
        with_play = None if with_play is None else list(with_play)
        return plan.inventory_plan([str(h) for h in gpu_hosts], hostvars, with_play, platform or None)
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"inventory_plan: {exc}") from exc


def platform_request(host_vars: Any) -> dict:
    if not hasattr(host_vars, "get"):
        raise AnsibleFilterError(f"platform_request: expected one host's variables, hostvars[inventory_hostname], "
                                 f"got {host_vars!r}")
    return platform.platform_request(host_vars)


class FilterModule:
    """gpuops.cluster plan filters."""

    def filters(self) -> dict:
        return {"inventory_plan": inventory_plan, "platform_request": platform_request}
