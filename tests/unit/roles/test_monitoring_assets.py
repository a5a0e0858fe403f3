"""The monitoring assets (roles/monitoring_assets/files) use only metrics that really exist.

* every DCGM field we ask dcgm-exporter for is one its own counters CSVs list
  (../shared/data/dcgm-exporter, NVIDIA/dcgm-exporter@d5e5f510);
* every metric name in the alert rules and in the dashboards is collected by our counters
  file, defined by our recording rules, or a node-exporter/Prometheus metric from a short
  list below (which the `compose` Molecule scenario checks against a real node-exporter);
* dashboards parse and query the data source that provisioning creates;
* the Alertmanager inhibit rules name alerts that exist.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

ASSETS = Path(__file__).resolve().parents[3] / "roles" / "monitoring_assets" / "files"
RULE_FILES = sorted((ASSETS / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((ASSETS / "grafana" / "dashboards").glob("*.json"))
COUNTERS = ASSETS / "dcgm-exporter" / "gpuops-counters.csv"
DATASOURCES = ASSETS / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

# Metrics that do not come from dcgm-exporter. Names from node-exporter 1.x's default
# collectors (cpu, diskstats, netdev) and Prometheus itself (up, ALERTS). The compose
# scenario's verify asks the running Prometheus for a series of each.
NODE_AND_PROMETHEUS_METRICS = {
    "up",
    "ALERTS",
    "node_cpu_seconds_total",
    "node_disk_read_bytes_total",
    "node_network_receive_bytes_total",
}

PROMQL_KEYWORDS = {
    "and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (functions, labels and keywords left out)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range selectors, including [$__rate_interval]
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+\S+", " ", s)
    s = re.sub(r"\$\{?\w+\}?", " 0 ", s)  # Grafana variables
    s = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " 0 ", s)  # numbers, 31.5e9
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = match.group(0)
        if s[match.end():].lstrip().startswith("("):
            continue  # a function or aggregation
        if word.lower() in PROMQL_KEYWORDS:
            continue
        names.add(word)
    return names


def csv_fields(path: Path, include_commented: bool) -> set[str]:
    """DCGM field names in a dcgm-exporter counters CSV."""
    fields = set()
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("#"):
            if not include_commented:
                continue
            text = text.lstrip("#").strip()
        if not text:
            continue
        first = next(csv.reader([text]))[0].strip()
        if re.fullmatch(r"DCGM_(FI|EXP)_[A-Z0-9_]+", first):
            fields.add(first)
    return fields


def load_rules() -> list[dict]:
    rules = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            rules.extend(group["rules"])
    return rules


def recorded_names() -> set[str]:
    return {r["record"] for r in load_rules() if "record" in r}


def sweep_metric_names() -> set[str]:
    """The gpuops_gpu_health_* names the scheduled health sweep writes (gpu_health_metrics), read from what it writes
    for a real capture: the A100 SXM4 x4 nvidia-smi -q (row remap counters) with a real Xid 79 line."""
    # Imported here: the compose scenario's verifier imports this module for its rule and dashboard helpers, where
    # neither the collection nor tests/unit's conftest (shared_path) is importable.
    from ansible_collections.gpuops.cluster.plugins.module_utils import (  # noqa: PLC0415 (see above)
        gpu_health,
        gpu_health_metrics,
    )
    from conftest import shared_path  # noqa: PLC0415 (see above)

    state = shared_path("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt").read_text()
    line = "kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    result = gpu_health.sweep(lambda argv: (127, "", ""), lambda name: None, kernel_log_text=line, dcgm_level=0,
                              state_text=state)
    text = gpu_health_metrics.format_metrics(result, gpu_health_metrics.count_events([], result["events"],
                                                                                     result["gpus"], 0.0), 0.0)
    return set(re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE))


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    return exprs


def template_metric_names(dashboard: dict) -> set[str]:
    names = set()
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var.get("type") == "query" and isinstance(query, str):
            match = re.match(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", query)
            if match:
                names.add(match.group(1))
    return names


def provisioned_datasource() -> dict:
    return yaml.safe_load(DATASOURCES.read_text())["datasources"][0]


# --- the extractor itself -------------------------------------------------------------

@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("DCGM_FI_DEV_GPU_TEMP > 85", {"DCGM_FI_DEV_GPU_TEMP"}),
        ('sum by (instance) (rate(node_cpu_seconds_total{mode="iowait"}[$__rate_interval]))',
         {"node_cpu_seconds_total"}),
        ("gpuops:dcgm_pcie_bytes_per_second:sum / (2 * 31.5e9)", {"gpuops:dcgm_pcie_bytes_per_second:sum"}),
        ('x{a="b", c=~"$gpu"} / ($nvlink_peak_gbps * 1e9) * 100 and on (gpu) y offset 5m', {"x", "y"}),
        ('count by (alertname) (ALERTS{alertstate="firing"})', {"ALERTS"}),
    ],
)
def test_metric_names_extractor(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


def test_csv_fields_reads_commented_and_spaced_lines(tmp_path: Path) -> None:
    sample = tmp_path / "c.csv"
    sample.write_text("# Format\nDCGM_FI_DEV_DEC_UTIL ,     gauge, x\n# DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, y\n")
    assert csv_fields(sample, include_commented=False) == {"DCGM_FI_DEV_DEC_UTIL"}
    assert csv_fields(sample, include_commented=True) == {"DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"}


# --- real checks ------------------------------------------------------------------------

def test_assets_present() -> None:
    assert RULE_FILES, "no rule files in roles/monitoring_assets/files/prometheus/rules"
    names = {p.name for p in DASHBOARDS}
    assert {"nvidia-dcgm-exporter.json", "gpuops-training-health.json"} <= names, names
    assert COUNTERS.is_file()


def test_counters_are_fields_dcgm_exporter_knows(shared_data: Path) -> None:
    upstream = set()
    for name in ("default-counters.csv", "dcp-metrics-included.csv"):
        upstream |= csv_fields(shared_data / "dcgm-exporter" / name, include_commented=True)
    ours = csv_fields(COUNTERS, include_commented=False)
    unknown = sorted(ours - upstream)
    assert not unknown, f"gpuops-counters.csv asks for fields dcgm-exporter does not list: {unknown}"


def test_shipped_dcgm_dashboard_is_upstream_unmodified(shared_data: Path) -> None:
    """NVIDIA's dashboard is shipped as published, so its provenance in SOURCES.md holds."""
    shipped = json.loads((ASSETS / "grafana" / "dashboards" / "nvidia-dcgm-exporter.json").read_text())
    upstream = json.loads((shared_data / "dcgm-exporter" / "dcgm-exporter-dashboard.json").read_text())
    assert shipped == upstream, "nvidia-dcgm-exporter.json must stay identical to the upstream file (see SOURCES.md)"


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=[p.name for p in RULE_FILES])
def test_rule_metrics_exist(rule_file: Path) -> None:
    collected = csv_fields(COUNTERS, include_commented=False)
    allowed = collected | recorded_names() | NODE_AND_PROMETHEUS_METRICS | sweep_metric_names()
    problems = []
    for group in yaml.safe_load(rule_file.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            for metric in sorted(metric_names(rule["expr"]) - allowed):
                problems.append(f"{name}: {metric}")
    assert not problems, f"rules use metrics nothing emits: {problems}"


def recording_dependency_problems(groups: list[dict]) -> list[str]:
    """Rules that read a recording rule defined in another group, or later in their own group.

    Prometheus evaluates the rules of one group in order but groups independently, so such a
    rule reads the previous evaluation's value: a lag in production, a flaky promtool test.
    """
    defined_in = {r["record"]: g["name"] for g in groups for r in g["rules"] if "record" in r}
    problems = []
    for group in groups:
        seen: set[str] = set()
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            for metric in sorted(metric_names(rule["expr"]) & set(defined_in)):
                if defined_in[metric] != group["name"]:
                    problems.append(f"{name} (group {group['name']}) reads {metric} from group {defined_in[metric]}")
                elif metric not in seen:
                    problems.append(f"{name} reads {metric} before the rule that records it")
            if "record" in rule:
                seen.add(rule["record"])
    return problems


def test_recording_dependency_checker_catches_cross_group_and_order() -> None:
    groups = [
        {"name": "rec", "rules": [{"record": "a:b", "expr": "x"}]},
        {"name": "alerts", "rules": [{"alert": "A", "expr": "a:b > 1"},
                                     {"alert": "B", "expr": "c:d > 1"}, {"record": "c:d", "expr": "y"}]},
    ]
    assert recording_dependency_problems(groups) == [
        "A (group alerts) reads a:b from group rec",
        "B reads c:d before the rule that records it",
    ]


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=[p.name for p in RULE_FILES])
def test_recorded_series_are_read_in_their_own_group_after_the_record(rule_file: Path) -> None:
    groups = yaml.safe_load(rule_file.read_text())["groups"]
    assert not recording_dependency_problems(groups)


