# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The scheduled gpu_health sweep: one read-only sweep since its cursor, written as Prometheus metrics.

A systemd timer (role gpuops.cluster.gpu_health, ``gpu_health_sweep_timer_enabled``) runs this file as a script on
each GPU host, with the collection's gpu_health module_utils beside it. Each run reads the kernel log since the
cursor the last run kept, and writes, atomically (a temporary file, then a rename), for node-exporter's textfile
collector:

* ``gpuops_gpu_health_verdict`` (host) and ``gpuops_gpu_health_gpu_verdict{gpu,uuid}``: 0 healthy, 1 degraded,
  2 failed, from the GPUs' state now and the kernel-log events since the last run;
* ``gpuops_gpu_health_finding{gpu,uuid,code,action}``: 1 per finding of this run (``code`` is the check's name);
* ``gpuops_gpu_health_events_total{kind,gpu,uuid,code,action}``: kernel-log events (Xid, SXid, fallen off the bus)
  counted over every run since the state file was created, and
  ``gpuops_gpu_health_event_last_seen_timestamp_seconds`` with the same labels: when a run last read one;
* the error counters of the GPUs' state (``row_remap_failure``, ``row_remap_pending``, uncorrectable ECC,
  pending retired pages), where the GPU has them;
* ``gpuops_gpu_health_read_ok``, ``gpuops_gpu_health_log_read_ok`` and ``gpuops_gpu_health_last_run_timestamp_seconds``.

``action`` is NVIDIA's bucket from the Xid catalog (``IGNORE``, ``RESET_GPU``, ``RESTART_BM``, ...), as the
gpu_health module returns it. Nothing on the host changes but the two files this script owns.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

VERDICT_VALUE = {"healthy": 0, "degraded": 1, "failed": 2}
STATE_COUNTERS = (
    ("row_remap_failure", "1 when the GPU reports a failed row remap (the memory cannot be repaired by remapping)."),
    ("row_remap_pending", "1 when a row remap waits for a GPU reset."),
    ("ecc_uncorrectable_volatile", "Uncorrectable ECC errors since the driver loaded."),
    ("ecc_uncorrectable_aggregate", "Uncorrectable ECC errors over the GPU's life."),
    ("retired_pages_pending", "1 when a retired page waits for a GPU reset."),
)
EVENT_LABELS = ("kind", "gpu", "uuid", "code", "action")
TEXTFILE_NAME = "gpuops_gpu_health.prom"


def _label_value(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: dict, value) -> str:
    inner = ",".join(f'{key}="{_label_value(val)}"' for key, val in labels.items())
    return f"gpuops_gpu_health_{name}{{{inner}}} {value}" if inner else f"gpuops_gpu_health_{name} {value}"


def _family(name: str, kind: str, help_text: str, samples: list) -> list:
    return [f"# HELP gpuops_gpu_health_{name} {help_text}", f"# TYPE gpuops_gpu_health_{name} {kind}", *samples]


def count_events(seen: list, events: list, gpus: list, now: float) -> list:
    """The event tallies kept between runs (``seen``, as the last run returned them) plus this run's ``events``.

    One entry per (kind, gpu, uuid, code, action) with its ``count`` and ``last_seen`` (``now`` for those this run
    read). Returns a new list, sorted; ``seen`` is not changed.
    """
    uuid_of = {gpu["index"]: gpu.get("uuid") for gpu in gpus}
    tally = {tuple(entry[key] for key in EVENT_LABELS): dict(entry) for entry in seen}
    for event in events:
        labels = {"kind": event["kind"], "gpu": event["gpu"], "uuid": uuid_of.get(event["gpu"]),
                  "code": event["code"], "action": event["immediate_action"]}
        key = tuple(labels[name] for name in EVENT_LABELS)
        entry = tally.setdefault(key, {**labels, "count": 0, "last_seen": now})
        entry["count"] += 1
        entry["last_seen"] = now
    return sorted(tally.values(), key=lambda entry: tuple(str(entry[name]) for name in EVENT_LABELS))


