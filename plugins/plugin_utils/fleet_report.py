"""Fleet report: one self-contained HTML page (inline CSS and SVG, no external assets) from the per-host
preflight reports and the validate results. Controller-side and pure: data in, text out.

Input per host: the preflight JSON report (host, os, gpu, topology, plan, result; any part may be missing),
optionally with "pool" and "validate" (a list of {step, status, detail}; status ok | failed | skipped), and
"health" (health.yml's plan for the host: status, action, reason, items, out_of_service; plugin_utils/health.py).
"slowdown" (diagnose.yml's "is training slow?" answer: {job, window, verdict, signals, causes}).
The burn-in report (plugin_utils/burnin.py judge_fleet), when given, is the page's ``burnin`` section.
"""

from __future__ import annotations

from html import escape
from math import log2

from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin import gbps_cell, membw_cell

GPU_W, GPU_H, GAP, NUMA_GAP, PAD = 64, 44, 14, 26, 16
STATUS_CLASS = {"ok": "ok", "passed": "ok", "failed": "bad", "broken": "bad", "error": "bad", "warn": "warn",
                "slow": "bad", "tcp_fallback": "bad",
                "skipped": "skip", "unknown": "skip", "clear": "ok", "act": "bad", "deferred": "warn",
                "unreadable": "warn", "healthy": "ok"}


def _get(data, *keys, default=None):
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data if data is not None else default


def _columns(topology: dict) -> list[tuple[int | None, list[int]]]:
    """GPU columns grouped by NUMA node (in NUMA order), GPUs of unknown NUMA last."""
    gpus = sorted(g["index"] for g in topology.get("gpus", []) if isinstance(g.get("index"), int))
    groups = [(grp["numa_node"], sorted(grp["gpus"])) for grp in topology.get("numa_groups") or []]
    placed = {i for _name, members in groups for i in members}
    rest = [i for i in gpus if i not in placed]
    return groups + ([(None, rest)] if rest else [])


def _nics_svg(topology: dict, nics: list[str], x_of: dict[int, float], width: float, gpu_bottom: float,
              nic_y: float) -> list[str]:
    """NIC boxes below the GPUs, each joined to the GPUs it is nearest to (the connection type as tooltip)."""
    out: list[str] = []
    # NICs in the order of the GPUs they are nearest to (fewer crossing lines), evenly spaced.
    near: dict[str, list[float]] = {name: [] for name in nics}
    links = [(gpu, name) for gpu in topology["gpus"] for name in gpu.get("nearest_nics") or []
             if name in near and gpu.get("index") in x_of]
    for gpu, name in links:
        near[name].append(x_of[gpu["index"]])
    order = sorted(nics, key=lambda n: (not near[n], sum(near[n]) / len(near[n]) if near[n] else 0, nics.index(n)))
    step = (width - 2 * PAD) / len(nics)
    nic_x = {name: PAD + step * i + step / 2 for i, name in enumerate(order)}
    for gpu, name in links:
        gx = x_of[gpu["index"]] + GPU_W / 2
        out.append(f'<line class="niclink" x1="{gx:.0f}" y1="{gpu_bottom:.0f}" x2="{nic_x[name]:.0f}" '
                   f'y2="{nic_y:.0f}"><title>GPU{gpu["index"]} - {escape(name)}: '
                   f'{escape(str(gpu.get("nearest_nic_link") or "?"))}</title></line>')
    for name, cx in nic_x.items():
        w = min(max(8 * len(name), 40), step - 4)
        out.append(f'<g class="nic"><rect x="{cx - w / 2:.0f}" y="{nic_y:.0f}" width="{w:.0f}" height="22" rx="4"/>'
                   f'<text x="{cx:.0f}" y="{nic_y + 15:.0f}" text-anchor="middle">{escape(name)}</text></g>')
    return out


