# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``dpkg_output | gpuops.cluster.driver_upgrade_plan(target=..., ...)``.

Thin: the decisions live in plugins/plugin_utils/driver_upgrade.py; documentation in driver_upgrade_plan.yml.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

driver_upgrade = lazy("driver_upgrade")


def driver_upgrade_plan(dpkg_output, target: str = "", allow_downgrade: bool = False, processes_output: str = "",
                        processes_rc=None, force: bool = False) -> dict:
    rc = None if processes_rc in (None, "") else int(processes_rc)
    processes = driver_upgrade.gpu_processes(str(processes_output or ""), rc)
    return driver_upgrade.plan(str(dpkg_output or ""), str(target), allow_downgrade, processes, force)


class FilterModule:
    """gpuops.cluster driver upgrade filters."""

    def filters(self) -> dict:
        return {"driver_upgrade_plan": driver_upgrade_plan}
