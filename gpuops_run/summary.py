"""Pure logic of gpuops-run: ansible-runner events -> summary dict -> JUnit XML and an exit code.

Nothing here touches the network, the disk or the clock: RunFold takes the runner's event dicts one by
one (as ansible_runner.run's event_handler receives them), the rest its fold or the summary built from it,
so the tests feed recorded events.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime

EXIT_OK = 0
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3
EXIT_USAGE = 4

COUNTS = ("ok", "changed", "failed", "skipped", "unreachable", "ignored", "rescued")
# playbook_on_stats keys (the PLAY RECAP), in COUNTS' order: only failed and unreachable have other names there.
_STATS_KEYS = dict(zip(("ok", "changed", "failures", "skipped", "dark", "ignored", "rescued"), COUNTS))


def _time(event: dict) -> datetime | None:
    created = event.get("created")
    if not created:
        return None
    try:
        return datetime.fromisoformat(str(created))
    except ValueError:
        return None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def result_message(res: dict | None) -> str:
    """The one line a person needs from a failed or unreachable task result."""
    res = res or {}
    for key in ("msg", "message", "stderr", "reason"):
        value = res.get(key)
        if value:
            return str(value).strip()
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, dict) and item.get("failed"):
                return result_message(item)
    rc = res.get("rc")
    return f"non-zero return code {rc}" if rc is not None else "failed (no message)"


def task_name(data: dict, fallback: str = "") -> str:
    """A task as the play's output names it: "<role> : <task>" for a role's task."""
    task = data.get("task") or fallback
    role = data.get("resolved_role") or data.get("role")
    return f"{role} : {task}" if role else task


class RunFold:
    """Folds runner events, one at a time, into per-play and per-host tallies."""

    def __init__(self) -> None:
        self.plays: list[dict] = []
        self.stats: dict | None = None
        self.first: datetime | None = None
        self.last: datetime | None = None
        self._tasks: dict[str, dict] = {}
        self._seq = 0

    def _play(self) -> dict:
        if not self.plays:
            self.plays.append(_new_play("(no play)", None))
        return self.plays[-1]

    def add(self, event: dict) -> None:
        when = _time(event)
        if when is not None:
            self.first = self.first or when
            self.last = when
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.plays.append(_new_play(data.get("play") or data.get("name") or "(unnamed play)", when))
        elif kind == "playbook_on_task_start":
            play = self._play()
            play["tasks"] += 1
            self._tasks[data.get("task_uuid", "")] = {"name": data.get("task", ""), "start": when}
        elif kind.startswith("runner_on_") and data.get("host"):
            self._host_result(kind, data, when)
        elif kind == "playbook_on_stats":
            self.stats = data
        if when is not None and self.plays:
            self.plays[-1]["end"] = when

    def _host_result(self, kind: str, data: dict, when: datetime | None) -> None:
        play = self._play()
        host = play["hosts"].setdefault(data["host"], dict.fromkeys(COUNTS, 0) | {"failed_tasks": []})
        self._seq += 1
        host["last_seq"] = self._seq
        res = data.get("res") or {}
        task = task_name(data, self._tasks.get(data.get("task_uuid", ""), {}).get("name", ""))
        outcome = kind[len("runner_on_") :]
        if outcome == "ok":
            host["ok"] += 1
            host["changed"] += 1 if res.get("changed") else 0
        elif outcome == "skipped":
            host["skipped"] += 1
        elif outcome == "unreachable":
            host["unreachable"] += 1
            host["failed_tasks"].append({"task": task, "msg": result_message(res), "unreachable": True})
        elif outcome == "failed":
            if data.get("ignore_errors"):
                host["ignored"] += 1
            else:
                host["failed"] += 1
                host["failed_tasks"].append(
                    {"task": task, "msg": result_message(res), "unreachable": False, "seq": self._seq})
        start = self._tasks.get(data.get("task_uuid", ""), {}).get("start")
        took = _seconds(start, when)
        if took is not None and outcome in ("ok", "failed", "unreachable"):
            play["slowest"].append({"task": task, "host": data["host"], "seconds": took})


def _new_play(name: str, when: datetime | None) -> dict:
    return {"name": name, "start": when, "end": when, "tasks": 0, "hosts": {}, "slowest": []}


def _unmark_rescued(fold: RunFold) -> None:
    """Runner events do not say that a failure was rescued; the PLAY RECAP does, per host. Where the recap
    counts fewer failures than the events, the missing ones were rescued: those after which the host went
    on with the play (a host that really failed runs no further task of that play), earliest first."""
    for name in {h for play in fold.plays for h in play["hosts"]}:
        failed = [(play, t) for play in fold.plays if name in play["hosts"]
                  for t in play["hosts"][name]["failed_tasks"] if not t["unreachable"]]
        extra = len(failed) - (fold.stats.get("failures") or {}).get(name, 0)
        for play, task in failed:
            if extra <= 0:
                break
            tally = play["hosts"][name]
            if task["seq"] < tally["last_seq"]:
                tally["failed_tasks"].remove(task)
                tally["failed"] -= 1
                tally["rescued"] += 1
                extra -= 1


def summarise(fold: RunFold, rc: int | None = None, status: str | None = None) -> dict:
    """The whole run as a JSON-ready dict: per host counts (from the PLAY RECAP when the run got that far,
    else from the task events), failed tasks with their messages, plays and timings."""
    if fold.stats is not None:
        _unmark_rescued(fold)
    hosts: dict[str, dict] = {}
    for play in fold.plays:
        for name, tally in play["hosts"].items():
            host = hosts.setdefault(name, dict.fromkeys(COUNTS, 0) | {"failed_tasks": []})
            for key in COUNTS:
                host[key] += tally[key]
            host["failed_tasks"] += [_public(t) | {"play": play["name"]} for t in tally["failed_tasks"]]
    if fold.stats is not None:  # the PLAY RECAP's counts stand, for every host it or the events name
        recap = {key: fold.stats.get(stats_key) or {} for stats_key, key in _STATS_KEYS.items()}
        for name in {*hosts, *(name for counts in recap.values() for name in counts)}:
            host = hosts.setdefault(name, dict.fromkeys(COUNTS, 0) | {"failed_tasks": []})
            host |= {key: counts.get(name, 0) for key, counts in recap.items()}
    plays = []
    for play in fold.plays:
        slowest = sorted(play["slowest"], key=lambda t: -t["seconds"])[:5]
        plays.append({
            "name": play["name"],
            "tasks": play["tasks"],
            "seconds": _seconds(play["start"], play["end"]),
            "hosts": {h: {k: t[k] for k in COUNTS} | {"failed_tasks": [_public(x) for x in t["failed_tasks"]]}
                      for h, t in sorted(play["hosts"].items())},
            "slowest_tasks": slowest,
        })
    return {
        "status": status,
        "rc": rc,
        "recap_seen": fold.stats is not None,
        "started": fold.first.isoformat() if fold.first else None,
        "finished": fold.last.isoformat() if fold.last else None,
        "seconds": _seconds(fold.first, fold.last),
        "hosts": dict(sorted(hosts.items())),
        "plays": plays,
        "verdict": ((fold.stats or {}).get("artifact_data") or {}).get("gpuops_verdict"),
    }


def _public(task: dict) -> dict:
    return {k: v for k, v in task.items() if k != "seq"}


def exit_code(summary: dict) -> int:
    """0 all ok; 2 any host failed; 3 hosts unreachable and none failed; 4 the run never got to a recap.

    A run that judges (burnin.yml) gives its verdict through ``set_stats`` (``gpuops_verdict``: verdict, exit_code,
    the one mapping being plugins/plugin_utils/thresholds.py's EXIT_CODES: 0 PASS, 1 WARN or UNKNOWN, 2 FAIL);
    a run that finished without a failed task exits with that code."""
    hosts = summary["hosts"].values()
    if any(h["failed"] for h in hosts):
        return EXIT_FAILED
    if any(h["unreachable"] for h in hosts):
        return EXIT_UNREACHABLE
    if not summary.get("recap_seen") or (summary.get("rc") not in (0, None)):
        return EXIT_USAGE if not summary["hosts"] else EXIT_FAILED
    verdict = summary.get("verdict") or {}
    return int(verdict["exit_code"]) if "exit_code" in verdict else EXIT_OK


def junit_xml(summary: dict, suite: str = "gpuops-run") -> str:
    """One testcase per host x play; a failure per failed or unreachable task (task name and message)."""
    root = ET.Element("testsuites", name=suite)
    for play in summary["plays"]:
        if not play["hosts"]:
            continue
        ts = ET.SubElement(root, "testsuite", name=play["name"])
        for host, tally in play["hosts"].items():
            case = ET.SubElement(ts, "testcase", classname=host, name=f"{play['name']} [{host}]")
            lost = [x for x in tally["failed_tasks"] if x["unreachable"]]
            bad = [x for x in tally["failed_tasks"] if not x["unreachable"]]
            if bad:
                node = ET.SubElement(case, "failure", message=f"{bad[0]['task']}: {bad[0]['msg']}"[:500], type="failed")
                node.text = "\n".join(f"TASK [{x['task']}] {x['msg']}" for x in bad)
            elif lost:
                why = f"{lost[0]['task']}: {lost[0]['msg']}"[:500]
                node = ET.SubElement(case, "error", message=why, type="unreachable")
                node.text = "\n".join(f"TASK [{x['task']}] unreachable: {x['msg']}" for x in lost)
            elif tally["ok"] == 0 and tally["skipped"] > 0:
                ET.SubElement(case, "skipped", message="every task skipped on this host")
        _count(ts, "testcase")
        if play.get("seconds") is not None:
            ts.set("time", str(play["seconds"]))
    _count(root, "testsuite/testcase")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _count(element: ET.Element, cases: str) -> None:
    """JUnit's counts on a testsuite or testsuites element, read from the test cases under it at path ``cases``."""
    element.set("tests", str(len(element.findall(cases))))
    for key, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        element.set(key, str(len(element.findall(f"{cases}/{tag}"))))


def recap_line(name: str, host: dict) -> str:
    """The summary counts in the PLAY RECAP's own words, for comparing and for the closing lines."""
    return (f"{name} : ok={host['ok']} changed={host['changed']} unreachable={host['unreachable']} "
            f"failed={host['failed']} skipped={host['skipped']} rescued={host['rescued']} ignored={host['ignored']}")
