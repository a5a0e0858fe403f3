# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU health: a host's plan (plugin_utils/health.py) -> the steps that carry it out, per platform; the kubectl
argv and objects; the controller's health state after a run; the audit records.

Pure functions, controller-side. The role health runs each step by its ``kind`` (roles/health/tasks/step.yml); every
kubectl call is rendered here as an argv, so the tests check exactly what runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics import CLEAR_ALL  # release: every GPU
from ansible_collections.gpuops.cluster.plugins.plugin_utils.health_bounds import CORDONED_BY, CORDONED_BY_US
from ansible_collections.gpuops.cluster.plugins.plugin_utils.health_return import bench_runs, validation

TAINT_KEY = "gpuops.io/unhealthy"
LABEL_KEY = "gpuops.io/health"
STATE_SCHEMA = 2  # 2 adds remediations, service_required, cordoned_by, stopped_containers, breaker; 1 reads as 2
REMEDIATIONS_KEPT = 100  # per host, newest last; far more than any escalation window needs
WAITING = ("deferred", "unreadable")  # planned again next run: no step now, not even a notify
HELD = (*WAITING, "held", "opted_out", "service_required")  # planned, not acted on: state unchanged
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """A Kubernetes label (or taint) value: at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric."""
    value = _LABEL_VALUE.sub("-", str(text)).strip("-._")[:63].strip("-._")
    return value or "unknown"


def taint(reason: str) -> dict:
    """The taint object put on a node out of service."""
    return {"key": TAINT_KEY, "value": label_value(reason), "effect": "NoSchedule"}


