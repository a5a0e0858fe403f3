# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The preflight reports of a whole run, written once, in-process, on the controller.

``write_plan(plan, *folders)`` writes ``plan.json`` (gpuops_plan) into each folder. ``write_reports(run_dir, records,
fleet)`` writes ``<host>.json`` and ``<host>.md`` for every host and
``fleet.json`` and the fleet report page ``index.html`` (plugin_utils/fleet_report.py) for the run. A record
is one host's judged preflight (see ``preflight_fleet``). A section (``add_sections``: the kubelet policy of a
Kubernetes GPU node, ``kubelet_section``) lands in the JSON under ``sections[name]`` and as a table in the Markdown.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils._files import put
from ansible_collections.gpuops.cluster.plugins.plugin_utils.fleet_report import render_fleet_report
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import get_var

FILE_MODE = 0o640
PLAN_FILE = "plan.json"


def _cell(value: Any) -> str:
    text = "none" if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def host_json(record: dict) -> dict:
    """The per-host JSON report (keys kept from the first report format: host, os, gpu, topology, plan, result)."""
    gpu = record.get("gpu") or {}
    os_facts = (record.get("host_facts") or {}).get("os") or {}
    plan = record.get("plan") or {}
    result = record["result"]
    return {
        "host": record["host"],
        "os": f"{os_facts.get('distribution')} {os_facts.get('distribution_version')}",
        "gpu": gpu,
        "topology": gpu.get("topology"),
        "host_facts": record.get("host_facts"),
        "plan": {
            "driver_version": plan.get("driver_version"),
            "cuda_version": plan.get("cuda_version"),
            "platform_requested": plan.get("platform"),
        },
        "result": result,
        "fleet": record.get("fleet"),
        "sections": record.get("sections") or {},
    }


def host_markdown(record: dict) -> str:
    gpu = record.get("gpu") or {}
    os_facts = (record.get("host_facts") or {}).get("os") or {}
    plan = record.get("plan") or {}
    result = record["result"]
    platform = result["platform"]
    verdict = "PASS" if result["ok"] else "REFUSED: " + ", ".join(result["failed_checks"])
    judged = result.get("driver_judged")  # the driver CUDA was judged against, and whence (pin or running)
    judged = f"{_cell(judged['version'])} ({judged['source']})" if judged else "none (no pin and no running driver)"
    lines = [
        f"# Preflight: {record['host']}",
        "",
        "| | |",
        "|---|---|",
        f"| OS | {_cell(os_facts.get('distribution'))} {_cell(os_facts.get('distribution_version'))} |",
        f"| kernel, architecture | {_cell(os_facts.get('kernel'))}, {_cell(os_facts.get('architecture'))} |",
        f"| Secure Boot | {_cell(os_facts.get('secure_boot'))} |",
        f"| GPUs | {gpu.get('count')} (source: {gpu.get('source')}) |",
        f"| driver (running) | {_cell(gpu.get('driver_version'))} |",
        f"| driver pin | {_cell(plan.get('driver_version'))} |",
        f"| driver CUDA was judged against | {judged} |",
        f"| CUDA requested | {_cell(plan.get('cuda_version'))} |",
        f"| platform | **{_cell(platform.get('platform'))}** "
        f"({platform.get('source')}: {_cell(platform.get('reason'))}) |",
        f"| verdict | {_cell(verdict)} |",
        "",
        "| check | status | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {c['status']} | {_cell(c['msg'])} |" for c in result["checks"]]
    if gpu.get("gpus"):
        lines += ["", "| GPU | name | bus | memory MiB | MIG | NUMA | NVLink |", "|---|---|---|---|---|---|---|"]
        keys = ("index", "name", "pci_bus_id", "memory_total_mib", "mig_mode", "numa_node", "nvlink")
        lines += ["| " + " | ".join(_cell(g.get(key)) for key in keys) + " |" for g in gpu["gpus"]]
    for section in (record.get("sections") or {}).values():
        lines += ["", f"## {section.get('title') or section.get('name')}", "", "| | |", "|---|---|"]
        lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in section.get("rows") or []]
    return "\n".join(lines) + "\n"


