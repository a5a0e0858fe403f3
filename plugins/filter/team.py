# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters over the team list (gpuops_teams, gpuops_members):

* ``gpuops_teams | gpuops.cluster.team_problems(gpuops_members)``: everything that stops a run, all at once;
* ``gpuops_teams | gpuops.cluster.team_resolved(gpuops_members)``: teams with namespace, group and members filled in.

Thin: the rules live in plugins/plugin_utils/team.py; documentation in the .yml files next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

team = lazy("team")


def team_problems(teams: object, members: object = None) -> list:
    return team.team_problems(teams, members)


def team_resolved(teams: object, members: object = None) -> list:
    problems = team.team_problems(teams, members)
    if problems:
        raise AnsibleFilterError("team_resolved: " + "; ".join(problems))
    return team.resolve_teams(list(teams), list(members))  # type: ignore[call-overload]


class FilterModule:
    """gpuops.cluster team filters."""

    def filters(self) -> dict:
        return {"team_problems": team_problems, "team_resolved": team_resolved}
