# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``outputs | gpuops.cluster.diagnose_chain(platform=..., ...)``.

Thin: the links and the walk live in plugins/plugin_utils/diagnose.py; documentation in diagnose_chain.yml.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

diagnose = lazy("diagnose")


def diagnose_chain(outputs, platform: str = "compose", expected_gpus=None, node: str = "", pin: str = "",
                   sharing=None) -> dict:
    if not isinstance(outputs, dict):
        raise AnsibleFilterError(f"diagnose_chain needs a dict of command outputs, got {type(outputs).__name__}")
    if platform == "compose":
        return diagnose.chain(outputs, platform, list(expected_gpus or []), pin=pin or "")
    if platform == "kubernetes":
        try:
            count = int(expected_gpus or 0)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"diagnose_chain: expected_gpus must be a number on kubernetes, got "
                                     f"{expected_gpus!r}") from exc
        replicas, mig = diagnose.node_sharing(sharing, node)
        return diagnose.chain(outputs, platform, count if mig else count * replicas, node, pin or "", mig)
    raise AnsibleFilterError(f"diagnose_chain: platform '{platform}' is not compose or kubernetes")


class FilterModule:
    """gpuops.cluster diagnose filters."""

    def filters(self) -> dict:
        return {"diagnose_chain": diagnose_chain}
