"""gpu_health_metrics: the scheduled sweep's Prometheus text, from real captures (no GPU here).

State: the A100 SXM4 x4 ``nvidia-smi -q`` capture (one GPU, 9E, has a row remap pending) and the H200 driver 580
capture (../shared/data/nvidia-smi/*/SOURCES.md). Kernel log: the real lines of tests/unit/kernel_log_samples.py,
and the Xid 79 line the module test maps onto the A100's GPU 9E. Every text is checked by
``promtool check metrics`` where promtool is installed (Debian package prometheus).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from ansible_collections.gpuops.cluster.plugins.lookup.shipped_script import LookupModule as ShippedScript
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health, gpu_health_metrics
from conftest import shared_path
from gpu_facts_helpers import Commands
from kernel_log_samples import DEVELOPMENT

A100 = ("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt")
H200 = ("nvidia-smi", "h200-driver580", "q.txt")
XID79_9E = (
    "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has "
    "fallen off the bus.\n"
)
FAILED, DEGRADED = gpu_health_metrics.VERDICT_VALUE["failed"], gpu_health_metrics.VERDICT_VALUE["degraded"]
FIRST_RUN, NEXT_RUN = 1000.0, 1060.0
A100_HEALTHY_GPUS = 3


def sweep(state, log):
    return gpu_health.sweep(Commands().run, Commands().which, kernel_log_text=log, dcgm_level=0, state_text=state)


def samples(text: str) -> dict:
    """``{(name, frozenset(labels)): value}`` of a text exposition, read back naively (our own label values have no
    comma or brace)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _brace, inner = head.partition("{")
        labels = frozenset(tuple(pair.split("=", 1)) for pair in inner.rstrip("}").split(",") if pair)
        found[(name, labels)] = float(value)
    return found


def labels(**pairs) -> frozenset:
    return frozenset((key, f'"{value}"') for key, value in pairs.items())


@pytest.fixture(scope="module")
def promtool():
    path = os.environ.get("GPUOPS_PROMTOOL") or shutil.which("promtool")
    if not path:
        pytest.skip("promtool not found: install Debian package `prometheus` or set GPUOPS_PROMTOOL")
    return path


def check_metrics(promtool: str, text: str) -> None:
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_xid79_on_a_real_a100_capture_fails_that_gpu_and_is_counted(promtool):
    state = shared_path(*A100).read_text()
    result = sweep(state, XID79_9E)
    sick = next(gpu for gpu in result["gpus"] if gpu["pci"] == "00000000:9E:00.0")
    seen = gpu_health_metrics.count_events([], result["events"], result["gpus"], FIRST_RUN)
    text = gpu_health_metrics.format_metrics(result, seen, FIRST_RUN)
    check_metrics(promtool, text)
    got = samples(text)
    gpu, uuid = str(sick["index"]), sick["uuid"]
    assert uuid.startswith("GPU-")
    assert got[("gpuops_gpu_health_verdict", frozenset())] == FAILED
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=gpu, uuid=uuid))] == FAILED
    event = labels(kind="xid", gpu=gpu, uuid=uuid, code="79", action="RESTART_BM")
    assert got[("gpuops_gpu_health_events_total", event)] == 1
    assert got[("gpuops_gpu_health_event_last_seen_timestamp_seconds", event)] == FIRST_RUN
    assert got[("gpuops_gpu_health_finding", labels(gpu=gpu, uuid=uuid, code="xid", action="RESTART_BM"))] == 1
    assert got[("gpuops_gpu_health_row_remap_pending", labels(gpu=gpu, uuid=uuid))] == 1
    assert got[("gpuops_gpu_health_row_remap_failure", labels(gpu=gpu, uuid=uuid))] == 0
    healthy = [g for g in result["gpus"] if g["index"] != sick["index"]]
    assert len(healthy) == A100_HEALTHY_GPUS
    assert all(got[("gpuops_gpu_health_gpu_verdict", labels(gpu=g["index"], uuid=g["uuid"]))] == 0 for g in healthy)