def test_alert_rules_are_complete() -> None:
    alerts = [r for r in load_rules() if "alert" in r]
    names = [a["alert"] for a in alerts]
    assert len(names) == len(set(names)), f"duplicate alert names: {names}"
    for alert in alerts:
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert["alert"]
        assert alert["annotations"].get("summary"), alert["alert"]
        assert alert["annotations"].get("description"), alert["alert"]
    required = {
        "GpuUtilisationSustainedHigh", "GpuMemoryNearlyFull", "GpuTemperatureCritical", "GpuTemperatureWarning",
        "GpuPcieThroughputLow", "GpuXidError", "GpuEccUncorrectableErrors",
    }
    assert required <= set(names), f"missing alerts: {sorted(required - set(names))}"


@pytest.mark.parametrize("dashboard_file", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_metrics_exist(dashboard_file: Path) -> None:
    dashboard = json.loads(dashboard_file.read_text())
    collected = csv_fields(COUNTERS, include_commented=False)
    allowed = collected | recorded_names() | NODE_AND_PROMETHEUS_METRICS
    exprs = dashboard_exprs(dashboard)
    assert exprs, f"{dashboard_file.name}: no panel queries"
    used = set().union(*(metric_names(e) for e in exprs)) | template_metric_names(dashboard)
    assert not sorted(used - allowed), f"{dashboard_file.name}: metrics nothing emits: {sorted(used - allowed)}"


@pytest.mark.parametrize("dashboard_file", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_dashboard_uses_provisioned_datasource(dashboard_file: Path) -> None:
    dashboard = json.loads(dashboard_file.read_text())
    source = provisioned_datasource()
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    via_variable = {"$datasource", "${datasource}"}
    ds_var = variables.get("datasource")
    if ds_var is not None:
        assert ds_var["type"] == "datasource"
        assert ds_var["query"] == source["type"]
        current = ds_var.get("current", {})
        assert {current.get("text"), current.get("value")} & {source["name"], source["uid"]}, (
            f"{dashboard_file.name}: datasource variable defaults to {current}, not the provisioned "
            f"{source['name']} ({source['uid']})"
        )

    def refs(panels):
        for panel in panels:
            if panel.get("type") not in ("row", "text"):  # rows and text panels query nothing
                yield panel.get("title"), panel.get("datasource")
                for target in panel.get("targets", []):
                    if "datasource" in target:
                        yield panel.get("title"), target["datasource"]
            yield from refs(panel.get("panels", []))

    for title, ref in refs(dashboard["panels"]):
        value = ref.get("uid") if isinstance(ref, dict) else ref
        if value in via_variable:
            assert ds_var is not None, f"{dashboard_file.name}: panel {title!r} uses $datasource, which is not defined"
        else:
            assert value in {source["uid"], source["name"]}, (
                f"{dashboard_file.name}: panel {title!r} queries datasource {ref!r}, not the provisioned one"
            )


def test_dashboard_uids_unique() -> None:
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids)), uids


def test_inhibit_rules_name_real_alerts() -> None:
    names = {r["alert"] for r in load_rules() if "alert" in r}
    inhibit = yaml.safe_load((ASSETS / "alertmanager" / "inhibit_rules.yml").read_text())
    for rule in inhibit:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            key, _sep, value = (part.strip() for part in matcher.partition("="))
            if key == "alertname":
                assert value in names, f"inhibit rule names unknown alert {value!r}"


def test_provisioned_datasource_url_comes_from_environment() -> None:
    source = provisioned_datasource()
    assert source["type"] == "prometheus"
    assert source["url"] == "${GPUOPS_PROMETHEUS_URL}"
