# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``groups['gpu_nodes'] | gpuops.cluster.inventory_plan(hostvars)``.

Thin: the plan lives in plugins/plugin_utils/plan.py (preflight_fleet builds the same shape from what preflight
read); documentation in inventory_plan.yml next to this file.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

plan = lazy("plan")


def inventory_plan(gpu_hosts: list, hostvars: Any, platform: Any = None) -> dict:
    try:
        return plan.inventory_plan([str(h) for h in gpu_hosts], hostvars, platform or None)
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"inventory_plan: {exc}") from exc


class FilterModule:
    """gpuops.cluster plan filter."""

    def filters(self) -> dict:
        return {"inventory_plan": inventory_plan}
