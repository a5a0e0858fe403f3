"""Fleet report renderer: rows per host, an SVG per host drawn from real topology captures, no external assets.
(The page in a real browser: tests/report/.)"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpuops.cluster.plugins.plugin_utils.fleet_report import (
    host_row,
    render_fleet_report,
    topology_svg,
)
from fleet_fixture import fleet

SVG = "{http://www.w3.org/2000/svg}"
DGX_GPUS = 8
DGX_NVLINK_PAIRS = 8 * 7 // 2  # NV12 between every pair
HOSTS_WITH_TOPOLOGY = 3


def svg_of(host):
    return ET.fromstring(topology_svg(host["topology"], host["host"]))


def test_dgx_a100_drawing_has_8_gpus_28_nvlinks_4_numa_nodes_and_its_nics():
    host = fleet()[0]
    svg = svg_of(host)
    assert svg.get("data-gpus") == "8"
    assert len(svg.findall(f".//{SVG}g[@class='gpu']")) == DGX_GPUS
    assert len(svg.findall(f".//{SVG}path[@class='nvlink']")) == DGX_NVLINK_PAIRS
    labels = sorted(t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "numa-label")
    # NPS4 on two sockets: the GPUs sit on NUMA nodes 1, 3, 5 and 7 of this capture.
    assert labels == ["NUMA 1", "NUMA 3", "NUMA 5", "NUMA 7"]
    assert int(svg.get("data-nics")) == len(host["topology"]["nics"]) > 0
    assert svg.findall(f".//{SVG}line[@class='niclink']"), "nearest-NIC links drawn"


def test_pcie_host_has_no_nvlink_arcs():
    svg = svg_of(fleet()[2])
    assert svg.get("data-gpus") == "4"
    assert svg.findall(f".//{SVG}path[@class='nvlink']") == []


def test_no_topology_draws_nothing():
    assert topology_svg(None) == ""
    assert topology_svg({"gpus": []}) == ""


def test_rows():
    rows = {r["host"]: r for r in map(host_row, fleet())}
    assert rows["dgx05"]["gpus"] == "8 x NVIDIA A100-SXM4-80GB"
    assert rows["dgx05"]["validate"] == "ok"
    assert rows["dgx05"]["fabric_manager"] == "required, completed"
    assert rows["hgx-h100-01"]["ok"] is False
    assert rows["hgx-h100-01"]["warnings"] == ["fabric_manager: fabric state In Progress"]
    assert rows["a10-box"]["validate"] == "failed"
    assert rows["cpu-login"]["gpus"] == "no GPU"
    assert rows["cpu-login"]["validate"] == "skipped", "a host without GPUs never shows validate ok"


def test_page_is_self_contained_and_escaped():
    hosts = fleet()
    hosts[3]["host"] = "cpu-login<script>"
    page = render_fleet_report(hosts, "20261201T061500Z")
    assert "<script>" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no external assets"
    assert "<link" not in page
    assert page.count("<svg") == HOSTS_WITH_TOPOLOGY, "one drawing per host with a topology"
    assert "skipped: no GPU" in page


def test_slowdown_answer_is_a_section_with_causes_in_order():
    answer = {"job": "bert-topo", "window": "2026-12-01T09:00:00Z/2026-12-01T11:00:00Z", "verdict": "slow",
              "signals": {"memory_bandwidth_util": 0.55, "nvlink_util": 0.22, "sm_active": None},
              "causes": [{"cause": "topology", "summary": "NVLink 22% < 80% across 2 GPUs", "fix": "check <topo>"},
                         {"cause": "input_bound", "summary": "memory bandwidth 55% < 60%", "fix": "more workers"}]}
    page = render_fleet_report([{"host": "cp1", "slowdown": answer}, {"host": "gpu1"}], "20261201T110000Z")
    section = re.search(r"<section class='host slowdown' data-job='bert-topo'>.*?</section>", page, re.S).group(0)
    assert "Is training slow? bert-topo" in section
    assert "<span class=\"badge bad\">slow</span>" in section
    assert "window means: memory_bandwidth_util 0.55, nvlink_util 0.22" in section  # None left out
    rows = re.findall(r"<tr><td>(\d)</td><td>(\w+)</td>", section)
    assert rows == [("1", "topology"), ("2", "input_bound")]
    assert "check &lt;topo&gt;" in section  # escaped
    healthy = render_fleet_report([{"host": "h", "slowdown": {**answer, "verdict": "healthy", "causes": []}}])
    assert "<span class=\"badge ok\">healthy</span>" in healthy
    assert "slowdown-causes" not in healthy
    assert "slowdown" not in render_fleet_report([{"host": "gpu1"}])