def topology_svg(topology: dict | None, title: str = "") -> str:
    """GPUs as boxes grouped by NUMA node, NVLinks as arcs above them (width by link count), NICs below,
    joined to their nearest GPUs with the connection type. Empty string when there is no GPU to draw."""
    if not topology or not topology.get("gpus"):
        return ""
    columns = _columns(topology)
    x_of: dict[int, float] = {}
    boxes, x = [], PAD
    for numa, members in columns:
        start = x
        for index in members:
            x_of[index] = x
            x += GPU_W + GAP
        boxes.append((numa, start - 6, x - GAP + 6))
        x += NUMA_GAP
    width = max(x - NUMA_GAP + PAD, 260)
    pairs: dict[tuple[int, int], int] = {}
    for gpu in topology["gpus"]:
        for peer, links in (gpu.get("nvlink_peers") or {}).items():
            a, b = sorted((gpu["index"], int(peer)))
            if a in x_of and b in x_of:
                pairs[(a, b)] = max(pairs.get((a, b), 0), int(links))
    span = max((abs(x_of[a] - x_of[b]) for a, b in pairs), default=0)
    top = 24 + (span / 2.6 if pairs else 0)
    gpu_y = top + 20
    nics = list(topology.get("nics") or [])
    nic_y = gpu_y + GPU_H + 70
    height = (nic_y + 40) if nics else gpu_y + GPU_H + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="topo" role="img" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" data-gpus="{len(x_of)}" '
           f'data-nvlinks="{len(pairs)}" data-nics="{len(nics)}">',
           f"<title>{escape(title or 'GPU topology')}</title>"]
    for numa, left, right in boxes:
        label = f"NUMA {numa}" if numa is not None else "NUMA ?"
        out.append(f'<rect class="numa" x="{left:.0f}" y="{gpu_y - 10:.0f}" width="{right - left:.0f}" '
                   f'height="{GPU_H + 34}" rx="8"/><text class="numa-label" x="{left + 6:.0f}" '
                   f'y="{gpu_y + GPU_H + 18:.0f}">{escape(label)}</text>')
    for (a, b), links in sorted(pairs.items()):
        xa, xb = x_of[a] + GPU_W / 2, x_of[b] + GPU_W / 2
        lift = abs(xb - xa) / 2.6
        stroke = 1 + log2(links) if links > 0 else 1
        out.append(f'<path class="nvlink" data-a="{a}" data-b="{b}" d="M{xa:.0f},{gpu_y:.0f} Q{(xa + xb) / 2:.0f},'
                   f'{gpu_y - 2 * lift:.0f} {xb:.0f},{gpu_y:.0f}" stroke-width="{stroke:.1f}">'
                   f"<title>GPU{a} - GPU{b}: NV{links}</title></path>")
    for index, left in sorted(x_of.items()):
        out.append(f'<g class="gpu" data-index="{index}"><rect x="{left:.0f}" y="{gpu_y:.0f}" width="{GPU_W}" '
                   f'height="{GPU_H}" rx="5"/><text x="{left + GPU_W / 2:.0f}" y="{gpu_y + GPU_H / 2 + 5:.0f}" '
                   f'text-anchor="middle">GPU{index}</text></g>')
    if nics:
        out += _nics_svg(topology, nics, x_of, width, gpu_y + GPU_H, nic_y)
    out.append("</svg>")
    return "".join(out)


def _badge(status: str, text: str | None = None) -> str:
    cls = STATUS_CLASS.get(str(status).lower(), "skip")
    return f'<span class="badge {cls}">{escape(text if text is not None else str(status))}</span>'


