"""The fleet report in real headless Chromium (Debian's `chromium`, installed by scripts/bootstrap.sh):
a screenshot of a fixture fleet's page (build/report/fleet-report.png) and assertions on the laid-out DOM.

The page itself carries no script. The test loads a copy with one inline script appended that measures
the rendered elements (getBoundingClientRect) and writes the numbers into the DOM, then reads them back
with --dump-dom: so the assertions are about what Chromium laid out, not about the HTML text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils.fleet_report import render_fleet_report
from fleet_fixture import fleet

REPO_ROOT = Path(__file__).resolve().parents[2]
OUT = REPO_ROOT / "build" / "report"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-dev-shm-usage", "--virtual-time-budget=2000"]
MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; };
const hosts = {};
document.querySelectorAll('section.host').forEach(s => {
  const svg = s.querySelector('svg.topo');
  hosts[s.id.replace('host-', '')] = svg ? {
    svg: box(svg),
    gpus: [...svg.querySelectorAll('g.gpu rect')].filter(r => box(r)[0] > 0 && box(r)[1] > 0).length,
    nvlinks: [...svg.querySelectorAll('path.nvlink')].filter(p => p.getTotalLength() > 0).length,
    numa: [...svg.querySelectorAll('text.numa-label')].map(t => t.textContent),
    nics: svg.querySelectorAll('g.nic').length,
  } : null;
});
const rows = [...document.querySelectorAll('#fleet tbody tr')].map(tr => ({
  host: tr.dataset.host, cls: tr.className, validate: tr.querySelector('td.validate').innerText.trim(),
  height: box(tr)[1]}));
const external = [...document.querySelectorAll('[src],[href]')]
  .map(e => e.getAttribute('src') || e.getAttribute('href')).filter(u => !u.startsWith('#'));
const pre = document.createElement('pre'); pre.id = 'measured';
pre.textContent = JSON.stringify({hosts, rows, external, table: box(document.querySelector('#fleet'))});
document.body.appendChild(pre);
</script>"""

DGX_GPUS = 8
DGX_NVLINK_PAIRS = 8 * 7 // 2  # NV12 between every pair of the DGX A100's GPUs
MIN_SVG = (400, 150)  # px: a drawing, not a collapsed box
BLANK_PNG_BYTES = 50_000  # a blank 1400x2400 page compresses to a few kB
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/bootstrap.sh installs it)")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    html = render_fleet_report(fleet(), "20261201T061500Z")
    path = OUT / "fleet-report.html"
    path.write_text(html)
    return path


def test_screenshot(page):
    png = OUT / "fleet-report.png"
    png.unlink(missing_ok=True)
    subprocess.run([CHROMIUM, *FLAGS, "--window-size=1400,2400", f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 2400)
    assert len(data) > BLANK_PNG_BYTES


def test_laid_out_dom(page, tmp_path):
    probe = tmp_path / "measure.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run([CHROMIUM, *FLAGS, "--window-size=1400,2400", "--dump-dom", probe.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    measured = json.loads(re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    hosts = measured["hosts"]
    dgx = hosts["dgx05"]
    assert dgx["gpus"] == DGX_GPUS, "8 GPU boxes with a real size in the 8-GPU DGX A100 capture"
    assert dgx["nvlinks"] == DGX_NVLINK_PAIRS, "an NVLink arc for each GPU pair"
    assert dgx["numa"] == ["NUMA 1", "NUMA 3", "NUMA 5", "NUMA 7"]
    assert dgx["nics"] > 0
    assert dgx["svg"][0] > MIN_SVG[0]
    assert dgx["svg"][1] > MIN_SVG[1]
    assert hosts["hgx-h100-01"]["gpus"] == DGX_GPUS
    assert hosts["a10-box"]["nvlinks"] == 0
    assert hosts["cpu-login"] is None
    rows = {r["host"]: r for r in measured["rows"]}
    assert set(rows) == {"dgx05", "hgx-h100-01", "a10-box", "cpu-login"}
    assert rows["hgx-h100-01"]["cls"] == "row-bad"
    assert rows["cpu-login"]["validate"] == "skipped"
    assert rows["a10-box"]["validate"] == "failed"
    assert all(r["height"] > 0 for r in rows.values())
    assert measured["external"] == [], "self-contained: no external asset"
