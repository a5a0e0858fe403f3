"""The burn-in in the fleet report (the page's "burnin" section), its Markdown, and the example of
docs/operations.md, which must be what scripts/gen-role-docs writes (generated from a fixture run, not typed)."""

from __future__ import annotations

import re
from importlib.machinery import SourceFileLoader
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin import markdown
from ansible_collections.gpuops.cluster.plugins.plugin_utils.fleet_report import render_fleet_report

ROOT = Path(__file__).resolve().parents[4]
gen = SourceFileLoader("gen_role_docs", str(ROOT / "scripts" / "gen-role-docs")).load_module()


def _rows(html: str, table: str) -> list[str]:
    body = html.split(f"<table class='{table}'>", 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr data-[a-z]+='[^']*'>.*?</tr>", body)


def test_burnin_section_ranks_the_slow_node_and_its_pairs_first() -> None:
    report = gen.burnin_report("slow_node")
    html = render_fleet_report([{"host": "gpu-a"}], generated="20261202T050000Z", burnin=report)
    section = html.split("<section class='host' id='burnin'>", 1)[1].split("</section>", 1)[0]
    assert "<span class=\"badge bad\">failed</span>" in section
    assert "slow node gpu-c" in section
    nodes = _rows(section, "burnin-nodes")
    assert len(nodes) == 6  # noqa: PLR2004
    assert "data-node='gpu-c'" in nodes[0]
    assert "<span class=\"badge bad\">slow</span>" in nodes[0]
    assert "<td>41.5</td><td>338.8</td>" in nodes[0]
    pairs = _rows(section, "burnin-pairs")
    assert len(pairs) == 12  # noqa: PLR2004
    assert all("gpu-c" in row.split("</td>")[0] for row in pairs[:4])
    assert "<td>41.5</td><td>338.8</td><td>IB</td>" in pairs[0]
    assert all("badge ok" in row for row in pairs[4:])


def test_no_burnin_no_section() -> None:
    assert "id='burnin'" not in render_fleet_report([{"host": "n1"}], generated="x")


def test_tcp_fallback_in_the_page_names_the_fix() -> None:
    html = render_fleet_report([], burnin=gen.burnin_report("tcp_fallback"))
    row = next(r for r in _rows(html, "burnin-pairs") if "data-pair='gpu-a-gpu-c'" in r)
    assert "tcp_fallback" in row
    assert "NCCL_IB_HCA" in row


def test_markdown_lists_findings_and_both_rankings() -> None:
    text = markdown(gen.burnin_report("suspect_link"))
    assert text.startswith("burn-in: **failed**")
    assert "- suspect link gpu-d-gpu-e" in text
    assert "| gpu-d-gpu-e | slow | 41.5 | 338.8 | IB |" in text


def test_docs_example_is_generated_from_the_fixture_run() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert gen.expected_burnin_page(doc) == doc, "docs/operations.md's example differs. Fix: make docs, then commit"
