# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Action gpuops.cluster.preflight_fleet, run once per run: the platform for the whole fleet, the plan
(``gpuops_plan``, plugin_utils/plan.py), every host's report (plugin_utils/preflight_report.py) and the refusal,
in-process on the controller. Documented in plugins/modules/preflight_fleet.py."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.template import Templar
from ansible_collections.gpuops.cluster.plugins.plugin_utils import os_support, preflight
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import build_plan, with_out_of_service
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import ReadOnce, decide_fleet
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight_report import (
    add_sections,
    summary_line,
    write_plan,
    write_reports,
)

ARGUMENT_SPEC = {"report_dir": {"type": "path", "required": True}}
# What the preflight role registers each host's gpuops.cluster.preflight result as (roles/preflight/tasks/gather.yml).
RESULT_VAR = "__preflight_host"


def _no_play(decision: dict, served: list[str]) -> dict:
    reason = (
        f"the fleet's platform is {decision['platform']} ({decision['reason']}), but no play applies "
        f"{decision['platform']}: plays exist for {', '.join(served) or 'no platform'} (playbooks/<platform>.yml, "
        "imported by playbooks/site.yml). site.yml would stop after the host layer with no platform. Fix: set "
        f"gpuops_platform to {' or '.join(served) or 'a platform with a play'} to choose one that has a play, "
        "or use a release of gpuops.cluster that has it"
    )
    return {**decision, "ok": False, "reason": reason}


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        # Every host's variables are read by several steps below (the plan, the pools, the report sections): once.
        # Its facts and its preflight result are module output, read as they are (not walked by a templar).
        hostvars = ReadOnce(task_vars["hostvars"], lambda variables: Templar(loader=self._loader, variables=variables),
                            data=("ansible_facts", RESULT_VAR))
        hosts = list(task_vars.get("ansible_play_hosts") or [])
        judged = {}
        for host in hosts:
            registered = hostvars[host].get(RESULT_VAR) if host in hostvars else None
            if not isinstance(registered, dict) or "preflight" not in registered:
                raise AnsibleActionFail(
                    f"{host} has no preflight result in {RESULT_VAR}: run gpuops.cluster.preflight on every "
                    f"host first (register: {RESULT_VAR}), then this task with run_once: true"
                )
            judged[host] = registered
        detected = {}  # the GPUs each gpu_nodes host's facts found: this run's preflight's, else the cached ones
        for host in [*task_vars.get("groups", {}).get("gpu_nodes", []), *hosts]:
            facts = judged[host]["ansible_facts"] if host in judged else (
                hostvars[host].get("ansible_facts", {}) if host in hostvars else {})
            count = (facts.get("gpu") or {}).get("count")
            detected[host] = None if count is None else int(count)
        fleet = decide_fleet({h: r["preflight"]["plan"] for h, r in judged.items()}, detected)
        served = os_support.platforms_with_play()
        if fleet["ok"] and fleet["platform"] not in served:
            fleet = _no_play(fleet, served)
            fleet["hosts"] = {h: _no_play(d, served) for h, d in fleet["hosts"].items()}

        now = datetime.now(timezone.utc)
        run_dir = os.path.join(args["report_dir"], now.strftime("%Y%m%dT%H%M%SZ"))
        # One record per host, read by the plan, then given the host's verdict for the reports (preflight_report).
        records = {h: {"host": h, "gpu": r["ansible_facts"].get("gpu") or {}, "plan": r["preflight"]["plan"],
                       "host_facts": r["ansible_facts"].get("gpu_host"), "result": r["preflight"]}
                   for h, r in judged.items()}
        plan = build_plan(fleet, records, hostvars, now.isoformat(timespec="seconds"), run_dir)
        # GPUs health.yml took out of service (<report_dir>/health/state.json): no member may be given one.
        plan = with_out_of_service(plan, args["report_dir"])
        for host, record in records.items():
            judged_here, part = record["result"], plan["hosts"][host]
            # The verdict: the host's checks, then the rules judged on the plan, then the fleet's platform (finish).
            later = (
                preflight.gpu_health_assignment(judged_here["plan"].get("gpu_assignments"), part["out_of_service"],
                                                host),
                preflight.gpu_sharing(plan.get("gpu_sharing"), host),
                preflight.workspace_sizing(part.get("workspaces")),
            )
            result = {k: judged_here.get(k) for k in ("compat", "driver_pin", "driver_judged", "os")}
            result["checks"] = [*judged_here["checks"], *(check for check in later if check)]
            record.update(result=preflight.finish(result, fleet["hosts"][host]), planned=part,
                          fleet={k: fleet.get(k) for k in ("platform", "source", "reason", "gpu_count")})
            part["ok"] = record["result"]["ok"]
            add_sections(record, hostvars[host])
        written = write_reports(run_dir, records, fleet)
        # The run's plan, and the last plan in the report folder itself (what day-2 playbooks read).
        plan_files = write_plan(plan, run_dir, args["report_dir"])

        summary = [f"fleet: platform {fleet.get('platform')} ({fleet.get('source')}): {fleet.get('reason')}"]
        summary += [summary_line(host, record, written[host]) for host, record in records.items()]
        # A rule the inventory turned into a warning (status warn) is an Ansible warning too.
        warnings = [f"preflight: {check['msg']}" for record in records.values()
                    for check in record["result"]["checks"] if check["status"] == "warn"]
        refused = [
            f"preflight refused {host}: "
            + " || ".join(c["msg"] for c in record["result"]["checks"] if c["ok"] is False)
            + f" (report: {written[host]})"
            for host, record in records.items()
            if not record["result"]["ok"]
        ]
        result.update(changed=False, summary="\n".join(summary), plan=plan, plan_files=plan_files)
        if warnings:
            result["warnings"] = warnings
        if refused:
            result.update(failed=True, msg="\n".join(refused))
        else:
            result["msg"] = (
                f"preflight passed on {len(records)} host(s): platform {fleet['platform']}; reports: {run_dir}"
            )
        return result