def test_the_next_run_reads_nothing_new_keeps_the_tally_and_the_gpu_verdict_follows_the_state(promtool):
    state = shared_path(*A100).read_text()
    first = sweep(state, XID79_9E)
    seen = gpu_health_metrics.count_events([], first["events"], first["gpus"], FIRST_RUN)
    second = sweep(state, "")
    again = gpu_health_metrics.count_events(json.loads(json.dumps(seen)), second["events"], second["gpus"], NEXT_RUN)
    text = gpu_health_metrics.format_metrics(second, again, NEXT_RUN)
    check_metrics(promtool, text)
    got = samples(text)
    sick = next(gpu for gpu in second["gpus"] if gpu["pci"] == "00000000:9E:00.0")
    event = labels(kind="xid", gpu=sick["index"], uuid=sick["uuid"], code="79", action="RESTART_BM")
    assert (got[("gpuops_gpu_health_events_total", event)],
            got[("gpuops_gpu_health_event_last_seen_timestamp_seconds", event)]) == (1, FIRST_RUN)
    # only the pending row remap is left: degraded, not failed
    assert got[("gpuops_gpu_health_gpu_verdict", labels(gpu=sick["index"], uuid=sick["uuid"]))] == DEGRADED
    assert got[("gpuops_gpu_health_last_run_timestamp_seconds", frozenset())] == NEXT_RUN


def test_real_development_lines_keep_their_bucket_and_unmapped_devices_have_empty_gpu_labels(promtool):
    log = "\n".join(sample.line for sample in DEVELOPMENT)
    result = sweep(shared_path(*H200).read_text(), log)
    seen = gpu_health_metrics.count_events([], result["events"], result["gpus"], 5.0)
    text = gpu_health_metrics.format_metrics(result, seen, 5.0)
    check_metrics(promtool, text)
    # A Severity or Data line read after its SXid header is part of that event, so count the events, and check
    # that every sample's (kind, code, bucket) is there.
    expected = {}
    for event in result["events"]:
        key = (event["kind"], str(event["code"]), event["immediate_action"])
        expected[key] = expected.get(key, 0) + 1
    assert set(expected) == {(s.kind, str(s.code), s.action) for s in DEVELOPMENT if s.kind is not None}
    got = {}
    for (name, pairs), value in samples(text).items():
        if name == "gpuops_gpu_health_events_total":
            found = {key: val.strip('"') for key, val in pairs}
            assert (found["gpu"], found["uuid"]) == ("", "")  # none of these devices is the H200 of the capture
            key = (found["kind"], found["code"], found["action"])
            got[key] = got.get(key, 0) + value
    assert got == expected
    assert ("xid", "14", "IGNORE") in got


def test_label_values_are_escaped():
    text = gpu_health_metrics._sample("finding", {"code": 'a"b\\c\nd'}, 1)
    assert text == 'gpuops_gpu_health_finding{code="a\\"b\\\\c\\nd"} 1'


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "gpuops_gpu_health.prom"
    target.write_text("old\n")
    gpu_health_metrics.write_atomic(str(target), "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuops_gpu_health.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_the_script_runs_from_a_copy_of_the_shipped_files_alone(tmp_path):
    """The files the role ships (the shipped_script lookup with_imports) are the whole import closure: the script
    runs from a bare copy of them (the collection is importable from nowhere else), on a host with no GPU tool
    (read_ok false)."""
    lib = tmp_path / "lib" / "ansible_collections" / "gpuops" / "cluster" / "plugins" / "module_utils"
    lib.mkdir(parents=True)
    for name, text in ShippedScript().run(["gpu_health_metrics"], with_imports=True)[0].items():
        (lib / name).write_text(text)
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    state = tmp_path / "sweep.json"
    # the command line of the role's service unit (templates/gpuops-gpu-health-sweep.service.j2)
    argv = [sys.executable, "-m", "ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics",
            "--state-file", str(state), "--textfile-dir", str(textfiles), "--dcgm-level", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={"PATH": "/nonexistent", "LC_ALL": "C", "PYTHONPATH": str(tmp_path / "lib")})
    assert done.returncode == 0, done.stdout + done.stderr
    text = (textfiles / "gpuops_gpu_health.prom").read_text()
    assert "gpuops_gpu_health_read_ok 0" in text
    assert "cursor" in json.loads(state.read_text())