def host_row(report: dict) -> dict:
    """The table row of one host, as plain values (also what the tests read)."""
    gpu = report.get("gpu") or {}
    result = report.get("result") or {}
    checks = result.get("checks") or []
    fm = gpu.get("fabric_manager") or {}
    validate = report.get("validate") or []
    models = sorted({g.get("name") or g.get("product_name") or "GPU" for g in gpu.get("gpus") or []})
    warnings = [f"{c.get('name')}: {c.get('msg')}" for c in checks if c.get("status") in ("warn", "failed", "error")]
    warnings += [str(n) for n in gpu.get("notes") or [] if gpu.get("count")]
    warnings += [str(w) for w in (report.get("topology") or {}).get("warnings") or []]
    failed_steps = [v for v in validate if str(v.get("status")) in ("failed", "error", "broken")]
    return {
        "host": report.get("host", "?"),
        "gpus": f"{gpu.get('count', 0)} x {', '.join(models)}" if gpu.get("count") else "no GPU",
        "driver": gpu.get("driver_version") or "none",
        "pin": result.get("driver_pin") or _get(report, "plan", "driver_version", default="") or "",
        "cuda": _get(result, "compat", "mode", default="") or "",
        "cuda_version": _get(report, "plan", "cuda_version", default="") or "",
        "fabric_manager": f"required, {fm.get('state') or 'state unknown'}" if fm.get("required") else "not needed",
        "platform": (_get(result, "platform", "platform", default="") or _get(report, "fleet", "platform", default="")
                     or _get(report, "plan", "platform_requested", default="?")),
        "pool": report.get("pool") or _get(report, "plan", "pool", default="") or "default",
        "warnings": warnings,
        "validate": "not run" if not validate else ("failed" if failed_steps else
                                                    "ok" if any(v.get("status") == "ok" for v in validate)
                                                    else "skipped"),
        "health": health_cell(report.get("health")),
        "health_status": (report.get("health") or {}).get("status") or "skipped",
        "ok": bool(result.get("ok", True)) and not failed_steps and not _health_bad(report.get("health")),
    }


def _health_bad(health: dict | None) -> bool:
    return bool(health) and (health.get("status") in ("act", "deferred") or bool(health.get("out_of_service")))


def health_cell(health: dict | None) -> str:
    """The health column: 'not run', 'healthy', '<action> (<status>)', plus the GPUs out of service."""
    if not health:
        return "not run"
    status, action = health.get("status"), health.get("action") or "none"
    text = {"clear": "healthy" if health.get("verdict") in (None, "healthy") else f"{health.get('verdict')}, handled",
            "unreadable": "not read: nothing done"}.get(status, f"{action} ({status})")
    out = sorted(health.get("out_of_service") or {}, key=lambda g: int(g) if str(g).isdigit() else 0)
    return text + (f"; GPU {', '.join(map(str, out))} out of service" if out else "")


