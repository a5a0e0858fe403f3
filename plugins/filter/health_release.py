# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The filter of health.yml's clear_held step: the GPUs back in service as gpu_health's release entry point names them.

Thin: the rule lives in plugins/plugin_utils/health_steps.py (release_uuids); documentation in
health_release_uuids.yml next to this one.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

health_steps = lazy("health_steps")


def health_release_uuids(gpus, validation=None, sweep=None) -> list:
    return health_steps.release_uuids(gpus if gpus == health_steps.CLEAR_ALL else list(gpus or []),
                                      validation or {}, sweep or {})


class FilterModule:
    """gpuops.cluster: the GPUs a return to service releases on the scheduled sweep."""

    def filters(self) -> dict:
        return {"health_release_uuids": health_release_uuids}