def summary_line(host: str, record: dict, report: str) -> str:
    """The host's line of the preflight summary: the verdict, the GPUs, the checks by status, the message of each
    rule the inventory turned into a warning (status warn, e.g. preflight_topology_required: false), the report."""
    res, gpu = record["result"], record.get("gpu") or {}
    by_status: dict = {}
    for check in res["checks"]:
        by_status.setdefault(check["status"], []).append(check["name"])
    warned = [f"warning: {c['msg']}" for c in res["checks"] if c["status"] == "warn"]
    return (
        f"{host}: {'PASS' if res['ok'] else 'REFUSED'}, {gpu.get('count')} GPUs via {gpu.get('source')}; "
        + "; ".join(f"{status} {', '.join(names)}" for status, names in sorted(by_status.items()))
        + "".join(f"; {w}" for w in warned)
        + f"; report {report}"
    )


def kubelet_section(record: dict, hostvars: Any) -> dict | None:
    """``{"name": "kubelet", ...}`` for a Kubernetes GPU node: the kubelet policy it will get, and why, as the host's
    part of ``gpuops_plan`` holds it (``record["planned"]``, set by preflight_fleet; nothing here derives it again);
    else None."""
    platform = ((record.get("result") or {}).get("platform") or {}).get("platform")
    if platform != "kubernetes" or "gpu_nodes" not in (get_var(hostvars, "group_names", []) or []):
        return None
    part = record["planned"]
    policy = part.get("kubelet_policy")
    section = {"name": "kubelet", "title": "Kubernetes kubelet policy"}
    if policy is None:
        why = "none: the node has no gpuops_pool (training or inference); the plan refuses it"
        return {**section, "rows": [["policy", why]], "data": {"pool": part.get("pool")}}
    if "error" in policy:
        return {**section, "rows": [["policy", f"not derived: {policy['error']}"]]}
    source = "this preflight" if part.get("topology_source") == "preflight" else part.get("topology_source")
    return {
        **section,
        "rows": [
            ["pool", part["pool"]],
            ["topologyManagerPolicy", policy["topology_manager_policy"]],
            ["topologyManagerScope", policy["topology_manager_scope"]],
            ["cpuManagerPolicy", policy["cpu_manager_policy"]],
            ["reservedSystemCPUs", policy["reserved_system_cpus"]],
            ["memoryManagerPolicy", policy["memory_manager_policy"]],
            ["gpuops.io/nvlink-domains", policy["nvlink_domains_label"]],
            ["reason", policy["reason"]],
            ["topology from", source],
        ],
        "data": dict(policy, topology_source=source),
    }


def add_sections(record: dict, hostvars: Any) -> None:
    """The record gets ``sections`` (name -> {title, rows, data}): the kubelet section where it applies."""
    section = kubelet_section(record, hostvars)
    record["sections"] = {section["name"]: {"title": section.get("title"), "rows": section.get("rows") or [],
                                            "data": section.get("data")}} if section else {}


def write_plan(plan: dict, *folders: str) -> list[str]:
    """plan.json (mode 0640, atomically; a missing folder 0750) in each folder; returns the paths."""
    text = json.dumps(plan, indent=2, sort_keys=True, default=str) + "\n"
    written = []
    for folder in folders:
        path = os.path.join(folder, PLAN_FILE)
        put(path, text, FILE_MODE)
        written.append(path)
    return written


def write_reports(run_dir: str, records: dict[str, dict], fleet: dict) -> dict[str, str]:
    """Every host's JSON and Markdown report, and fleet.json (each 0640; a missing folder 0750); returns host ->
    Markdown path."""
    written = {}
    for host, record in records.items():
        base = os.path.join(run_dir, host)
        put(f"{base}.json", json.dumps(host_json(record), indent=2, sort_keys=False, default=str) + "\n", FILE_MODE)
        put(f"{base}.md", host_markdown(record), FILE_MODE)
        written[host] = f"{base}.md"
    summary = {
        **{key: fleet.get(key) for key in ("platform", "source", "reason", "gpu_count")},
        "ok": all(r["result"]["ok"] for r in records.values()),
        "hosts": {
            host: {"ok": r["result"]["ok"], "failed_checks": r["result"]["failed_checks"]}
            for host, r in records.items()
        },
    }
    put(os.path.join(run_dir, "fleet.json"), json.dumps(summary, indent=2, default=str) + "\n", FILE_MODE)
    # The fleet report page (plugin_utils/fleet_report.py): a row and a topology drawing per host.
    pages = [host_json(records[host]) for host in sorted(records)]
    put(os.path.join(run_dir, "index.html"), render_fleet_report(pages, os.path.basename(run_dir)), FILE_MODE)
    return written
