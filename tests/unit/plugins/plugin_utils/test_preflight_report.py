"""The run's reports, written once by one controller-side function, and their sections."""

from __future__ import annotations

import json
import stat

from ansible_collections.gpuops.cluster.plugins.plugin_utils import preflight_report
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import finish


def record(host: str, ok: bool = True) -> dict:
    checks = [{"name": "os_supported", "ok": ok, "status": "ok" if ok else "failed", "msg": "Debian 12.7 | fine"}]
    result = finish(
        {"checks": checks, "compat": None, "driver_pin": None},
        {"platform": "compose", "source": "auto", "reason": "small"},
    )
    return {
        "host": host,
        "gpu": {
            "present": True,
            "count": 1,
            "source": "nvml",
            "gpus": [{"index": 0, "name": "NVIDIA L4", "nvlink": 0}],
        },
        "host_facts": {
            "os": {
                "distribution": "Debian",
                "distribution_version": "12.7",
                "kernel": "6.1",
                "architecture": "x86_64",
                "secure_boot": False,
            }
        },
        "plan": {"driver_version": "535.261.03", "cuda_version": "12.2", "platform": "auto"},
        "result": result,
        "fleet": {"platform": "compose"},
    }


def test_every_host_gets_json_and_markdown_and_the_run_a_fleet_file(tmp_path):
    records = {"n1": record("n1"), "n2": record("n2", ok=False)}
    written = preflight_report.write_reports(str(tmp_path / "run"), records, {"platform": "compose", "gpu_count": 2})
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "fleet.json",
        "index.html",
        "n1.json",
        "n1.md",
        "n2.json",
        "n2.md",
    ]
    assert written["n1"] == str(tmp_path / "run" / "n1.md")
    report = json.loads((tmp_path / "run" / "n1.json").read_text())
    assert set(report) >= {"host", "os", "gpu", "topology", "plan", "result"}
    assert report["os"] == "Debian 12.7"
    md = (tmp_path / "run" / "n2.md").read_text()
    assert "| platform | **compose** (auto: small) |" in md
    assert "| verdict | REFUSED: os_supported |" in md
    assert "Debian 12.7 \\| fine" in md  # a pipe in a message does not break the table
    fleet = json.loads((tmp_path / "run" / "fleet.json").read_text())
    assert fleet["ok"] is False
    assert fleet["hosts"]["n2"]["failed_checks"] == ["os_supported"]
    assert stat.S_IMODE((tmp_path / "run" / "n1.json").stat().st_mode) == preflight_report.FILE_MODE
    page = (tmp_path / "run" / "index.html").read_text()
    assert "data-host='n1'" in page
    assert "<tr class='row-bad' data-host='n2'>" in page, "the refused host is marked on the fleet page"


def test_a_section_lands_in_json_and_markdown(tmp_path, monkeypatch):
    def kubelet(rec, hostvars):
        return {
            "name": "kubelet",
            "title": "Kubelet policy",
            "rows": [["topologyManagerPolicy", hostvars["policy"]]],
            "data": {"p": 1},
        }

    monkeypatch.setattr(preflight_report, "kubelet_section", kubelet)
    rec = record("n1")
    preflight_report.add_sections(rec, {"policy": "single-numa-node"})
    preflight_report.write_reports(str(tmp_path), {"n1": rec}, {})
    assert json.loads((tmp_path / "n1.json").read_text())["sections"]["kubelet"]["data"] == {"p": 1}
    assert "## Kubelet policy" in (tmp_path / "n1.md").read_text()
    assert "| topologyManagerPolicy | single-numa-node |" in (tmp_path / "n1.md").read_text()


def test_a_warned_topology_and_the_running_driver_judged_are_in_the_report(tmp_path):
    """preflight_topology_required: false (status warn) and no driver pin (judged against the running driver)."""
    rec = record("h200")
    warn = {"name": "topology", "ok": True, "status": "warn", "msg": "h200: 1 GPU(s) seen, but their topology ..."}
    rec["result"] = finish(
        {"checks": [*rec["result"]["checks"], warn], "compat": None, "driver_pin": None,
         "driver_judged": {"version": "580.159.04", "source": "running"}},
        {"platform": "compose", "source": "auto", "reason": "small"},
    )
    assert rec["result"]["ok"] is True
    assert rec["result"]["warned_checks"] == ["topology"]
    preflight_report.write_reports(str(tmp_path), {"h200": rec}, {})
    md = (tmp_path / "h200.md").read_text()
    assert "| verdict | PASS |" in md
    assert "| topology | warn | h200: 1 GPU(s) seen, but their topology ... |" in md
    assert "| driver CUDA was judged against | 580.159.04 (running) |" in md
    assert "topology: h200: 1 GPU(s) seen" in (tmp_path / "index.html").read_text()
    line = preflight_report.summary_line("h200", rec, "/r/h200.md")
    assert line.startswith("h200: PASS, 1 GPUs via nvml; ")
    assert "; warn topology; warning: h200: 1 GPU(s) seen, but their topology ...; report /r/h200.md" in line
