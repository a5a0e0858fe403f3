# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``role_path | gpuops.cluster.os_refusal(ansible_facts)``.

Thin: the role's OS table is its meta/main.yml platforms, read and judged by plugins/plugin_utils/os_support.py, the
functions preflight judges the same tables with; documentation in os_refusal.yml next to this file.
"""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

os_support = lazy("os_support")


def os_refusal(role_path: str, facts: dict) -> str:
    try:
        supported = os_support.role_supported(role_path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"os_refusal: cannot read the OS table of {role_path}: {exc}") from exc
    return os_support.os_refusal(Path(role_path).name, supported, dict(facts))


class FilterModule:
    """gpuops.cluster OS support filter."""

    def filters(self) -> dict:
        return {"os_refusal": os_refusal}
