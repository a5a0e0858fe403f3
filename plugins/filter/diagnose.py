# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``outputs | gpuops.cluster.diagnose_chain(platform=..., ...)``.

Thin: the links and the walk live in plugins/plugin_utils/diagnose.py; documentation in diagnose_chain.yml.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

diagnose = lazy("diagnose")


def diagnose_chain(outputs, platform: str = "compose", expected_gpus=None, node: str = "", pin: str = "",
                   sharing=None) -> dict:
    if platform == "compose":
        return diagnose.chain(outputs, platform, list(expected_gpus or []), pin=pin or "")
    count = int(expected_gpus or 0)
    replicas, mig = diagnose.node_sharing(sharing, node)
    return diagnose.chain(outputs, platform, count if mig else count * replicas, node, pin or "", mig)


class FilterModule:
    """gpuops.cluster diagnose filters."""

    def filters(self) -> dict:
        return {"diagnose_chain": diagnose_chain}
