"""Live progress from runner events: a rich progress bar per play on a TTY, one-line updates otherwise."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .summary import result_message, task_name


def _tally(hosts: dict) -> str:
    keys = ("ok", "changed", "failed", "unreachable")
    return " ".join(f"{k}={sum(h[k] for h in hosts.values())}" for k in keys)


class _Base:
    def __init__(self, fold, plan: list[dict] | None = None, stream=None) -> None:
        self.fold = fold
        self.plan = plan or []
        self.stream = stream or sys.stdout
        self.task = ""

    def _total(self) -> int | None:
        index = len(self.fold.plays) - 1
        if 0 <= index < len(self.plan) and self.plan[index]["name"] == self.fold.plays[-1]["name"]:
            return self.plan[index]["tasks"]
        return None

    def __call__(self, event: dict) -> bool:
        self.fold.add(event)
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play_started()
        elif kind == "playbook_on_task_start":
            self.task = data.get("task", "")
            self.task_started()
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            what = "UNREACHABLE" if kind.endswith("unreachable") else "FAILED"
            self.say(f"  {what} {data.get('host')}: {task_name(data, self.task)}: {result_message(data.get('res'))}")
        elif kind == "playbook_on_stats":
            self.finish()
        return True

    def play_started(self) -> None: ...
    def task_started(self) -> None: ...
    def finish(self) -> None: ...

    def say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


class PlainProgress(_Base):
    """For CI logs: a line per play, a line per task with the running host tallies."""

    def play_started(self) -> None:
        play = self.fold.plays[-1]
        self.say(f"PLAY {len(self.fold.plays)}: {play['name']}")

    def task_started(self) -> None:
        play = self.fold.plays[-1]
        total = self._total()
        of = f"/{total}" if total else ""
        self.say(f"  task {play['tasks']}{of}: {self.task} | {_tally(play['hosts'])}")


class RichProgress(_Base):
    """On a terminal: one rich progress bar per play (tasks done of total, host tallies)."""

    def __init__(self, fold, plan=None, stream=None) -> None:
        super().__init__(fold, plan, stream)
        self.console = Console(file=self.stream)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[tally]}"), console=self.console, transient=False)
        self.bar = None
        self.progress.start()

    def _update(self, done: bool = False) -> None:
        if self.bar is None:
            return
        play = self.fold.plays[-1]
        total = self._total()
        if total is not None and play["tasks"] > total:
            total = play["tasks"]
        completed = play["tasks"] if done else max(play["tasks"] - 1, 0)
        self.progress.update(self.bar, completed=completed, total=total if not done else play["tasks"],
                             tally=_tally(play["hosts"]))

    def play_started(self) -> None:
        self._update(done=True)
        self.bar = self.progress.add_task(self.fold.plays[-1]["name"][:50], total=self._total(), tally="")

    def task_started(self) -> None:
        self._update()

    def say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def finish(self) -> None:
        self._update(done=True)
        self.progress.stop()


def make_progress(fold, plan=None, stream=None):
    stream = stream or sys.stdout
    if stream.isatty():
        return RichProgress(fold, plan, stream)
    return PlainProgress(fold, plan, stream)
