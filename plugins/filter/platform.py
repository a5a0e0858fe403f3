# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``team_size | gpuops.cluster.choose_platform(gpu_count=N, multi_node_training=bool)``.

Thin: the rule lives in plugins/plugin_utils/platform.py (shared with preflight); documentation in
choose_platform.yml next to this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

platform = lazy("platform")

_MISSING = object()


def choose_platform(team_size: object, gpu_count: object = _MISSING, multi_node_training: object = _MISSING) -> str:
    missing = [
        name
        for name, value in (("gpu_count", gpu_count), ("multi_node_training", multi_node_training))
        if value is _MISSING
    ]
    if missing:
        raise AnsibleFilterError(
            f"choose_platform needs {' and '.join(missing)}: "
            "team_size | gpuops.cluster.choose_platform(gpu_count=8, multi_node_training=false)"
        )
    try:
        return platform.choose_platform_with_reason(team_size, gpu_count, multi_node_training)[0]
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """gpuops.cluster platform filters."""

    def filters(self) -> dict:
        return {"choose_platform": choose_platform}
