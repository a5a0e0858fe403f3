# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Command output as text: terminal control sequences removed before parsing, and one rule for quoting it in messages
(how much is shown and how a cut is marked)."""

from __future__ import annotations

import re

# ECMA-48 CSI (ESC [ parameters intermediates final: SGR such as the underline \x1b[4m and reset \x1b[0m), OSC
# (ESC ] ... BEL or ST: titles, hyperlinks) and character-set designations (ESC ( B, which `tput sgr0` prints).
_CONTROL_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]")

RAW_LIMIT = 4000  # raw command output quoted in a failure message
LINE_LIMIT = 200  # one bad line or value quoted in a warning
ONE_LINE_LIMIT = 500  # a command's output squeezed onto one line (errors of a command that failed)


def strip_terminal(text: str | None) -> str:
    """``text`` without terminal control sequences, CR LF line ends as LF. Every parser of ``nvidia-smi`` text calls
    it first: driver 580 underlines the ``topo -m`` header (``\\t\\x1b[4mGPU0\\t...\\x1b[0m``) even into a pipe,
    with ``TERM=dumb`` or ``NO_COLOR=1`` (../shared/data/nvidia-smi/h200-driver580/SOURCES.md)."""
    return _CONTROL_SEQUENCE.sub("", text or "").replace("\r\n", "\n")


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
