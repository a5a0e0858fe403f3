# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Lookup plugin: where the collection's monitoring assets are, for every role that deploys them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: monitoring_assets
author:
  - gpuops.cluster maintainers (@gpuops)
version_added: "0.2.0"
short_description: Locate the shared GPU monitoring assets (rules, dashboards, counters)
description:
  - Returns the site's one directory of GPU monitoring assets, or the files in it that match the given patterns -
    C(gpuops_monitoring_assets_dir) when the inventory (or C(-e)) sets it, else the collection's own copy (the
    data-only role C(gpuops.cluster.monitoring_assets)).
  - Roles that deploy monitoring (C(compose_stack), C(kube_monitoring)) read the assets through this lookup, so no
    role reads another role's files by a relative path, and both read the same directory.
  - Runs on the controller; works in this repository and in the installed collection alike.
options:
  _terms:
    description:
      - Glob patterns relative to the assets directory, for example V(prometheus/rules/*.yml).
      - With no pattern, the lookup returns the directory itself.
    type: list
    elements: str
    required: false
notes:
  - "Layout of an assets directory: C(prometheus/rules/*.yml), C(alertmanager/inhibit_rules.yml),
    C(dcgm-exporter/gpuops-counters.csv), C(grafana/provisioning/{datasources,dashboards}/*.yml),
    C(grafana/dashboards/*.json)."
  - A pattern that matches nothing is an error naming the directory, so a wrong directory fails before any change.
"""

EXAMPLES = r"""
- name: The directory, as compose_stack and kube_monitoring default to
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.cluster.monitoring_assets') }}"

- name: Every rule file, sorted
  ansible.builtin.debug:
    msg: "{{ query('gpuops.cluster.monitoring_assets', 'prometheus/rules/*.yml') }}"
"""

RETURN = r"""
_raw:
  description:
    - With no pattern, one element, the absolute assets directory.
    - With patterns, the absolute paths of the matching files, sorted, each pattern's matches in turn.
  type: list
  elements: path
"""

import glob
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# The data-only role that ships the assets, relative to this file (plugins/lookup/ -> roles/).
SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "roles", "monitoring_assets", "files")
REQUIRED = "prometheus/rules"


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if kwargs:  # the retired dir option among them: a play that still passes one must not get another directory
            raise AnsibleLookupError(f"monitoring_assets takes no option, got {sorted(kwargs)}; "
                                     "fix: name the directory in gpuops_monitoring_assets_dir")
        chosen = (variables or {}).get("gpuops_monitoring_assets_dir")
        base = os.path.abspath(os.path.expanduser(str(self._templar.template(chosen) if chosen else SHIPPED)))
        if not os.path.isdir(os.path.join(base, REQUIRED)):
            raise AnsibleLookupError(
                f"monitoring_assets: {base} is not a monitoring assets directory (no {REQUIRED}/). Expected the "
                "layout of the collection's monitoring_assets role; fix: point gpuops_monitoring_assets_dir at such "
                "a directory, or leave it unset"
            )
        if not terms:
            return [base]
        found = []
        for pattern in terms:
            matches = sorted(glob.glob(os.path.join(base, pattern)))
            if not matches:
                raise AnsibleLookupError(f"monitoring_assets: nothing matches {pattern!r} in {base}")
            found.extend(matches)
        return found
