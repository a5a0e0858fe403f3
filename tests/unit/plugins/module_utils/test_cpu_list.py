"""module_utils/cpu_list: the one CPU-list grammar (topology's CPU Affinity, compose cpusets)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import (
    cpu_ranges,
    format_cpu_list,
    is_cpu_list,
    parse_cpu_list,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [("0-51,104-155", [(0, 51), (104, 155)]), ("7", [(7, 7)]), (" 0-3, 8 ", [(0, 3), (8, 8)])],
)
def test_valid(text, want):
    assert cpu_ranges(text) == want
    assert is_cpu_list(text)


@pytest.mark.parametrize("text", ["", "-31,64-95", "0-3,x", "3-1", "0-", "0--3", "\uff11-\uff12", "0,,3", "0-3;8"])
def test_invalid(text):
    assert not is_cpu_list(text)
    with pytest.raises(ValueError, match=r"not a CPU list|runs backwards"):
        parse_cpu_list(text)


def test_huge_range_is_checked_without_expanding():
    assert is_cpu_list("0-99999999999999")


def test_round_trip():
    assert parse_cpu_list("10-11,0-3,8,2") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpu_list([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
