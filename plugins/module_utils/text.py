# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Quoting command output and input in messages: one rule for how much is shown and how a cut is marked."""

from __future__ import annotations

RAW_LIMIT = 4000  # raw command output quoted in a failure message
LINE_LIMIT = 200  # one bad line or value quoted in a warning
ONE_LINE_LIMIT = 500  # a command's output squeezed onto one line (errors of a command that failed)


def cut(text: str, limit: int = RAW_LIMIT) -> str:
    """The first ``limit`` characters of ``text``, and how many more there were."""
    text = text or ""
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit} more chars]"


def cut_line(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` quoted (repr) for a one-line warning, cut after ``limit`` characters with ``...``."""
    text = text or ""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def one_line(text: str, limit: int = ONE_LINE_LIMIT) -> str:
    """Whitespace runs (newlines too) folded to single spaces, then cut after ``limit`` characters."""
    return " ".join((text or "").split())[:limit]
