# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter: ``reports | gpuops.cluster.fleet_report_html(generated=...)``.

Thin: the page is rendered by plugins/plugin_utils/fleet_report.py (controller-side); documentation in
fleet_report_html.yml next to this file.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

fleet_report = lazy("fleet_report")


def fleet_report_html(reports, generated: str = "", title: str = "gpuops.cluster fleet report", burnin=None) -> str:
    return fleet_report.render_fleet_report(reports, str(generated), str(title), burnin)


class FilterModule:
    """gpuops.cluster report filters."""

    def filters(self) -> dict:
        return {"fleet_report_html": fleet_report_html}
