# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The scheduled gpu_health sweep: one read-only sweep since its cursor, written as Prometheus metrics.

Run as a script on each GPU host by gpu_health's timer or kube_monitoring's DaemonSet, with the collection's gpu_health
module_utils beside it (docs/monitoring.md, "The GPU health sweep"). Nothing on the host changes but the files this
script owns: the metrics for node-exporter's textfile collector, written atomically (``format_metrics``: each
family's HELP says what it is; ``action`` is NVIDIA's bucket, as the gpu_health module returns it), the state file
(cursor, event tallies, held findings, the last released lines) and, beside it, ``result.json``
(module_utils/gpu_health_result.py), which health.yml reads instead of sweeping again (``health_sweep_results: last``).

A finding from a kernel-log event is held, with its cause, in every later run's verdicts and findings until a
clearing event (``hold``): a reboot (the kernel's boot id changed), a GPU reset or driver reload (the GPU's
uncorrectable ECC count since the driver loaded went down), or a release request, ``clear.json`` beside the state file
(``CLEAR_REQUEST``): ``{"gpus": {"<UUID or all>": {"reason": "<who and why>", "at": <epoch>}}}``, which gpu_health's
``release`` entry point writes with ``--release`` (an operator may write one by hand, 0600) and the next run applies
and removes. A finding whose bucket ends by itself (``SELF_CLEARING``) is not held. One run at a time on a state file:
each holds a lock on its directory from reading the state and the request to writing the state and removing the
request, and ``--release`` holds it while it merges its request with a pending one.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
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
# The findings a kernel-log event makes (gpu_health_verdict.event_findings): the ones a run holds
EVENT_CHECKS = ("xid", "sxid", "fallen_off_bus")
# Buckets (a finding's step, else its action) whose condition ends by itself, in NVIDIA's resolution buckets
# (../shared/data/xid/resolution-buckets.csv): RESTART_APP ("RESET_GPU or RESTART_BM is not deemed necessary"),
# IGNORE, CHECK_UVM ("If UVM/vGPU is being utilized, RESET_GPU; otherwise IGNORE": no vGPU on these hosts)
SELF_CLEARING = ("RESTART_APP", "IGNORE", "CHECK_UVM")
CLEAR_ALL = "all"
CLEAR_REQUEST = "clear.json"  # beside the state file: a pending release request (above)
# The last lines of what the runs released, kept in the state file: gpu_health's release reports those its run added
RELEASED_KEPT = 100
_HELD_KEY = ("uuid", "gpu", "check", "action", "step")


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


def _held_entry(item: dict, record: dict | None, boot_id: str | None, now: float) -> dict:
    state = (record or {}).get("state") or {}
    return {"uuid": (record or {}).get("uuid"), "gpu": item["gpu"], "check": item["check"],
            "severity": item["severity"], "action": item["action"], "step": item["step"],
            "evidence": item["evidence"], "since": now, "boot_id": boot_id,
            "ecc_volatile": state.get("ecc_uncorrectable_volatile")}


def _why_cleared(entry: dict, record: dict | None, boot_id: str | None, clear: dict) -> str | None:
    """Why a held finding ends now, or None: a release request names its GPU (or ``all``; ``clear``: UUID or
    ``all`` -> who and why), the host rebooted, or the GPU's uncorrectable ECC count since the driver loaded went down
    (a GPU reset or a driver reload)."""
    for name in (entry["uuid"], CLEAR_ALL):
        if name is not None and name in clear:
            return f"cleared (release): {clear[name]}" if clear[name] else "cleared (release)"
    if entry["boot_id"] is not None and boot_id is not None and entry["boot_id"] != boot_id:
        return f"reboot (boot id {entry['boot_id']} -> {boot_id})"
    volatile = ((record or {}).get("state") or {}).get("ecc_uncorrectable_volatile")
    if entry.get("ecc_volatile") is not None and volatile is not None and volatile < entry["ecc_volatile"]:
        return (f"GPU reset or driver reload (uncorrectable ECC since the driver loaded {entry['ecc_volatile']} -> "
                f"{volatile})")
    return None


def hold(held: list, result: dict, boot_id: str | None, now: float, clear: dict | None = None) -> tuple:
    """``(held, cleared)`` after one run: the findings held before (``held``, as the last run returned them) that
    no clearing event ended (``cleared``: each with ``why`` and ``at``), then this run's event findings whose bucket
    is not ``SELF_CLEARING``, added or refreshed (a held one keeps its ``since``). ``result``: gpu_health's
    ``sweep``; ``boot_id``: the kernel's boot id now; ``clear``: the release request's GPU UUIDs (or ``all``), each
    mapped to who released it and why (in ``why``)."""
    records = {gpu["index"]: gpu for gpu in result["gpus"]}
    by_uuid = {gpu.get("uuid"): gpu for gpu in result["gpus"] if gpu.get("uuid")}
    kept, cleared = {}, []
    for entry in held:
        why = _why_cleared(entry, by_uuid.get(entry["uuid"]), boot_id, clear or {})
        if why is None:
            kept[tuple(entry[key] for key in _HELD_KEY)] = dict(entry)
        else:
            cleared.append({**entry, "why": why, "at": now})
    for item in result["findings"]:
        if item["check"] not in EVENT_CHECKS or (item["step"] or item["action"]) in SELF_CLEARING:
            continue
        entry = _held_entry(item, records.get(item["gpu"]), boot_id, now)
        key = tuple(entry[name] for name in _HELD_KEY)
        if key in kept:
            entry["since"] = kept[key]["since"]
        kept[key] = entry
    return sorted(kept.values(), key=lambda entry: tuple(str(entry[key]) for key in _HELD_KEY)), cleared