def _table(cls: str, head: list[str], rows: list[str], attr: str = "class") -> str:
    """One table of the page: its class (or id), column titles and rows (each a ready <tr>)."""
    titles = "".join(f"<th>{h}</th>" for h in head)
    return f"<table {attr}='{cls}'><thead><tr>{titles}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _health_section(health: dict) -> str:
    rows = [f"<tr><td>{escape(str(i.get('gpu')))}</td><td>{escape(str(i.get('event')))}</td>"
            f"<td>{escape(str(i.get('bucket') or ''))}</td>"
            f"<td>{_badge('warn' if i.get('new') else 'skipped', i['action'])}</td>"
            f"<td>{escape(str(i.get('why')))}</td></tr>" for i in health.get("items") or []]
    return (f"<p class='health'>health: {escape(health_cell(health))} - {escape(str(health.get('reason', '')))}</p>"
            + (_table("health-items", ["GPU", "Event", "NVIDIA bucket", "Action", "Why"], rows) if rows else ""))


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2430;background:#f6f7f9}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:0 0 8px}.sub{color:#5b6575;margin-bottom:18px}
.cards{display:flex;gap:12px;margin:12px 0 20px}.card{background:#fff;border-radius:8px;padding:10px 16px;
box-shadow:0 1px 2px #0002}.card b{display:block;font-size:20px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%;margin-bottom:22px}
th,td{padding:7px 10px;border-bottom:1px solid #e4e7ec;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}tr.row-bad td:first-child{border-left:4px solid #d64545}
tr.row-good td:first-child{border-left:4px solid #2f9e5b}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600}
.ok{background:#dff5e7;color:#17663a}.bad{background:#fde2e2;color:#a32121}.warn{background:#fff1cc;color:#7a5600}
.skip{background:#eceef2;color:#4a5261}ul.w{margin:0;padding-left:16px;color:#7a5600}
section.host{background:#fff;border-radius:8px;padding:14px 16px;margin-bottom:18px;box-shadow:0 1px 2px #0002}
.topo .numa{fill:#eef3fb;stroke:#9db4d9}.topo .numa-label{font-size:11px;fill:#48618a}
.topo .gpu rect{fill:#76b900;stroke:#4a7400}.topo .gpu text{font-size:12px;font-weight:700;fill:#fff}
.topo .nvlink{fill:none;stroke:#2b6cb0;stroke-opacity:.55}.topo .niclink{stroke:#a0a7b4;stroke-dasharray:4 3}
.topo .nic rect{fill:#fff;stroke:#6b7280}.topo .nic text{font-size:11px}.legend{font-size:12px;color:#5b6575}
"""


def burnin_section(burnin: dict | None) -> list[str]:
    """The ``burnin`` section: the findings, then nodes and pairs ranked worst first, measured and expected GB/s."""
    if not burnin:
        return []
    html = [f"<section class='host' id='burnin'><h2>Burn-in {_badge(str(burnin.get('status', 'unknown')))}</h2>",
            f"<p class='legend'>pair expectation {escape(gbps_cell(burnin.get('expected_gbps')))} GB/s "
            f"({escape(str(burnin.get('expected_source', '')))}); a pair is slow below "
            f"{float(burnin.get('floor_share') or 0):.0%} of it</p>"]
    findings = "".join(f"<li>{escape(str(f))}</li>" for f in burnin.get("findings") or [])
    html.append(f"<ul class='w'>{findings}</ul>" if findings else "<p>no finding: every node and pair passed</p>")
    html.append(_table("burnin-nodes", ["Node", "Result", "Single node GB/s", "Expected (path)", "Pairs",
                                        "Pair mean GB/s", "Pair expected", "Memory GB/s (read+write / HBM peak)"], [
        f"<tr data-node='{escape(str(node['node']))}'><td>{escape(str(node['node']))}</td>"
        f"<td>{_badge(str(node['status']))}</td><td>{gbps_cell(node.get('single_measured'))}</td>"
        f"<td>{gbps_cell(node.get('single_expected'))} ({escape(str(node.get('single_path') or ''))})</td>"
        f"<td>{node.get('pairs', 0)}</td><td>{gbps_cell(node.get('pair_mean'))}</td>"
        f"<td>{gbps_cell(node.get('pair_expected'))}</td><td>{escape(membw_cell(node.get('membw')))}</td></tr>"
        for node in burnin.get("nodes") or []]))
    pairs = [("-".join(str(p) for p in pair["pair"]), pair) for pair in burnin.get("pairs") or []]
    html.append(_table("burnin-pairs", ["Pair", "Result", "Measured GB/s", "Expected", "Network", "Detail"], [
        f"<tr data-pair='{escape(name)}'><td>{escape(name)}</td><td>{_badge(str(pair['status']))}</td>"
        f"<td>{gbps_cell(pair.get('measured'))}</td><td>{gbps_cell(pair.get('expected'))}</td>"
        f"<td>{escape(str(pair.get('network') or '?'))}</td><td>{escape(str(pair.get('detail') or ''))}</td></tr>"
        for name, pair in pairs]) + "</section>")
    return html


def slowdown_section(reports: list[dict]) -> str:
    """The "Is training slow?" section: one block per answer (diagnose.yml -e diagnose_job=...), causes most likely
    first. Empty when no report carries one."""
    out = []
    for report in reports:
        answer = report.get("slowdown")
        if not answer:
            continue
        job = escape(str(answer.get("job", "")))
        signals = ", ".join(f"{k} {v}" for k, v in (answer.get("signals") or {}).items() if v is not None)
        out.append(f"<section class='host slowdown' data-job='{job}'>"
                   f"<h2>Is training slow? {job} {_badge(str(answer.get('verdict', '?')))}</h2>"
                   f"<div class='legend'>{escape(str(report.get('host', '')))}, {escape(str(answer.get('window', '')))}"
                   f"; window means: {escape(signals or 'none measured')}</div>")
        causes = answer.get("causes") or []
        if causes:
            out.append(_table("slowdown-causes", ["#", "Cause", "Evidence", "Fix"], [
                f"<tr><td>{rank}</td><td>{escape(str(cause.get('cause')))}</td>"
                f"<td>{escape(str(cause.get('summary', '')))}</td><td>{escape(str(cause.get('fix', '')))}</td></tr>"
                for rank, cause in enumerate(causes, 1)]))
        out.append("</section>")
    return "".join(out)


def render_fleet_report(reports: list[dict], generated: str = "", title: str = "gpuops.cluster fleet report",
                        burnin: dict | None = None) -> str:
    """The whole page. ``reports`` as described in the module docstring; ``generated`` a UTC timestamp;
    ``burnin`` the burn-in report, rendered as the ``burnin`` section after the fleet table."""
    reports = sorted(reports, key=lambda r: str(r.get("host", "")))
    rows = [host_row(r) for r in reports]
    total_gpus = sum(int((r.get("gpu") or {}).get("count") or 0) for r in reports)
    bad = sum(1 for r in rows if not r["ok"])
    head = ["Host", "GPUs", "Driver (pin)", "CUDA", "Fabric Manager", "Platform", "Pool", "Warnings", "Validate"]
    health = any(r.get("health") for r in reports)
    head += ["Health"] if health else []
    html = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
            f"<h1>{escape(title)}</h1><div class='sub'>generated {escape(generated)} UTC</div>",
            f"<div class='cards'><div class='card' id='hosts'><b>{len(rows)}</b>hosts</div>"
            f"<div class='card' id='gpus'><b>{total_gpus}</b>GPUs</div>"
            f"<div class='card' id='attention'><b>{bad}</b>need attention</div></div>"]
    cells = []
    for row in rows:
        pin = f" (pin {escape(row['pin'])})" if row["pin"] and row["pin"] != row["driver"] else ""
        good_cuda = row["cuda"] in ("native", "minor_version")
        cuda = row["cuda"] and f"{escape(row['cuda_version'])} {_badge('ok' if good_cuda else 'warn', row['cuda'])}"
        warns = "".join(f"<li>{escape(w)}</li>" for w in row["warnings"])
        warns = f"<ul class='w'>{warns}</ul>" if warns else ""
        cells.append(
            f"<tr class='{'row-good' if row['ok'] else 'row-bad'}' data-host='{escape(row['host'])}'>"
            f"<td><a href='#host-{escape(row['host'])}'>{escape(row['host'])}</a></td><td>{escape(row['gpus'])}</td>"
            f"<td>{escape(row['driver'])}{pin}</td><td>{cuda}</td><td>{escape(row['fabric_manager'])}</td>"
            f"<td>{escape(str(row['platform']))}</td><td>{escape(str(row['pool']))}</td><td>{warns}</td>"
            f"<td class='validate'>{_badge(row['validate'])}</td>"
            + (f"<td class='health'>{_badge(row['health_status'], row['health'])}</td>" if health else "") + "</tr>")
    html.append(_table("fleet", head, cells, attr="id"))
    html += burnin_section(burnin)
    html.append(slowdown_section(reports))
    for report in reports:
        name = str(report.get("host", "?"))
        svg = topology_svg(report.get("topology"), f"{name}: GPU, NVLink, NUMA and NIC topology")
        html.append(f"<section class='host' id='host-{escape(name)}'><h2>{escape(name)}</h2>")
        notes = "; ".join((report.get("gpu") or {}).get("notes") or []) or "no GPU topology was read"
        html.append(svg + "<div class='legend'>boxes: GPUs grouped by NUMA node; arcs: NVLink (thicker = more "
                    "links); dashed: nearest NICs</div>" if svg else
                    "<p class='legend'>no topology: " + escape(notes) + "</p>")
        if report.get("health"):
            html.append(_health_section(report["health"]))
        if report.get("validate"):
            html.append(_table("validate-steps", ["Validate step", "Result", "Detail"], [
                f"<tr><td>{escape(str(step.get('step')))}</td><td>{_badge(str(step.get('status')))}</td>"
                f"<td>{escape(str(step.get('detail', '')))}</td></tr>" for step in report["validate"]]))
        html.append("</section>")
    html.append("</body></html>")
    return "\n".join(html) + "\n"
