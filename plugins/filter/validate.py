# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``outputs | gpuops.cluster.validate_rows(platform=..., gpu_count=..., ...)``.

Thin: the judgements live in plugins/plugin_utils/validate.py; documentation in validate_rows.yml.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

validate = lazy("validate")
diagnose = lazy("diagnose")


def validate_rows(outputs, platform: str = "compose", gpu_count: int = 0, topology=None, members=None,  # noqa: PLR0913, PLR0917
                  node: str = "", sharing=None, pcie_gen: int = 4, no_gpu_reason: str = "") -> list:
    """Keyword arguments mirror the filter's documented options (validate_rows.yml)."""
    gpu_count, pcie_gen = int(gpu_count), int(pcie_gen)
    if gpu_count == 0:
        return validate.no_gpu_rows(platform, no_gpu_reason)
    if platform == "compose":
        return validate.compose_rows(outputs, gpu_count, topology, list(members or []), pcie_gen)
    return validate.kubernetes_rows(outputs, node, gpu_count, *diagnose.node_sharing(sharing, node))


class FilterModule:
    """gpuops.cluster validate filters."""

    def filters(self) -> dict:
        return {"validate_rows": validate_rows}