def with_held(result: dict, held: list) -> dict:
    """``result`` as the metrics show it: each held finding among the findings (``held: true``) and in its GPU's
    verdict and the host's; a held GPU the driver no longer lists keeps its last index and verdict."""
    listed = {gpu.get("uuid") for gpu in result["gpus"]}
    findings = [*result["findings"], *({**entry, "held": True} for entry in held)]
    gpus = []
    for gpu in result["gpus"]:
        own = [entry["severity"] for entry in held if entry["uuid"] is not None and entry["uuid"] == gpu.get("uuid")]
        gpus.append({**gpu, "verdict": max([gpu["verdict"], *own], key=VERDICT_VALUE.__getitem__)})
    for entry in held:
        if entry["uuid"] is not None and entry["uuid"] not in listed:
            gone = next((gpu for gpu in gpus if gpu.get("uuid") == entry["uuid"]), None)
            if gone is None:
                gpus.append({"index": entry["gpu"], "uuid": entry["uuid"], "verdict": entry["severity"], "state": {}})
            else:
                gone["verdict"] = max(gone["verdict"], entry["severity"], key=VERDICT_VALUE.__getitem__)
    verdict = max([result["verdict"], *(entry["severity"] for entry in held)], key=VERDICT_VALUE.__getitem__)
    return {**result, "gpus": gpus, "findings": findings, "verdict": verdict}


def format_metrics(result: dict, seen: list, now: float, held: tuple | list = ()) -> str:
    """Prometheus text exposition of one sweep (``result``, as gpu_health's ``sweep`` returns it), the event
    tallies (``seen``, from ``count_events``) and the held findings (``held``, from ``hold``), at ``now``
    (seconds since the epoch)."""
    result = with_held(result, held)
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
    lines += _family("held_since_timestamp_seconds", "gauge",
                     "A finding from a kernel-log event, held until a reboot, a GPU reset or a release: since when.",
                     [_sample("held_since_timestamp_seconds", {"gpu": entry["gpu"], "uuid": entry["uuid"],
                                                               "code": entry["check"], "action": entry["action"]},
                              round(entry["since"], 3)) for entry in held])
    lines += _family("read_ok", "gauge", "1 when the last sweep could read the GPUs' state.",
                     [_sample("read_ok", {}, int(result["read_ok"]))])
    lines += _family("log_read_ok", "gauge", "1 when the last sweep could read the kernel log.",
                     [_sample("log_read_ok", {}, int(result["log_read_ok"]))])
    lines += _family("last_run_timestamp_seconds", "gauge", "When the last sweep ran (seconds since epoch).",
                     [_sample("last_run_timestamp_seconds", {}, round(now, 3))])
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename, so that a reader
    (node-exporter) sees the old file or the new one, never half of one. Not module_utils/_files.write: gpu_health's
    release runs this file alone (``python -``, on a DaemonSet node too, where no other module_utils file is)."""
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".gpuops_gpu_health.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _load_state(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as stream:
            state = json.load(stream)
    except FileNotFoundError:
        state = {}
    return {"cursor": state.get("cursor"), "events": state.get("events", []), "held": state.get("held", []),
            "released": state.get("released", [])}


def _read_request(path: str) -> dict:
    """A release request's ``gpus`` (UUID or ``all`` -> ``{reason, at}``), {} when there is none; an unreadable one
    is dropped with a line on stderr (the caller runs on)."""
    try:
        with open(path, encoding="utf-8") as stream:
            gpus = json.load(stream)["gpus"]
        return {str(name): {"reason": str((ask or {}).get("reason") or ""), "at": (ask or {}).get("at")}
                for name, ask in gpus.items()}
    except FileNotFoundError:
        return {}
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        sys.stderr.write(f"gpu_health sweep: release request {path} ignored (not a JSON object whose gpus maps each "
                         f"UUID or all to its reason): {error!r}\n")
        return {}


def _take_request(path: str) -> dict:
    """The pending release request's GPUs (UUID or ``all``) -> reason, {} when none is pending. It is renamed to
    ``<path>.taken`` first (removed once the state is written), so one written by hand meanwhile is a new file, for
    the next run. A ``.taken`` left by a run that died before writing the state is applied now, merged with a new
    request (written back as the one ``.taken`` first, so a run that dies again loses neither)."""
    taken = path + ".taken"
    request = _read_request(taken)
    if request and os.path.exists(path):
        write_atomic(taken, json.dumps({"gpus": {**_read_request(path), **request}}) + "\n", 0o600)
        os.unlink(path)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, taken)
    return {name: ask["reason"] for name, ask in _read_request(taken).items()}


def request_release(path: str, gpus: list, reason: str, now: float) -> tuple:
    """gpu_health's release (``--release``): the request at ``path`` for ``gpus`` (UUIDs or ``all``), each with
    ``reason`` and ``now``, merged with a pending one (whose entries stay as they are), written 0600 only when it
    changes. Run under the lock the sweep takes, so a sweep never takes the pending request between this read and
    this write (which would apply it twice, the second time to a finding held after it). Returns ``(the request,
    whether it changed)``."""
    pending = _read_request(path)
    request = {**{name: {"reason": reason, "at": round(now)} for name in gpus}, **pending}
    if request != pending:
        write_atomic(path, json.dumps({"gpus": request}, indent=1) + "\n", 0o600)
    return request, request != pending


def _run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, "LC_ALL": "C"})
    return done.returncode, done.stdout, done.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="One gpu_health sweep since the kept cursor, as Prometheus metrics.")
    parser.add_argument("--state-file", required=True, help="JSON file that keeps the cursor and event tallies")
    parser.add_argument("--textfile-dir", help="node-exporter's textfile collector directory (required to sweep)")
    parser.add_argument("--dcgm-level", type=int, default=0, choices=(0, 1, 2, 3))
    parser.add_argument("--expected-gpus", type=int, default=None)
    parser.add_argument("--boot-id-file", help=argparse.SUPPRESS)  # gpu_health_log.BOOT_ID_PATH unless a test's
    parser.add_argument("--release", nargs="+", metavar="UUID", help="instead of sweeping: write a release request "
                        "for these GPUs (UUIDs or all), merged with a pending one, for the next run; prints it")
    parser.add_argument("--reason", default="", help="who releases and why (with --release)")
    args = parser.parse_args(argv)
    if not (args.release or args.textfile_dir):
        parser.error("--textfile-dir is required to sweep")
    directory = os.path.dirname(os.path.abspath(args.state_file))
    with _locked(directory):
        if args.release:
            request, changed = request_release(os.path.join(directory, CLEAR_REQUEST), args.release, args.reason,
                                               time.time())
            sys.stdout.write(json.dumps({"gpus": request, "changed": changed}) + "\n")
            return 0
        return _one_run(args)


@contextlib.contextmanager
def _locked(directory: str):
    """An exclusive lock on the state file's directory while a run reads and writes the state: two runs (the
    timer's and the one a release starts, or an operator's) may start together, and the later write would drop the
    other's update (a cleared finding held again)."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing the descriptor releases the lock


