# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The filters over the rules preflight judges too, each shared with it:

* ``groups['gpu_nodes'] | gpuops.cluster.inventory_plan(hostvars)``: the plan from the inventory alone;
* ``team_size | gpuops.cluster.choose_platform(gpu_count=N, multi_node_training=bool)``: the platform rule;
* ``gpuops_teams | gpuops.cluster.team_problems(gpuops_members, mps_context_reserve, mps_min_usable)``: everything
  wrong with the team list that stops a run, all at once (the MPS settings: the gpuops_mps_* variables, unset for
  their defaults);
* ``inputs_roles | gpuops.cluster.os_refusal(ansible_facts)``: the one refusal of the host's OS by every role of
  those named that a run uses, each by its table (its meta/main.yml platforms), as preflight judges it.

Thin: the plan lives in plugins/plugin_utils/plan.py (preflight_fleet builds the same shape from what preflight
read), the platform rule in platform.py, the team rules in team.py, the OS tables in os_support.py; documentation
in inventory_plan.yml, choose_platform.yml, team_problems.yml and os_refusal.yml next to this file.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

mps = lazy("mps")
os_support = lazy("os_support")
plan = lazy("plan")
platform_rule = lazy("platform")
team = lazy("team")

_MISSING = object()


def inventory_plan(gpu_hosts: list, hostvars: Any, platform: Any = None) -> dict:
    try:
        return plan.inventory_plan([str(h) for h in gpu_hosts], hostvars, platform or None)
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"inventory_plan: {exc}") from exc


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
        return platform_rule.choose_platform_with_reason(team_size, gpu_count, multi_node_training)[0]
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def team_problems(teams: object, members: object = None, mps_context_reserve: object = None,
                  mps_min_usable: object = None) -> list:
    try:
        rule = mps.limits(mps_context_reserve, mps_min_usable)
    except ValueError as exc:
        return [str(exc)]
    return team.team_problems(teams, members, rule)


def os_refusal(roles: list, facts: dict) -> str:
    try:
        return os_support.os_refusal([str(role) for role in roles], dict(facts))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"os_refusal: cannot read the OS tables of {list(roles)}: {exc}") from exc


class FilterModule:
    """gpuops.cluster plan, platform, team and OS filters."""

    def filters(self) -> dict:
        return {"inventory_plan": inventory_plan, "choose_platform": choose_platform, "team_problems": team_problems,
                "os_refusal": os_refusal}
