"""The GPU health alerts (roles/monitoring_assets/files/prometheus/rules/gpu.rules.yml): each Xid bucket alert lists
exactly the Xid catalog's codes of its bucket (../shared/data/xid/xid-catalog.csv), and every health alert tells
the operator to run the health playbook for the host."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import yaml
from conftest import shared_path

RULES = Path(__file__).resolve().parents[3] / "roles/monitoring_assets/files/prometheus/rules/gpu.rules.yml"
# alert -> the catalog buckets whose codes it fires on
BUCKET_ALERTS = {
    "GpuXidRestartBm": {"RESTART_BM"},
    "GpuXidResetGpu": {"RESET_GPU"},
    "GpuXidContactSupport": {"CONTACT_SUPPORT", "CHECK_MECHANICALS"},
    "GpuXidWorkflow": {"WORKFLOW_XID_45", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR", "XID_154"},
    "GpuXidRestartApp": {"RESTART_APP"},
}
HEALTH_ALERTS = {*BUCKET_ALERTS, "GpuNvlinkErrors", "GpuThrottled", "GpuEccUncorrectableErrors", "GpuRowRemapFailure"}


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_each_bucket_alert_lists_exactly_the_catalogs_codes():
    rows = list(csv.DictReader(shared_path("xid", "xid-catalog.csv").open(encoding="utf-8")))
    found = alerts()
    for name, buckets in BUCKET_ALERTS.items():
        expected = {int(r["xid"]) for r in rows if r["immediate_action"] in buckets}
        listed = {int(c) for m in re.findall(r'xid=~"([0-9|]+)"', found[name]["expr"]) for c in m.split("|")}
        assert listed == expected, (name, sorted(listed ^ expected))


def test_every_health_alert_names_the_health_playbook_for_its_host():
    found = alerts()
    for name in HEALTH_ALERTS:
        assert "gpuops-run health --limit {{ $labels.Hostname }}" in found[name]["annotations"]["action"], name