def _one_run(args) -> int:
    """One sweep; what it needs beyond this file is imported here, so ``--release`` runs without it."""
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health import sweep  # noqa: PLC0415
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_log import BOOT_ID_PATH  # noqa: PLC0415
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_result import write_result  # noqa: PLC0415
    from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text  # noqa: PLC0415

    args.boot_id_file = args.boot_id_file or BOOT_ID_PATH
    state = _load_state(args.state_file)
    result = sweep(_run, shutil.which, since_cursor=state["cursor"], expected_gpus=args.expected_gpus,
                   dcgm_level=args.dcgm_level, boot_id_path=args.boot_id_file)
    now = time.time()
    seen = count_events(state["events"], result["events"], result["gpus"], now)
    boot_id = read_text(args.boot_id_file) or None  # None: no held finding then ends by a reboot
    request = os.path.join(os.path.dirname(os.path.abspath(args.state_file)), CLEAR_REQUEST)
    held, cleared = hold(state["held"], result, boot_id, now, _take_request(request))
    released = [f"gpu_health released: GPU {entry['gpu']} ({entry['uuid']}) {entry['check']} {entry['action']}, "
                f"held since {entry['since']:.0f}: {entry['why']}" for entry in cleared]
    write_atomic(os.path.join(args.textfile_dir, TEXTFILE_NAME), format_metrics(result, seen, now, held))
    write_atomic(args.state_file, json.dumps({"cursor": result["cursor"], "events": seen, "held": held,
                                              "released": (state["released"] + released)[-RELEASED_KEPT:]},
                                             indent=1) + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(request + ".taken")  # applied: its record is in the state (gone from held) and in this run's output
    # the last result as gpu_health returns it (no held finding), for health.yml (health_sweep_results: last)
    write_result(args.state_file, result, now, boot_id, state["cursor"],
                 {"dcgm_level": args.dcgm_level, "expected_gpus": args.expected_gpus}, write_atomic)
    sys.stdout.write(f"gpu_health sweep: verdict {with_held(result, held)['verdict']}, {len(result['events'])} new "
                     f"event(s), {len(result['findings'])} finding(s)\n")
    for entry in held:
        sys.stdout.write(f"gpu_health held: GPU {entry['gpu']} ({entry['uuid']}) {entry['severity']}, "
                         f"{entry['check']} {entry['action']}, since {entry['since']:.0f}: {entry['evidence']}\n")
    for line in released:
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":  # the script entry (gpu_health's timer); written without print and sys.exit, which
    raise SystemExit(main())  # module_utils code may not call (ansible-test's pylint)
