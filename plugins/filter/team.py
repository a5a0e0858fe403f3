# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filter over the team list (gpuops_teams, gpuops_members):
``gpuops_teams | gpuops.cluster.team_problems(gpuops_members, mps_context_reserve, mps_min_usable)``: everything
that stops a run, all at once (the MPS settings: the gpuops_mps_* variables, unset for their defaults).

Thin: the rules live in plugins/plugin_utils/team.py; documentation in team_problems.yml next to this one.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

mps = lazy("mps")
team = lazy("team")


def team_problems(teams: object, members: object = None, mps_context_reserve: object = None,
                  mps_min_usable: object = None) -> list:
    try:
        rule = mps.limits(mps_context_reserve, mps_min_usable)
    except ValueError as exc:
        return [str(exc)]
    return team.team_problems(teams, members, rule)


class FilterModule:
    """gpuops.cluster team filter."""

    def filters(self) -> dict:
        return {"team_problems": team_problems}
