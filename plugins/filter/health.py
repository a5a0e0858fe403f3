# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters of playbooks/health.yml: settings check, plan, steps, step results, the record (audit, state), GPU pods.

Thin: the decisions live in plugins/plugin_utils/health.py and health_steps.py; documentation in the
health_*.yml files next to this one.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

health = lazy("health")
health_bounds = lazy("health_bounds")
health_return = lazy("health_return")
health_steps = lazy("health_steps")


def _count(value):
    return int(value) if isinstance(value, str) and value.strip().lstrip("-").isdigit() else value


def _fraction(value):
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def health_problems(max_unavailable, overrides=None, apply=False, plan_source=None, bounds=None,
                    return_thresholds=None, dcgm_level=None) -> list:
    validation = health_return.settings_problems({} if return_thresholds is None else return_thresholds)
    return health.settings_problems(_count(max_unavailable), {} if overrides is None else overrides,
                                    boolean(apply), plan_source, _count(dcgm_level)) + health_bounds.settings_problems(
        _fraction(bounds["breaker_fraction"]), bounds["breaker_window"],
        _count(bounds["escalate_after"]), bounds["escalate_window"]) + validation


def health_plan(nodes, *, max_unavailable, platform, state=None, overrides=None, release=False, bounds=None,
                members=None) -> dict:
    bounds = dict(bounds or {})
    for key, read in (("breaker_window", health_bounds.seconds), ("escalate_window", health_bounds.seconds),
                      ("breaker_fraction", _fraction), ("escalate_after", _count), ("breaker_reset", boolean)):
        if key in bounds:
            bounds[key] = read(bounds[key])
    bounds["remediation"] = {h: boolean(node.get("remediation", True)) for h, node in nodes.items()}
    if bounds.get("nodes") is not None:  # kubectl get nodes -o json
        bounds["nodes"] = health_bounds.node_facts(bounds["nodes"])
    sweeps = {host: node.get("sweep") or {"read_ok": False} for host, node in nodes.items()}
    plan = health.build_plan(sweeps, state or {}, int(_count(max_unavailable)), overrides or {},
                             boolean(release), bounds)
    for host, hplan in plan["hosts"].items():
        node = nodes[host]  # its own settings (sweep.yml); a host with no record was not swept: no steps
        settings = {**node, "reboot": boolean(node.get("reboot", False))}
        hplan["steps"] = [] if hplan["status"] in health_steps.WAITING else health_steps.host_steps(
            host, hplan, platform, members or {}, settings)
        hplan["swept"] = node.get("from")
    return plan


def health_record(state, host: str | None = "", host_plan=None, done=None, cursor=None, now: str = "",
                  release=False, breaker=None) -> dict:
    host_plan, done = host_plan or {}, done or []
    new = health_steps.next_state(state or {}, host, host_plan, done, cursor, now, boolean(release), breaker)
    lines = health_steps.audit_records(host, done, host_plan, now)
    return {"lines": lines, "state": new, "differs": new != (state or {})}


def health_gpu_pods(pods, node: str, timeout: int) -> list:
    return health_steps.gpu_pods(pods or {}, node, int(timeout))


def health_fleet_entry(item, state=None, nodes=None) -> dict:
    host = str(item.get("key"))
    sweep = ((nodes or {}).get(host) or {}).get("sweep")
    return health_steps.fleet_entry(host, item.get("value") or {}, state or {}, sweep or {})


def health_sweep_record(read, mode, max_age, dcgm_level=None, expected_gpus=None, replay=False, path="") -> dict:
    settings = {"mode": mode, "max_age": _count(max_age), "dcgm_level": _count(dcgm_level),
                "expected_gpus": _count(expected_gpus), "replay": boolean(replay), "path": path}
    return health.sweep_record(read or {}, settings)


def health_step_result(step, runs=None, check_mode=False, *, dcgm_level, thresholds=None) -> dict:
    return health_steps.step_result(step, runs or {}, check_mode, _count(dcgm_level), thresholds or {})


class FilterModule:
    """gpuops.cluster GPU health filters."""

    def filters(self) -> dict:
        return {
            "health_problems": health_problems,
            "health_plan": health_plan,
            "health_record": health_record,
            "health_gpu_pods": health_gpu_pods,
            "health_fleet_entry": health_fleet_entry,
            "health_step_result": health_step_result,
            "health_sweep_record": health_sweep_record,
        }
