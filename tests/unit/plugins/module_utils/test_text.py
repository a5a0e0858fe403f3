"""module_utils/text: terminal control sequences removed before parsing, and the one rule for quoting long output in
messages."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.text import (
    RAW_LIMIT,
    cut,
    cut_line,
    one_line,
    strip_terminal,
)

# driver 580's `nvidia-smi topo -m` header, byte for byte (../shared/data/nvidia-smi/h200-driver580/topo-m.pipe.txt)
H200_HEADER = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (H200_HEADER, "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"),
        (H200_HEADER.replace("\n", "\r\n"), "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"),  # under `script`
        ("\x1b[1;38;5;196mNV18\x1b[m X", "NV18 X"),  # SGR with parameters, and a bare reset
        ("\x1b[?25l\x1b[2KGPU0", "GPU0"),  # private-mode and erase-line CSI
        ("\x1b]0;title\x07a\x1b]8;;http://x\x1b\\b", "ab"),  # OSC ended by BEL and by ST
        ("\x1b(B\x1b[mGPU0", "GPU0"),  # `tput sgr0`: a character-set designation, then SGR reset
        ("a\rb\n", "a\rb\n"),  # a lone CR is not a line end this helper owns
        (None, ""),
    ],
    ids=["h200-header", "h200-header-crlf", "sgr", "private-csi", "osc", "sgr0", "lone-cr", "none"],
)
def test_strip_terminal(text, want):
    assert strip_terminal(text) == want


def test_cut_keeps_short_text_and_counts_what_it_drops():
    assert cut("abc") == "abc"
    assert cut(None) == ""
    long = "x" * (RAW_LIMIT + 7)
    assert cut(long) == "x" * RAW_LIMIT + "\n[... 7 more chars]"
    assert cut("abcdef", 4) == "abcd\n[... 2 more chars]"


def test_cut_line_quotes_and_marks_the_cut():
    assert cut_line("a b") == "'a b'"
    assert cut_line("abcdef", 3) == "'abc...'"


def test_one_line_folds_whitespace():
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("abcdef", 2) == "ab"