def kubectl(verb: str, node: str, reason: str = "", timeout: int = 600) -> list[str]:
    """The kubectl argv for one node-level call: cordon, uncordon, drain, taint, untaint, label, unlabel, mark (the
    collection's cordon, gpuops.io/cordoned-by), unmark."""
    t = taint(reason)
    argv = {
        "cordon": ["kubectl", "cordon", node],
        "uncordon": ["kubectl", "uncordon", node],
        "drain": ["kubectl", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={timeout}s"],
        "taint": ["kubectl", "taint", "nodes", node, f"{t['key']}={t['value']}:{t['effect']}", "--overwrite"],
        "untaint": ["kubectl", "taint", "nodes", node, f"{TAINT_KEY}:NoSchedule-"],
        "label": ["kubectl", "label", "nodes", node, f"{LABEL_KEY}={label_value(reason)}", "--overwrite"],
        "unlabel": ["kubectl", "label", "nodes", node, f"{LABEL_KEY}-"],
        "mark": ["kubectl", "annotate", "nodes", node, f"{CORDONED_BY}={CORDONED_BY_US}", "--overwrite"],
        "unmark": ["kubectl", "annotate", "nodes", node, f"{CORDONED_BY}-"],
    }
    return argv[verb]


def _kubectl_steps(host: str, *verbs: str) -> list[dict]:
    return [{"kind": "kubectl", "argv": kubectl(verb, host)} for verb in verbs]


def gpu_pods(pods: dict, node: str, timeout: int = 600) -> list[dict]:
    """The pods on ``node`` that hold GPUs (nvidia.com/gpu in a container's limits or requests) and still run, from
    ``kubectl get pods -A --field-selector spec.nodeName=<node> -o json``, each with the argv that deletes it. The
    kubelet does not say which GPU a pod holds through the API, so every GPU pod on the node is drained: the reset
    must find no process on the GPU."""
    found = []
    for pod in (pods or {}).get("items") or []:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if spec.get("nodeName") != node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        resources = [c.get("resources") or {} for c in spec.get("containers") or []]
        if any("nvidia.com/gpu" in (r.get("limits") or {}) or "nvidia.com/gpu" in (r.get("requests") or {})
               for r in resources):
            namespace, name = meta.get("namespace", "default"), meta.get("name")
            found.append({"namespace": namespace, "name": name, "argv": [
                "kubectl", "delete", "pod", "-n", namespace, name, "--wait=true", f"--timeout={timeout}s"]})
    return found


def holders(members: dict, gpus: list[str]) -> list[str]:
    """The members whose workspace holds one of ``gpus`` (the plan's team.members: name -> {team, gpus})."""
    wanted = {str(g) for g in gpus}
    return sorted(name for name, member in members.items() if wanted & {str(g) for g in member["gpus"]})


def host_steps(host: str, hplan: dict, platform: str, members: dict, settings: dict) -> list[dict]:
    """The steps that carry out one host's plan on ``platform`` (compose | kubernetes). ``settings``: the host's
    health_reboot (bool), health_timeout (s) and health_node_report_dir, as ``reboot``, ``timeout``, ``report_dir``."""
    action, kube = hplan.get("action", "none"), platform == "kubernetes"
    out = sorted(hplan.get("gpus_out") or {}, key=int)
    steps = []
    notify = [i for i in hplan.get("items") or [] if i.get("new") and i["action"] in ("notify_owner", "review")]
    for item in notify:
        who = holders(members, [str(item["gpu"])]) if item["gpu"] is not None else []
        to = ("owner(s) " + ", ".join(who)) if item["action"] == "notify_owner" and who else "the operator"
        steps.append({"kind": "notify", "gpu": item["gpu"], "event": item["event"], "action": item["action"],
                      "message": f"{host} GPU {item['gpu']}: {item['event']}: {item['why']} (to {to})"})
    if hplan.get("status") != "act" or action in ("none", "notify_owner", "review"):
        return steps + _give_back(host, hplan, kube, members)
    ours = kube and not hplan.get("operator_cordon")
    if ours:
        steps += _kubectl_steps(host, "cordon", "mark")
    elif kube:
        steps.append({"kind": "notify", "message": f"{host} was cordoned by someone else (no {CORDONED_BY}="
                      f"{CORDONED_BY_US}): it stays cordoned; health never uncordons it"})
    whole_node = action in ("reboot", "restart_fm")
    stop = holders(members, out) if not whole_node else sorted(members)
    if not kube and stop:
        steps.append({"kind": "stop_workspaces", "members": stop})
    if out:
        steps.append({"kind": "mark_out", "gpus": {g: hplan["gpus_out"][g] for g in out},
                      "pending": "support" if action == "quarantine" else action})
    if action == "quarantine":
        if kube:  # the taint's value: the event of the first new item that asks for a quarantine
            first = next((i for i in hplan["items"] if i.get("new") and i["action"] == action), {"event": action})
            reason = label_value(first["event"])
            steps += [{"kind": "kubectl", "argv": kubectl("taint", host, reason), "object": taint(reason)},
                      {"kind": "kubectl", "argv": kubectl("label", host, "quarantined")}]
        dest = f"{settings['report_dir']}/nvidia-bug-report"
        script = 'mkdir -p "$(dirname "$1")" && nvidia-bug-report.sh --output-file "$1-$(date -u +%Y%m%dT%H%M%SZ)"'
        steps.append({"kind": "bug_report", "dest": dest, "argv": ["sh", "-c", script, "sh", dest]})
        return steps
    if kube:
        timeout = int(settings["timeout"])
        steps.append({"kind": "kubectl", "argv": kubectl("drain", host, timeout=timeout)} if whole_node else
                     {"kind": "drain_gpu_pods", "timeout": timeout})
    if action == "reboot":
        steps += _reboot(host, hplan, settings)
    elif action == "restart_fm":
        steps.append({"kind": "command", "argv": ["systemctl", "restart", "nvidia-fabricmanager"]})
    else:
        for gpu in out:  # a reset_gpu item takes its GPU out (one that names none: every GPU the sweep read)
            reset = ["nvidia-smi", "-r", "-i", str(gpu)]
            idle = ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", str(gpu)]
            steps += [{"kind": "gpu_idle", "gpu": gpu, "argv": idle}, {"kind": "command", "gpu": gpu, "argv": reset}]
        # reset first; reboot only when the sweep after the reset still finds a GPU taken out bad
        if settings["reboot"]:
            steps += [{"kind": "sweep", "gpus": out},
                      *({**s, "only_if_unhealthy": out} for s in _reboot(host, hplan, settings))]
    if action == "reboot" and not settings["reboot"]:
        return steps
    # back in service only through the validation run (health_return.py): gpu_health, DCGM diag, thresholds
    steps.append(_validate(hplan, out))
    steps.append({"kind": "back_if_healthy", "gpus": out, "members": stop})
    # only after back_if_healthy (a failed step, the validation among them, stops the rest)
    steps += _kubectl_steps(host, "uncordon", "unmark") if ours else []
    if whole_node or out:
        steps.append(clear_held(CLEAR_ALL if whole_node else out, f"{action}: {hplan.get('reason') or ''}", hplan))
    return steps


def _validate(hplan: dict, gpus: list[str]) -> dict:
    """The validation run before ``gpus`` go back: a sweep, and the benchmarks over the node's GPUs (health_return)."""
    return {"kind": "validate", "gpus": gpus, "bench": bench_runs(len(hplan.get("uuids") or {}))}


def clear_held(gpus: list[str] | str, why: str, hplan: dict) -> dict:
    """The step that ends the scheduled sweep's held findings of ``gpus`` (indexes, or ``all`` after a whole-node
    remedy) once they are back in service (gpu_health's release entry point), so GpuHealthGpuFailed stops firing.
    ``uuids`` is the release's argument: ``["all"]``, or each GPU's UUID as this run's sweep read it (a GPU going back
    is one it listed: reset, healthy again; a GPU with no UUID is left out)."""
    known = hplan.get("uuids") or {}
    uuids = [CLEAR_ALL] if gpus == CLEAR_ALL else [known[str(g)] for g in gpus if str(g) in known]
    return {"kind": "clear_held", "gpus": gpus, "uuids": uuids,
            "why": f"back in service after a passed validation ({why.strip(': ')})"[:300]}


def _reboot(host: str, hplan: dict, settings: dict) -> list[dict]:
    """A reboot, its reason first in the host's syslog (logger -t gpuops-health) and so in the audit log."""
    if not settings["reboot"]:
        return [{"kind": "reboot", "enabled": False, "host": host}]
    why = f"gpuops health reboots {host}: {hplan.get('action')}: {hplan.get('reason')}"[:400]
    return [{"kind": "command", "argv": ["logger", "-t", "gpuops-health", why]},
            {"kind": "reboot", "enabled": True, "host": host, "reason": why}]


def _give_back(host: str, hplan: dict, kube: bool, members: dict) -> list[dict]:
    if not hplan.get("gpus_back"):
        return []
    start = sorted(set(holders(members, hplan["gpus_back"])) | set(hplan.get("restart") or []))
    steps = [_validate(hplan, hplan["gpus_back"]),
             {"kind": "give_back", "gpus": hplan["gpus_back"], "members": start},
             clear_held(hplan["gpus_back"], "health_release", hplan)]
    if hplan.get("containers") is not None:  # the workspaces this collection stopped (schema 2), and only those
        steps[1]["containers"] = hplan["containers"]
    if kube:
        steps += _kubectl_steps(host, "untaint", "unlabel")
        if hplan.get("cordoned_by") == "gpuops":  # an operator's cordon stays
            steps += _kubectl_steps(host, "uncordon", "unmark")
    return steps


def _record(entry: dict, out: dict, step: dict, now: str) -> None:
    """What one step run changes in the host's state entry: GPUs out (and their pending remedy), stopped
    workspaces, cordon."""
    result, kind = step.get("result"), step["kind"]
    if kind == "mark_out" and result == "ok":
        for gpu, why in step["gpus"].items():
            out[gpu] = {**why, "since": now, "pending": step["pending"]}
    if kind == "validate" and result in ("ok", "failed") and step.get("validation"):
        entry["validation"] = {"time": now, **{k: step["validation"][k] for k in ("ok", "failed", "checks")}}
    remedy = kind == "reboot" or (kind == "command" and step["argv"][0] != "logger")  # the reason logged is none
    if remedy and result == "ok":
        for gpu in out.values():
            gpu["pending"] = None if gpu.get("pending") in ("reboot", "reset_gpu", "restart_fm") else gpu["pending"]
    if kind == "stop_workspaces" and result == "ok":
        entry["stopped"] = sorted(set(entry.get("stopped") or []) | set(step.get("members") or []))
        ids = set(entry.get("stopped_containers") or []) | set(step.get("containers") or [])
        entry["stopped_containers"] = sorted(ids)
    if kind in ("back_if_healthy", "give_back") and result in ("ok", "healthy"):
        for gpu in step.get("gpus") or []:
            out.pop(str(gpu), None)
        entry["stopped"] = sorted(set(entry.get("stopped") or []) - set(step.get("members") or []))
        entry["stopped_containers"] = [] if not out else entry.get("stopped_containers") or []
    if kind == "kubectl" and result == "ok" and step["argv"][1] in ("cordon", "uncordon"):
        entry["cordoned"] = step["argv"][1] == "cordon"
        entry["cordoned_by"] = "gpuops" if entry["cordoned"] else None


def _remediation(hplan: dict, done: list[dict], now: str) -> dict | None:
    """The record of this run's remediation (time, action, cause, GPUs; who took it out), when a step that takes
    the node or GPUs out ran."""
    takes_out = ("kubectl", "stop_workspaces", "mark_out", "drain_gpu_pods", "command", "reboot")
    if hplan.get("status") != "act" or not any(s["kind"] in takes_out and s.get("result") == "ok" for s in done):
        return None
    return {"time": now, "action": hplan.get("action"), "cause": str(hplan.get("reason") or "")[:500],
            "gpus": sorted(hplan.get("gpus_out") or {}, key=str), "by": "gpuops",
            **({"escalated": True} if hplan.get("escalated") else {})}


def next_state(state: dict, host: str | None, hplan: dict, done: list[dict], cursor: str | None, now: str,
               release: bool = False, breaker: dict | None = None) -> dict:
    """The health state after this host's run. ``done``: the steps run, each with ``result`` (ok | failed | skipped
    | healthy). Items are handled (not acted on again) once their steps ran; the cursor moves on unless
    the host was deferred or unreadable (so its events are planned again); ``release``: the operator's
    health_release for this host (a quarantine was serviced: the GPUs go back at the next healthy sweep).
    ``breaker``: the plan's breaker record (tripped now, or reset), with ``host`` None: that alone changes."""
    state = json.loads(json.dumps(state or {}))
    if breaker:
        state["breaker"] = breaker
    if host is None or hplan.get("status") in HELD:
        return state
    state["schema"] = STATE_SCHEMA
    entry = state.setdefault("hosts", {}).setdefault(host, {})
    before = json.dumps({k: v for k, v in entry.items() if k != "updated"}, sort_keys=True)
    # a held finding the sweep could not clear fails the run, but the GPUs went back validated: their items are
    # handled and the cursor moves on (never acted on again for it)
    failed = [s for s in done if s.get("result") == "failed" and s["kind"] != "clear_held"]
    out = entry.setdefault("out_of_service", {})
    for step in done:
        _record(entry, out, step, now)
    for key in ("stopped", "stopped_containers", "cordoned_by"):
        if not entry.get(key):
            entry.pop(key, None)
    record = _remediation(hplan, done, now)
    if record:
        entry["remediations"] = [*(entry.get("remediations") or []), record][-REMEDIATIONS_KEPT:]
        for gpu in out.values():
            gpu.setdefault("by", "gpuops")
        if hplan.get("operator_cordon"):  # who took the node out: someone else's cordon, never undone here
            entry["cordoned_by"] = "operator"
        if hplan.get("escalated"):
            entry["service_required"] = {"since": now, "reason": hplan["escalated"]}
    if release and not failed:  # serviced (health_release) and validated: its GPUs go back
        entry.pop("service_required", None)
        for gpu in out.values():
            gpu["pending"] = None
    if not failed:
        live = {i["key"] for i in hplan.get("items") or []}
        # a GPU back in service forgets its state findings, so a recurrence is acted on again
        entry["handled"] = sorted(live | {k for k in entry.get("handled") or [] if not k.startswith("finding:")})
        if cursor:
            entry["cursor"] = cursor
    if json.dumps({k: v for k, v in entry.items() if k != "updated"}, sort_keys=True) != before:
        entry["updated"] = now  # only when something changed: a re-run with nothing new leaves the file as it is
    return state


def audit_records(host: str, done: list[dict], hplan: dict, now: str) -> list[str]:
    """One JSON line per step run: time, host, GPU, event, action, step, result (the audit log is appended to);
    ``by`` where the step names who ran it (the breaker's, host None)."""
    first = next((i for i in hplan.get("items") or [] if i.get("new") and i["action"] == hplan.get("action")), {})
    lines = []
    for step in done:
        gpu = step.get("gpu")
        if gpu is None and step.get("gpus"):
            gpu = sorted(step["gpus"], key=int) if isinstance(step["gpus"], (list, dict)) else step["gpus"]
        record = {"time": now, "host": host, "gpu": gpu, "event": step.get("event") or first.get("event"),
                  "action": step.get("action") or hplan.get("action"), "step": step["kind"],
                  "argv": step.get("argv"), "result": step.get("result"),
                  "detail": step.get("detail") or step.get("reason", "")}
        if "by" in step:
            record["by"] = step["by"]
        lines.append(json.dumps(record, sort_keys=True))
    return lines


def fleet_entry(host: str, hplan: dict, state: dict, sweep: dict) -> dict:
    """One host's entry in the fleet report (plugin_utils/fleet_report.py): its GPUs as the sweep read them and its
    health (the plan, with the GPUs the state holds out of service)."""
    gpus = [g for g in (sweep or {}).get("gpus") or [] if isinstance(g, dict)]
    held = (((state or {}).get("hosts") or {}).get(host) or {}).get("out_of_service") or {}
    return {"host": host, "gpu": {"count": len(gpus), "gpus": [{"name": g.get("name") or "GPU"} for g in gpus]},
            "health": {**hplan, "out_of_service": dict(held)}}


def healthy_again(sweep: dict, gpus: list) -> bool:
    """The sweep after a remedy read the host, and every GPU taken out (and the host) is healthy again."""
    if not (sweep or {}).get("read_ok"):
        return False
    verdicts = {str(g.get("index")): g.get("verdict") for g in sweep.get("gpus") or []}
    return sweep.get("verdict") != "failed" and all(verdicts.get(str(g)) == "healthy" for g in gpus or [])


def _failure(run: Any) -> str | None:
    """Why a registered result failed, else None (a skipped task did not fail)."""
    if not isinstance(run, dict) or run.get("skipped"):
        return None
    for item in run.get("results") or []:
        why = _failure(item)
        if why:
            return why
    if run.get("failed") or run.get("rc", 0) not in (0, None):
        text = str(run.get("stderr") or run.get("msg") or run.get("stdout") or f"rc {run.get('rc')}").strip()
        return text[:300]
    return None


# the registered results (names in roles/health/tasks/step.yml) each kind of step looks at
_RUNS = {"kubectl": ["command"], "command": ["command"], "drain_gpu_pods": ["pods", "delete"], "stop_workspaces":
         ["workspaces", "stop"], "bug_report": ["command"], "reboot": ["reboot"], "give_back": ["workspaces", "start"],
         "back_if_healthy": ["workspaces", "start"]}


def _idle(step: dict, procs: dict) -> dict:
    """gpu_idle: ok only when nvidia-smi lists no process on the GPU."""
    if procs.get("rc") != 0:
        return {"result": "failed", "detail": f"nvidia-smi could not list GPU {step['gpu']}'s processes: "
                f"{str(procs.get('stderr') or procs.get('msg') or '').strip()[:200]}"}
    held = str(procs.get("stdout") or "").strip()
    if held:
        return {"result": "failed", "detail": f"GPU {step['gpu']} is held by {held.replace(chr(10), '; ')}: not "
                "reset (a reset needs an idle GPU); stop the process, then rerun"}
    return {"result": "ok", "detail": "no process holds it"}


def _cleared(step: dict, release: dict) -> dict:
    """clear_held: what gpu_health's release did (its gpu_health_released, or ``failed`` and ``msg`` when it failed)."""
    gpus = step["gpus"] if step["gpus"] == CLEAR_ALL else ", ".join(map(str, step["gpus"]))
    if release.get("failed"):
        return {"result": "failed", "detail": f"the held findings of GPU(s) {gpus} on the scheduled sweep were not "
                f"cleared (GpuHealthGpuFailed keeps firing): {str(release.get('msg') or '').strip()[:300]}"}
    if release.get("skipped"):
        return {"result": "skipped", "detail": f"held findings of GPU(s) {gpus} not cleared: {release['skipped']}"}
    if release.get("pending") and release.get("held"):
        return {"result": "ok", "detail": f"held findings of GPU(s) {gpus} to be cleared: {release['pending']}"}
    cleared = [line.removeprefix("gpu_health released: ") for line in release.get("cleared") or []]
    if cleared:
        return {"result": "ok", "detail": "held finding cleared on the scheduled sweep: " + "; ".join(cleared)}
    if release.get("held"):
        return {"result": "failed", "detail": f"the held findings of GPU(s) {gpus} on the scheduled sweep were not "
                "cleared by its run (GpuHealthGpuFailed keeps firing): see journalctl -u gpuops-gpu-health-sweep"}
    return {"result": "ok", "detail": f"no held finding of GPU(s) {gpus} on the scheduled sweep: nothing to clear"}


def step_result(step: dict, runs: dict, check_mode: bool = False, dcgm_level: int = 2,
                thresholds: dict | None = None) -> dict:
    """{result, detail} of one step from what its tasks registered (``runs``: name -> registered result). A validate
    step's is health_return.validation's judgement of its sweep (at ``dcgm_level``) and benchmarks, with
    ``thresholds`` (health_return_thresholds)."""
    kind = step["kind"]
    found = None
    if kind in ("notify", "mark_out"):
        found = {"result": "ok", "detail": ""}
    elif check_mode:
        found = {"result": "skipped", "detail": "check mode: nothing was run"}
    elif kind == "gpu_idle":
        found = _idle(step, runs.get("command") or {})
    elif kind == "reboot" and not step.get("enabled", True):
        found = {"result": "skipped", "detail": f"health_reboot is false: reboot {step.get('host') or 'the node'} by "
                 "hand, then gpuops-run health --limit <host> -e health_apply=true -e health_release=true"}
    elif kind == "reboot" and (runs.get("reboot") or {}).get("msg") and not runs["reboot"].get("skipped"):
        # ansible.builtin.reboot's result says why it failed only in msg (failed_when: false clears ``failed``)
        found = {"result": "failed", "detail": f"the reboot did not complete: {str(runs['reboot']['msg'])[:300]}"}
    elif kind == "validate":
        bench = {(r.get("item") or {}).get("tool"): r for r in (runs.get("bench") or {}).get("results") or []}
        run = validation(runs.get("resweep") or {}, step.get("gpus"), dcgm_level, bench.get("all_reduce_perf"),
                         bench.get("nvbandwidth"), thresholds)
        found = {"result": "ok" if run["ok"] else "failed", "detail": run["summary"], "validation": run}
    elif kind == "clear_held":
        found = _cleared(step, runs.get("release") or {})
    elif kind == "sweep":
        sweep = runs.get("resweep") or {}
        found = ({"result": "ok", "detail": f"verdict {sweep.get('verdict')}"} if sweep.get("read_ok") else
                 {"result": "failed", "detail": "the sweep could not read the node again"})
    if kind == "sweep":  # the reboot after a reset (only_if_unhealthy) runs only when this finds a GPU still bad
        found["healthy"] = healthy_again(runs.get("resweep") or {}, step.get("gpus") or [])
    if found:
        return found
    for name in _RUNS.get(kind, []):
        why = _failure(runs.get(name))
        if why:
            return {"result": "failed", "detail": why}
    if kind == "back_if_healthy":
        return {"result": "healthy", "detail": "back in service"}
    if kind == "stop_workspaces":  # the containers it stopped, and only those, start again (state: stopped_containers)
        ids = list((runs.get("workspaces") or {}).get("stdout_lines") or [])
        return {"result": "ok", "detail": " ".join(ids), "containers": ids}
    return {"result": "ok", "detail": ""}