def format_metrics(result: dict, seen: list, now: float) -> str:
    """Prometheus text exposition of one sweep (``result``, as gpu_health's ``sweep`` returns it) and the event
    tallies (``seen``, from ``count_events``), at ``now`` (seconds since the epoch)."""
    gpus = result["gpus"]
    uuid_of = {gpu["index"]: gpu.get("uuid") for gpu in gpus}
    lines = _family("verdict", "gauge", "Host verdict of the last sweep: 0 healthy, 1 degraded, 2 failed.",
                    [_sample("verdict", {}, VERDICT_VALUE[result["verdict"]])])
    lines += _family("gpu_verdict", "gauge", "GPU verdict of the last sweep: 0 healthy, 1 degraded, 2 failed.",
                     [_sample("gpu_verdict", {"gpu": gpu["index"], "uuid": gpu.get("uuid")},
                              VERDICT_VALUE[gpu["verdict"]]) for gpu in gpus])
    findings = [_sample("finding", {"gpu": item["gpu"], "uuid": uuid_of.get(item["gpu"]), "code": item["check"],
                                    "action": item["action"]}, 1) for item in result["findings"]]
    lines += _family("finding", "gauge", "A finding of the last sweep (code: the check; action: what to do).",
                     sorted(set(findings)))
    for name, kind, help_text, field in (
        ("events_total", "counter", "Kernel-log GPU events (Xid, SXid, fallen off the bus) read by the sweeps.",
         "count"),
        ("event_last_seen_timestamp_seconds", "gauge", "When a sweep last read such an event (seconds since epoch).",
         "last_seen"),
    ):
        lines += _family(name, kind, help_text, [
            _sample(name, {key: entry[key] for key in EVENT_LABELS}, entry[field]) for entry in seen])
    for name, help_text in STATE_COUNTERS:
        lines += _family(name, "gauge", help_text, [
            _sample(name, {"gpu": gpu["index"], "uuid": gpu.get("uuid")}, int(gpu["state"][name]))
            for gpu in gpus if (gpu.get("state") or {}).get(name) is not None])
    lines += _family("read_ok", "gauge", "1 when the last sweep could read the GPUs' state.",
                     [_sample("read_ok", {}, int(result["read_ok"]))])
    lines += _family("log_read_ok", "gauge", "1 when the last sweep could read the kernel log.",
                     [_sample("log_read_ok", {}, int(result["log_read_ok"]))])
    lines += _family("last_run_timestamp_seconds", "gauge", "When the last sweep ran (seconds since epoch).",
                     [_sample("last_run_timestamp_seconds", {}, round(now, 3))])
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename, so that a reader
    (node-exporter) sees the old file or the new one, never half of one."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".gpuops_gpu_health.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _load_state(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as stream:
            state = json.load(stream)
    except FileNotFoundError:
        return {"cursor": None, "events": []}
    return {"cursor": state.get("cursor"), "events": state.get("events", [])}


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C"})
    return done.returncode, done.stdout, done.stderr


def main(argv=None) -> int:
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health import sweep  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="One gpu_health sweep since the kept cursor, as Prometheus metrics.")
    parser.add_argument("--state-file", required=True, help="JSON file that keeps the cursor and event tallies")
    parser.add_argument("--textfile-dir", required=True, help="node-exporter's textfile collector directory")
    parser.add_argument("--dcgm-level", type=int, default=0, choices=(0, 1, 2, 3))
    parser.add_argument("--expected-gpus", type=int, default=None)
    args = parser.parse_args(argv)
    state = _load_state(args.state_file)
    result = sweep(_run, shutil.which, since_cursor=state["cursor"], expected_gpus=args.expected_gpus,
                   dcgm_level=args.dcgm_level)
    now = time.time()
    seen = count_events(state["events"], result["events"], result["gpus"], now)
    write_atomic(os.path.join(args.textfile_dir, TEXTFILE_NAME), format_metrics(result, seen, now))
    write_atomic(args.state_file, json.dumps({"cursor": result["cursor"], "events": seen}, indent=1) + "\n")
    sys.stdout.write(f"gpu_health sweep: verdict {result['verdict']}, {len(result['events'])} new event(s), "
                     f"{len(result['findings'])} finding(s)\n")
    return 0


if __name__ == "__main__":  # the script entry (gpu_health's timer); written without print and sys.exit, which
    raise SystemExit(main())  # module_utils code may not call (ansible-test's pylint)
