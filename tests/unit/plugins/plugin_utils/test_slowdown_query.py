"""slowdown_query: the job's series (Compose member GPUs, Kubernetes pod labels in both spellings, GPUs by index or
UUID), the window, the range queries (every metric they read is one gpuops-counters.csv collects), the window means
from query_range answers (the JSON shape Prometheus returns), and the NVLink peak from real topology captures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.diagnose import slowdown_answer, slowdown_queries
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import slowdown_query as sq
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_slowdown import SlowdownInputError
from conftest import shared_path

REPO = Path(__file__).resolve().parents[4]
COUNTERS = REPO / "roles" / "monitoring_assets" / "files" / "dcgm-exporter" / "gpuops-counters.csv"
MEMBERS = {"alice": {"team": "vision", "gpus": [0, 1]}, "carol": {"team": "vision", "gpus": []}}
T0 = 1_764_000_000
H100_PEAK = 900.0
A100_PEAK = 600.0
ONE_HOUR_STEP = 15
DAY_STEP = 87


def matrix(*series: list[float], step: int = 15) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[T0 + i * step, str(v)] for i, v in enumerate(values)]} for values in series]}}


def test_window_forms_and_step():
    assert sq.parse_window("2025-11-24T16:00:00Z/2025-11-24T17:00:00Z", 0) == {
        "start": 1764000000.0, "end": 1764003600.0, "step": ONE_HOUR_STEP}
    assert sq.parse_window(f"{T0}/now", T0 + 86400)["step"] == DAY_STEP  # a day in at most 1000 points
    assert sq.parse_window("2025-11-24T17:00:00+01:00/now", T0 + 60)["start"] == T0


@pytest.mark.parametrize(("window", "message"), [
    ("2025-11-24T16:00:00Z", "is not <start>/<end>"),
    ("a/b/c", "is not <start>/<end>"),
    ("yesterday/now", "start 'yesterday' is not a time"),
    ("2025-11-24T16:00:00/now", "is not a time; expected RFC 3339 with a zone"),
    (f"{T0}/{T0}", "the end is not after the start"),
])
def test_bad_windows_are_refused(window, message):
    with pytest.raises(SlowdownInputError, match=message):
        sq.parse_window(window, T0 + 100)


def test_compose_member_gpus():
    assert sq.selectors("compose", "alice", members=MEMBERS) == ['gpu=~"0|1"']


@pytest.mark.parametrize(("args", "message"), [
    ({"platform": "compose", "job": "mallory", "members": MEMBERS}, r"not a member of the team .*\['alice', 'carol'\]"),
    ({"platform": "compose", "job": "carol", "members": MEMBERS}, "member 'carol' has no GPUs"),
    ({"platform": "kubernetes", "job": 'x"} or vector(1) #'}, "Kubernetes names are lower-case"),
    ({"platform": "kubernetes", "job": "ok", "namespace": "Bad_NS"}, "Kubernetes names are lower-case"),
    ({"platform": "kubernetes"}, "neither diagnose_job nor diagnose_gpus"),
    ({"platform": "compose", "gpus": "0,gpu1"}, "expected GPU indexes or UUIDs"),
])
def test_selector_input_is_refused_with_the_fix(args, message):
    with pytest.raises(SlowdownInputError, match=message):
        sq.selectors(**args)


def test_kubernetes_job_matches_both_spellings_of_the_pod_labels():
    exported, plain = sq.selectors("kubernetes", "llama.ft", namespace="team-nlp")
    # '.' is a regex metacharacter: escaped, and the backslash doubled for PromQL's string.
    pod = r'"llama\\.ft(-[a-z]+-[0-9]+)?"'
    assert exported == f'exported_namespace=~"team-nlp", exported_pod=~{pod}'
    assert plain == f'namespace=~"team-nlp", pod=~{pod}'
    for name in ("llama.ft", "llama.ft-master-0", "llama.ft-worker-12"):
        assert re.fullmatch(r"llama\.ft(-[a-z]+-[0-9]+)?", name)
    assert not re.fullmatch(r"llama\.ft(-[a-z]+-[0-9]+)?", "llama.ft-eval")


def test_gpus_by_index_and_uuid():
    assert sq.selectors("kubernetes", gpus="0, 3", hosts=["node-b", "node-a"]) == [
        'gpu=~"0|3", Hostname=~"node-a|node-b"']
    uuid = "GPU-5fd8a8b2-6f2e-4b1e-9d7e-0e0f5d7a1c11"
    assert sq.selectors("kubernetes", gpus=[uuid], hosts=["node-a"]) == [f'UUID=~"{uuid}"']
    assert sq.selectors("compose", gpus=[2]) == ['gpu=~"2"']


def counters() -> set[str]:
    return {line.split(",")[0].strip() for line in COUNTERS.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def test_every_metric_the_queries_read_is_collected():
    text = " ".join(sq.queries(['gpu=~"0"'], 31.5, 900).values())
    named = set(re.findall(r"DCGM_FI_[A-Z0-9_]+", text)) - {"DCGM_FI_PROF_PCIE_"}
    named |= {"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}  # the (TX|RX) regex of the PCIe query
    assert named == {"DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_TEMP",
                     "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
                     "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION"}
    assert not named - counters(), f"not in gpuops-counters.csv: {sorted(named - counters())}"


def test_queries_scale_by_the_capacities_and_keep_busy_steps():
    q = sq.queries(['gpu=~"0|1"'], 63.0, 600)
    assert "/ 6.3e+10" in q["pcie_util"]
    assert "* 1048576 / 6e+11" in q["nvlink_util"]
    assert "rate(DCGM_FI_DEV_THERMAL_VIOLATION{gpu=~\"0|1\"}[5m])" in q["throttle_thermal"]
    busy = 'and on() (max(DCGM_FI_DEV_GPU_UTIL{gpu=~"0|1"}) > 0)'
    assert all(q[k].endswith(busy) for k in q if k != "gpu_count")
    with pytest.raises(SlowdownInputError, match="diagnose_pcie_gbps is 0"):
        sq.queries(['gpu="0"'], 0, 600)
    with pytest.raises(SlowdownInputError, match="not a duration"):
        sq.queries(['gpu="0"'], 31.5, 600, "5 minutes")


def test_window_means_from_query_range_answers():
    answers = {"memory_bandwidth_util": matrix([0.4, 0.5, 0.6]), "gpu_temp_c": matrix([70, 72]),
               "nvlink_util": matrix([0.3, 0.5]), "pcie_util": matrix([1.01, 1.01]), "gpu_count": matrix([1, 2, 2]),
               "sm_active": matrix([]), "throttle_thermal": {"status": "success", "data": {"result": []}}}
    means = sq.window_means(answers)
    assert means == {"memory_bandwidth_util": 0.5, "nvlink_util": 0.4, "gpu_temp_c": 71.0, "pcie_util": 1.0,
                     "sm_active": None, "gpu_count": 2, "throttle_thermal": None}
    assert sq.window_means({**answers, "gpu_count": matrix([1])})["nvlink_util"] is None  # single GPU
    assert sq.window_means(answers, nvlink_capacity_known=False)["nvlink_util"] is None


def test_a_refused_query_names_prometheus_reason():
    error = {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unclosed left parenthesis"}
    with pytest.raises(SlowdownInputError, match="refused the sm_active query: 1:5: parse error"):
        sq.window_means({"sm_active": error})


@pytest.mark.parametrize(("capture", "peak"), [
    ("h100x8_sxm_2numa_noNIC.txt", H100_PEAK),  # NV18 between every pair: 18 x 25 GB/s x 2
    ("dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt", A100_PEAK),  # NV12
    ("a10x4_pcie_sys_2nic.txt", None),  # no NVLink
])
def test_nvlink_peak_from_real_topology_captures(capture, peak):
    topology = parse_topology(shared_path("nvidia-smi", "topo", capture).read_text())
    assert sq.nvlink_peak_gbps(topology) == peak


def test_filter_builds_window_selectors_capacities_and_queries():
    q = slowdown_queries("compose", job="alice", members=MEMBERS, now=T0, lookback_s=3600, pcie_gen=5,
                         topologies=[None, {"gpus": [{"index": 0, "nvlink_peers": {"1": 12}}]}])
    assert (q["start"], q["end"], q["step"]) == (T0 - 3600, T0, ONE_HOUR_STEP)
    assert q["start_utc"] == "2025-11-24T15:00:00Z"
    assert (q["pcie_gbps"], q["nvlink_peak_gbps"], q["nvlink_capacity_known"]) == (63.0, A100_PEAK, True)
    assert q["selectors"] == ['gpu=~"0|1"']
    unknown = slowdown_queries("compose", job="alice", members=MEMBERS, now=T0, nvlink_peak_gbps=None)
    assert unknown["nvlink_capacity_known"] is False
    with pytest.raises(AnsibleFilterError, match="validate_pcie_gen 6 is not one of"):
        slowdown_queries("compose", job="alice", members=MEMBERS, now=T0, pcie_gen=6)


def test_an_option_left_out_is_its_role_setting_s_default(monkeypatch):
    """lookback_s, rate_window and pcie_gen have one home, the diagnose and validate roles' defaults files: the
    filter reads them there (a copy of its own would not follow a changed file)."""
    defaults = {"diagnose": {"diagnose_lookback_s": 600, "diagnose_rate_window": "7m"},
                "validate": {"validate_pcie_gen": 5}}
    monkeypatch.setattr(sq, "role_defaults", defaults.__getitem__)
    q = slowdown_queries("compose", job="alice", members=MEMBERS, now=T0)
    assert (q["start"], q["end"], q["pcie_gbps"]) == (T0 - 600, T0, 63.0)
    assert "[7m]" in q["queries"]["throttle_thermal"]
    given = slowdown_queries("compose", job="alice", members=MEMBERS, now=T0, lookback_s=60, rate_window="1m")
    assert (given["start"], "[1m]" in given["queries"]["throttle_thermal"]) == (T0 - 60, True)


def test_answer_says_slow_healthy_or_no_data():
    slow = slowdown_answer({"memory_bandwidth_util": matrix([0.2, 0.3]), "gpu_count": matrix([1])},
                           about={"job": "alice", "where": "gpu1", "platform": "compose", "window": "w"})
    assert slow["verdict"] == "slow"
    assert [c["cause"] for c in slow["causes"]] == ["input_bound"]
    assert slow["lines"][0] == "Is training slow? alice on gpu1 (compose), w"
    assert slow["lines"][2].startswith("1. input_bound: memory bandwidth 25% < 60%")
    healthy = slowdown_answer({"memory_bandwidth_util": matrix([0.8])})
    assert healthy["verdict"] == "healthy"
    assert healthy["lines"][-1].startswith("HEALTHY: no signal past its threshold (not measured: nvlink_util")
    nothing = slowdown_answer({"memory_bandwidth_util": matrix()})
    assert nothing["verdict"] == "no data"
    assert nothing["lines"][-1].startswith("NO DATA")


def test_training_health_dashboard_names_the_command_and_the_lines():
    dashboard = json.loads((REPO / "roles" / "monitoring_assets" / "files" / "grafana" / "dashboards"
                            / "gpuops-training-health.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p.get("type") == "text"]
    text = panel["options"]["content"]
    assert "playbooks/diagnose.yml -e diagnose_job=" in text
    assert "docs/operations.md#is-training-slow" in text
    for line in ("< 60%", "< 80%", "> 80 °C", "≥ 70%", "< 50%"):
        assert line in text
