"""module_utils/text: the one rule for quoting long output in messages."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.text import RAW_LIMIT, cut, cut_line, one_line


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
