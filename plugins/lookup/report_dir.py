# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Lookup plugin: the controller folder that holds every report (and the last plan.json)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: report_dir
author:
  - gpuops.cluster maintainers (@gpuops)
version_added: "0.2.0"
short_description: The report folder on the controller (gpuops_report_dir, else reports/ beside the playbooks)
description:
  - Returns C(gpuops_report_dir) when the inventory (or C(-e)) sets it, else the C(reports) folder beside the
    playbook's folder (C(<playbook_dir>/../reports), resolved), the one default of every reader and writer of
    reports - preflight's reports and C(plan.json), the plan that a later play or day-2 playbook reads back, and
    the day-2 reports in its C(validate/), C(burnin/), C(diagnose/) and C(health/) folders.
  - Takes no options; it reads the variables C(gpuops_report_dir) (templated, so V({{ inventory_dir }}/reports)
    works) and C(playbook_dir).
options:
  _terms:
    description: None for the folder; V(health_state) for the file in it where health.yml keeps its state and
      preflight's plan reads the GPUs out of service (C(health/state.json)).
    type: list
    elements: str
notes:
  - Needs C(playbook_dir) when C(gpuops_report_dir) is unset, so it is for plays run by C(ansible-playbook) (or
    C(gpuops-run)).
"""

EXAMPLES = r"""
- name: Where the reports go
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.cluster.report_dir') }}"
"""

RETURN = r"""
_raw:
  description: One element, the absolute report folder (or the health state file in it).
  type: list
  elements: path
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.cluster.plugins.plugin_utils.health_bounds import STATE_FILE


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if list(terms) not in ([], ["health_state"]):
            raise AnsibleLookupError(f"report_dir: unknown term(s) {list(terms)!r}; expected none, or health_state")
        variables = variables or {}
        chosen = self._templar.template(variables.get("gpuops_report_dir"))
        playbook_dir = variables.get("playbook_dir")
        if chosen:
            folder = os.path.abspath(os.path.expanduser(str(chosen)))
        elif playbook_dir:
            folder = os.path.realpath(os.path.join(str(playbook_dir), "..", "reports"))
        else:
            raise AnsibleLookupError(
                "report_dir: no gpuops_report_dir and no playbook_dir (not run from a playbook); "
                "fix: set gpuops_report_dir to the report folder")
        return [os.path.join(folder, STATE_FILE) if terms else folder]
