"""Live progress from runner events: a line per play, a line per task with the running host tallies, and each
failed or unreachable host at once (read the same on a terminal and in a CI log)."""

from __future__ import annotations

import sys

from .summary import result_message, task_name


def _tally(hosts: dict) -> str:
    keys = ("ok", "changed", "failed", "unreachable")
    return " ".join(f"{k}={sum(h[k] for h in hosts.values())}" for k in keys)


class Progress:
    """The runner's event handler: folds each event into ``fold`` and prints what it says."""

    def __init__(self, fold, stream=None) -> None:
        self.fold = fold
        self.stream = stream or sys.stdout
        self.task = ""

    def __call__(self, event: dict) -> bool:
        self.fold.add(event)
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.say(f"PLAY {len(self.fold.plays)}: {self.fold.plays[-1]['name']}")
        elif kind == "playbook_on_task_start":
            self.task = data.get("task", "")
            play = self.fold.plays[-1]
            self.say(f"  task {play['tasks']}: {self.task} | {_tally(play['hosts'])}")
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            what = "UNREACHABLE" if kind.endswith("unreachable") else "FAILED"
            self.say(f"  {what} {data.get('host')}: {task_name(data, self.task)}: {result_message(data.get('res'))}")
        return True

    def say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
