# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The fleet report's "Is training slow?" section (plugins/plugin_utils/fleet_report.py renders the page): one block
per answer of diagnose.yml -e diagnose_job=... (roles/diagnose/tasks/slowdown.yml). Pure: data in, HTML out,
styled by the page's CSS (badge classes ok / bad / skip)."""

from __future__ import annotations

from html import escape

VERDICT_CLASS = {"slow": "bad", "healthy": "ok"}


def _verdict_badge(verdict: str) -> str:
    return f'<span class="badge {VERDICT_CLASS.get(verdict, "skip")}">{escape(verdict)}</span>'


def slowdown_html(reports: list[dict]) -> str:
    """The "Is training slow?" section: one table per answer (diagnose.yml -e diagnose_job=...), causes most
    likely first. Empty when no report carries one."""
    out = []
    for report in reports:
        answer = report.get("slowdown")
        if not isinstance(answer, dict):
            continue
        verdict = str(answer.get("verdict", "?"))
        badge = _verdict_badge(verdict)
        signals = ", ".join(f"{k} {v}" for k, v in (answer.get("signals") or {}).items() if v is not None)
        out.append(f"<section class='host slowdown' data-job='{escape(str(answer.get('job', '')))}'>"
                   f"<h2>Is training slow? {escape(str(answer.get('job', '')))} {badge}</h2>"
                   f"<div class='legend'>{escape(str(report.get('host', '')))}, {escape(str(answer.get('window', '')))}"
                   f"; window means: {escape(signals or 'none measured')}</div>")
        causes = answer.get("causes") or []
        if causes:
            out.append("<table class='slowdown-causes'><thead><tr><th>#</th><th>Cause</th><th>Evidence</th>"
                       "<th>Fix</th></tr></thead><tbody>")
            for rank, cause in enumerate(causes, 1):
                out.append(f"<tr><td>{rank}</td><td>{escape(str(cause.get('cause')))}</td>"
                           f"<td>{escape(str(cause.get('summary', '')))}</td><td>{escape(str(cause.get('fix', '')))}"
                           "</td></tr>")
            out.append("</tbody></table>")
        out.append("</section>")
    return "".join(out)
