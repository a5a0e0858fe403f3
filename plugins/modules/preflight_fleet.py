#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_fleet
short_description: Decide one platform for the whole fleet, write every host's preflight report, refuse a bad plan
version_added: 0.2.0
description:
  - An action plugin, run once per run (C(run_once) C(true)) after M(gpuops.cluster.preflight) ran on every host of
    the play, its result registered as C(__preflight_host) (as the preflight role does).
    Everything happens in-process on the controller; no module runs anywhere.
  - "The platform is the fleet's: where C(gpuops_gpu_count) is unset, the GPUs are the sum of those detected
    across C(gpu_nodes) (hosts outside this run count from their cached facts; with none, the decision is refused).
    Hosts whose plans lead to different platforms are refused, named by platform: one site gets one platform."
  - A platform without a play (one C(playbooks/vars/run_roles.yml) lists no roles for, the file the plays read) is
    refused, so C(site.yml) never ends with only a driver installed.
  - Writes C(<report_dir>/<UTC run id>/<host>.json) and C(<host>.md) for every host, and C(fleet.json), once.
  - Fails, naming every refused host and its failed checks, when any check failed on any host.
  - Returns the plan (C(gpuops_plan), documented in docs/plan.md), which the preflight role sets on every host of the
    play, and writes it as C(plan.json) in the run's report folder and in O(report_dir) itself (the last plan). The
    plan holds the fleet's platform decision (C(platform)) and this run's report folder (C(report_dir)).
options:
  report_dir:
    description: Controller directory for the reports; each run writes a timestamped subdirectory.
    type: path
    required: true
attributes:
  action:
    support: full
    description: Runs in the action plugin, on the controller.
  check_mode:
    support: full
    description: Judges and writes the controller-side reports in check mode too; changes no host.
  diff_mode:
    support: none
    description: Nothing to diff.
  idempotent:
    support: full
    description: Never changes a host; each run writes a new report directory on the controller.
author:
  - gpuops.cluster maintainers (@gpuops)
seealso:
  - module: gpuops.cluster.preflight
"""

EXAMPLES = r"""
- name: Judge every host (one remote call each)
  gpuops.cluster.preflight:
    team_size: 4
  register: __preflight_host

- name: One platform for the fleet, the reports, and the refusal
  gpuops.cluster.preflight_fleet:
    report_dir: "{{ playbook_dir }}/../reports"
  run_once: true
  register: __preflight_fleet
"""

RETURN = r"""
summary:
  description: Every host's platform, GPUs and checks, one line each, with its report's path.
  returned: always
  type: str
plan:
  description: The plan of this run, C(gpuops_plan); its keys are documented in docs/plan.md.
  returned: always
  type: dict
plan_files:
  description: The plan.json files written, the run's and the last plan in O(report_dir).
  returned: always
  type: list
  elements: str
  sample: [/srv/gpuops/reports/20261201T070000Z/plan.json, /srv/gpuops/reports/plan.json]
msg:
  description: On failure, one line per refused host, C(preflight refused <host>) and its failed checks.
  returned: always
  type: str
"""
