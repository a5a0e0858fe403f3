"""diagnose.yml's "is training slow?" against a real Prometheus (Debian's prometheus/promtool 2.42 here).

Labelled DCGM series, as dcgm-exporter and Prometheus store them, are written as OpenMetrics, turned into TSDB
blocks with `promtool tsdb create-blocks-from openmetrics`, and served by `prometheus` on a free loopback port
from that storage. Then ansible-playbook runs playbooks/diagnose.yml on localhost (connection local) with the same
tasks and filters a site runs, against that Prometheus, and the answer in slowdown.json is checked:

- Kubernetes, three jobs side by side on three nodes: `resnet-input` (input-bound; its pod labels renamed
  exported_pod/exported_namespace as the GPU Operator's ServiceMonitor with honorLabels: false leaves them),
  `bert-topo` (topology-bound; two worker pods, plain pod/namespace labels as with honorLabels: true) and
  `gpt-healthy` (healthy);
  The healthy job goes the Kubernetes default way, `kubectl get --raw` through the API server's service proxy,
  with a stand-in kubectl that checks the proxy path and forwards the rest to this Prometheus (no API server here);
- Compose: member alice's GPUs (gpuops_plan.team.members) running hot, then idle (the idle steps must not count),
  Prometheus found from the stack's own variables (compose_stack_bind_address, compose_stack_ports.prometheus);
- a window with diagnose_gpus (UUIDs) instead of a job, and a job without series ("no data"): the same filters
  the playbook calls (slowdown_queries, slowdown_answer) with the same POST to /api/v1/query_range, without a
  playbook run each (they cost ~30 s apiece on 2 cores).

Without prometheus or promtool these tests skip with the reason "prometheus is not available"; under CI=true
that skip fails (tests/ci_skips.py).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.diagnose import slowdown_answer, slowdown_queries
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import SCHEMA_VERSION
from ansible_env import playbook_env

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
PROMETHEUS = os.environ.get("GPUOPS_PROMETHEUS") or shutil.which("prometheus")
PROMTOOL = os.environ.get("GPUOPS_PROMTOOL") or shutil.which("promtool")
STEP = 15
JOB_GPUS = 2
TEMP_MAX_C = 80
HTTP_OK = 200
NVLINK_PEAK_GBPS = 900.0  # H100: 18 links x 25 GB/s x 2 directions, as gpuops_plan's topology below says
PCIE_GBPS = 31.5  # Gen4 x16, one direction
pytestmark = pytest.mark.skipif(not (PROMETHEUS and PROMTOOL),
                                reason="prometheus is not available: install Debian package `prometheus` (it ships "
                                       "/usr/bin/prometheus and /usr/bin/promtool) or set GPUOPS_PROMETHEUS and "
                                       "GPUOPS_PROMTOOL")

# name -> (labels of each GPU series, {signal: level}); levels are the means the series wobble around.
JOB_WINDOW = (0, 30 * 60)  # seconds after T0
COMPOSE_BUSY, COMPOSE_IDLE = (40 * 60, 70 * 60), (70 * 60, 100 * 60)
TARGET = {"instance": "10.0.1.7:9400", "job": "nvidia-dcgm-exporter", "container": "nvidia-dcgm-exporter",
          "pod": "nvidia-dcgm-exporter-x2v9k", "namespace": "gpu-operator"}


def gpu(node: str, index: int, **extra) -> dict:
    return {"gpu": str(index), "UUID": f"GPU-{node}-{index:04d}-0000-0000-000000000000", "device": f"nvidia{index}",
            "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node, **extra}


def exported(ns: str, pod: str) -> dict:
    return {**TARGET, "exported_namespace": ns, "exported_pod": pod, "exported_container": "pytorch"}


def plain(ns: str, pod: str) -> dict:
    return {"instance": "10.0.1.8:9400", "job": "nvidia-dcgm-exporter", "namespace": ns, "pod": pod,
            "container": "pytorch"}


LEVELS = {
    # memory bandwidth, NVLink share, temperature, PCIe share (busier direction), SM active, thermal throttle share
    "input": {"dram": 0.28, "nvlink": 0.45, "temp": 64, "pcie": 0.08, "sm": 0.30, "throttle": 0.0, "util": 38},
    "topology": {"dram": 0.55, "nvlink": 0.22, "temp": 69, "pcie": 0.45, "sm": 0.62, "throttle": 0.0, "util": 91},
    "healthy": {"dram": 0.74, "nvlink": 0.88, "temp": 71, "pcie": 0.12, "sm": 0.86, "throttle": 0.0, "util": 98},
    "hot": {"dram": 0.72, "nvlink": 0.90, "temp": 86, "pcie": 0.10, "sm": 0.80, "throttle": 0.35, "util": 97},
    "idle": {"dram": 0.0, "nvlink": 0.0, "temp": 34, "pcie": 0.0, "sm": 0.0, "throttle": 0.0, "util": 0},
}
SERIES = [
    # (GPU labels, level, window)
    (gpu("node-a", 0, **exported("team-vision", "resnet-input-master-0")), "input", JOB_WINDOW),
    (gpu("node-a", 1, **exported("team-vision", "resnet-input-master-0")), "input", JOB_WINDOW),
    (gpu("node-b", 0, **plain("team-nlp", "bert-topo-worker-0")), "topology", JOB_WINDOW),
    (gpu("node-b", 1, **plain("team-nlp", "bert-topo-worker-1")), "topology", JOB_WINDOW),
    (gpu("node-c", 4, **exported("team-nlp", "gpt-healthy-master-0")), "healthy", JOB_WINDOW),
    (gpu("node-c", 5, **exported("team-nlp", "gpt-healthy-master-0")), "healthy", JOB_WINDOW),
    # Compose (one host's Prometheus, scrape job dcgm-exporter): alice has GPUs 0 and 1, busy then idle.
    (gpu("c0ffee", 0, instance="dcgm-exporter:9400", job="dcgm-exporter"), "hot", COMPOSE_BUSY),
    (gpu("c0ffee", 1, instance="dcgm-exporter:9400", job="dcgm-exporter"), "hot", COMPOSE_BUSY),
    (gpu("c0ffee", 0, instance="dcgm-exporter:9400", job="dcgm-exporter"), "idle", COMPOSE_IDLE),
    (gpu("c0ffee", 1, instance="dcgm-exporter:9400", job="dcgm-exporter"), "idle", COMPOSE_IDLE),
]


def clamp(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def samples(level: dict, n: int, throttled_ns: float) -> dict[str, float]:
    wobble = 0.03 * math.sin(n / 3.0)  # +-3 points around the level, mean ~0 over the window
    pcie = clamp(level["pcie"] + wobble) * PCIE_GBPS * 1e9
    return {
        "DCGM_FI_PROF_DRAM_ACTIVE": clamp(level["dram"] + wobble),
        "DCGM_FI_PROF_SM_ACTIVE": clamp(level["sm"] + wobble),
        "DCGM_FI_DEV_GPU_UTIL": float(level["util"]),
        "DCGM_FI_DEV_GPU_TEMP": level["temp"] + 2 * math.sin(n / 5.0),
        "DCGM_FI_PROF_PCIE_TX_BYTES": pcie,
        "DCGM_FI_PROF_PCIE_RX_BYTES": pcie * 0.4,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": clamp(level["nvlink"] + wobble) * NVLINK_PEAK_GBPS * 1e9 / 1048576,
        "DCGM_FI_DEV_THERMAL_VIOLATION": throttled_ns,
    }


def openmetrics(t0: int) -> str:
    families: dict[str, list[str]] = {}
    for labels, level_name, (begin, end) in SERIES:
        level = LEVELS[level_name]
        throttled = 0.0
        for n, offset in enumerate(range(begin, end, STEP)):
            throttled += level["throttle"] * STEP * 1e9
            lbl = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            for name, value in samples(level, n, throttled).items():
                families.setdefault(name, []).append(f"{name}{{{lbl}}} {value:.6g} {t0 + offset}")
    out = []
    for name, lines in families.items():
        out += [f"# TYPE {name} gauge", *lines]
    return "\n".join([*out, "# EOF"]) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus serving the series above; yields (url, t0)."""
    base = tmp_path_factory.mktemp("prometheus")
    t0 = (int(time.time()) // 3600 - 4) * 3600  # whole hours, well inside the head-free past
    (base / "series.om").write_text(openmetrics(t0))
    data = base / "data"
    made = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(base / "series.om"), str(data)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    (base / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = free_port()
    log = (base / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={base / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                    if answer.status == HTTP_OK:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (base / "prometheus.log").read_text()[-3000:]
            assert time.time() < deadline, "prometheus did not become ready in 90 s"
            time.sleep(0.5)
        yield url, t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def plan(platform: str) -> dict:
    nv18 = {"gpus": [{"index": i, "nvlink_peers": {str(p): 18 for p in range(8) if p != i}} for i in range(8)]}
    return {"schema_version": SCHEMA_VERSION, "source": "test", "platform": {"name": platform, "reason": "test"},
            "team": {"members": {"alice": {"team": "vision", "gpus": [0, 1]}, "bob": {"team": "nlp", "gpus": [2]}},
                     "namespaces": {"vision": "team-vision", "nlp": "team-nlp"}},
            "hosts": {"localhost": {"topology": nv18}}}


PROXY = "/api/v1/namespaces/monitoring/services/kube-prometheus-stack-prometheus:http-web/proxy"
FAKE_KUBECTL = f"""#!{VENV_BIN / 'python'}
# Stand-in for `kubectl get --raw PATH` (no API server here): the path must be kube-prometheus-stack's Prometheus
# through the service proxy; the rest goes to the test's Prometheus. Every call is logged.
import os, sys, urllib.request
args = sys.argv[1:]
with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if args[:2] != ["get", "--raw"] or not args[2].startswith("{PROXY}/api/v1/query_range?"):
    sys.exit("fake kubectl: unexpected call " + repr(args))
with urllib.request.urlopen(os.environ["FAKE_KUBECTL_PROMETHEUS"] + args[2][len("{PROXY}"):], timeout=30) as r:
    sys.stdout.write(r.read().decode())
"""


def diagnose(tmp_path: Path, url: str, platform: str, window: tuple[int, int], via: str = "url", **extra) -> dict:
    """diagnose.yml on localhost against ``url``: ``via`` "url" (diagnose_prometheus_url), "kubectl" (the stand-in
    kubectl) or "compose" (the Compose stack's own address and port variables); returns slowdown.json's one entry,
    the run's stdout, the report's HTML and Markdown."""
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        localhost:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {VENV_BIN / 'python'}\n")
    reports = tmp_path / "reports"
    extra_vars = {"gpuops_plan": plan(platform), "gpuops_report_dir": str(reports),
                  "diagnose_window": f"{window[0]}/{window[1]}", **extra}
    env = playbook_env(ROOT, cache="memory", bin_dir=VENV_BIN)
    if via == "kubectl":
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "kubectl").write_text(FAKE_KUBECTL)
        (fake / "kubectl").chmod(0o755)
        env |= {"PATH": f"{fake}:{env['PATH']}", "FAKE_KUBECTL_LOG": str(tmp_path / "kubectl.log"),
                "FAKE_KUBECTL_PROMETHEUS": url}
    elif via == "compose":
        host, port = url.removeprefix("http://").split(":")
        extra_vars |= {"compose_stack_bind_address": host, "compose_stack_ports": {"prometheus": int(port)}}
    else:
        extra_vars["diagnose_prometheus_url"] = url
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                          str(ROOT / "playbooks" / "diagnose.yml"), "-e", json.dumps(extra_vars)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    found = sorted(reports.glob("diagnose/*-slowdown/slowdown.json"))
    assert len(found) == 1, run.stdout[-3000:]
    entries = json.loads(found[0].read_text())
    assert len(entries) == 1
    html = (found[0].parent / "index.html").read_text()
    md = (found[0].parent / "slowdown.md").read_text()
    return {**entries[0]["slowdown"], "stdout": run.stdout, "html": html, "md": md}


def direct(url: str, platform: str, window: tuple[int, int], **kwargs) -> dict:
    """What the playbook's query tasks do, without the playbook: the filters and the same POSTs."""
    q = slowdown_queries(platform, window=f"{window[0]}/{window[1]}", now=time.time(),
                         members=plan(platform)["team"]["members"], topologies=[plan(platform)["hosts"]["localhost"]
                                                                                ["topology"]], **kwargs)
    answers = {}
    for name, query in q["queries"].items():
        body = urllib.parse.urlencode({"query": query, "start": q["start"], "end": q["end"], "step": q["step"]})
        with urllib.request.urlopen(f"{url}/api/v1/query_range", data=body.encode(), timeout=30) as reply:
            answers[name] = json.load(reply)
    return slowdown_answer(answers, q["nvlink_capacity_known"])


def causes(answer: dict) -> list[str]:
    return [c["cause"] for c in answer["causes"]]


def test_kubernetes_input_bound_job(prometheus, tmp_path):
    url, t0 = prometheus
    answer = diagnose(tmp_path, url, "kubernetes", (t0 - 600, t0 + 2400), diagnose_job="resnet-input")
    assert answer["verdict"] == "slow"
    assert causes(answer)[0] == "input_bound", answer["causes"]
    assert "thermal" not in causes(answer)
    assert "pcie_bound" not in causes(answer)
    assert answer["signals"]["gpu_count"] == JOB_GPUS
    assert answer["signals"]["memory_bandwidth_util"] == pytest.approx(0.28, abs=0.02)
    assert answer["signals"]["nvlink_util"] == pytest.approx(0.45, abs=0.02)  # capacity from the plan's NV18
    assert "1. input_bound" in answer["stdout"]
    assert "\n".join(answer["lines"]) in answer["md"]  # slowdown.md holds the answer as printed
    assert "input_bound" in answer["html"]
    assert "Is training slow?" in answer["html"]


def test_kubernetes_topology_bound_job_plain_pod_labels(prometheus, tmp_path):
    url, t0 = prometheus
    answer = diagnose(tmp_path, url, "kubernetes", (t0 - 600, t0 + 2400), diagnose_job="bert-topo",
                      diagnose_namespace="team-nlp")
    # Memory bandwidth (55%) is under its line too, by much less than NVLink (22%) is under its own.
    assert causes(answer) == ["topology", "input_bound"], answer["causes"]
    assert answer["signals"]["gpu_count"] == JOB_GPUS
    assert answer["causes"][0]["evidence"]["nvlink_util"] == pytest.approx(0.22, abs=0.02)


def test_kubernetes_healthy_job_through_the_api_server_proxy(prometheus, tmp_path):
    url, t0 = prometheus
    answer = diagnose(tmp_path, url, "kubernetes", (t0 - 600, t0 + 2400), via="kubectl",
                      diagnose_job="gpt-healthy")
    calls = (tmp_path / "kubectl.log").read_text().splitlines()
    assert len(calls) == len(answer["signals"])  # one range query per signal, all through the proxy
    assert answer["verdict"] == "healthy"
    assert answer["causes"] == []
    assert answer["signals"]["memory_bandwidth_util"] == pytest.approx(0.74, abs=0.02)
    assert "HEALTHY" in answer["stdout"]


def test_compose_member_counts_only_busy_steps(prometheus, tmp_path):
    url, t0 = prometheus
    # The window covers alice's busy half hour and the idle half hour after it.
    # Prometheus found as the compose stack publishes it (compose_stack_bind_address, compose_stack_ports).
    answer = diagnose(tmp_path, url, "compose", (t0 + COMPOSE_BUSY[0], t0 + COMPOSE_IDLE[1]), via="compose",
                      diagnose_job="alice")
    assert causes(answer) == ["thermal"], answer["causes"]
    assert answer["signals"]["gpu_temp_c"] > TEMP_MAX_C
    assert answer["signals"]["throttle_thermal"] == pytest.approx(0.35, abs=0.03)
    assert answer["signals"]["memory_bandwidth_util"] == pytest.approx(0.72, abs=0.02)  # idle steps left out


def test_window_and_gpus_by_uuid(prometheus, tmp_path):
    url, t0 = prometheus
    uuids = ",".join(gpu("node-c", i)["UUID"] for i in (4, 5))
    answer = direct(url, "kubernetes", (t0, t0 + 1800), gpus=uuids, hosts=["localhost"])
    assert answer["verdict"] == "healthy", answer
    assert answer["signals"]["gpu_count"] == JOB_GPUS
    # By index on Kubernetes the play's hosts name the node (dcgm-exporter's Hostname).
    by_index = direct(url, "kubernetes", (t0, t0 + 1800), gpus="0,1", hosts=["node-a"])
    assert causes(by_index)[0] == "input_bound", by_index["causes"]


def test_a_job_with_no_series_says_no_data(prometheus):
    url, t0 = prometheus
    answer = direct(url, "kubernetes", (t0, t0 + 1800), job="never-ran")
    assert answer["verdict"] == "no data"
    assert answer["causes"] == []
    assert any(line.startswith("NO DATA") for line in answer["lines"])


def test_a_bad_query_is_refused_with_prometheus_reason(prometheus):
    url, t0 = prometheus
    body = urllib.parse.urlencode({"query": "avg(", "start": t0, "end": t0 + 60, "step": 15}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/api/v1/query_range", data=body, timeout=30)
    reply = json.load(refused.value)
    with pytest.raises(AnsibleFilterError, match=r"Prometheus refused the memory_bandwidth_util query: .*parse error"):
        slowdown_answer({"memory_bandwidth_util": reply})
