# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of the growth path (playbooks/grow.yml, Compose site -> Kubernetes platform):

* ``config | gpuops.cluster.grow_plan``: the plan (teams, datasets, workspaces, MLflow, hosts) and its refusals;
* ``plan | gpuops.cluster.grow_plan_markdown``: plan.md, for review;
* ``created | gpuops.cluster.grow_plan_stale(sources)``: refusals when the plan is older than its sources.

Thin: the logic lives in plugins/plugin_utils/grow.py; documentation in the .yml files next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

grow = lazy("grow")


def grow_plan(config: dict) -> dict:
    try:
        return grow.plan(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"grow_plan: {exc!r}") from exc


def grow_plan_markdown(plan: dict) -> str:
    return grow.markdown(plan)


def grow_plan_stale(created: object, sources: dict | None = None) -> list:
    return grow.stale_problems(created, sources)


class FilterModule:
    """gpuops.cluster growth-path filters."""

    def filters(self) -> dict:
        return {"grow_plan": grow_plan, "grow_plan_markdown": grow_plan_markdown, "grow_plan_stale": grow_plan_stale}
