"""bench/converge.py: what it reads from a run's output (the recap, the profile_tasks list) and the medians."""

from __future__ import annotations

import converge

OUT = """\
PLAY RECAP *********************************************************************
gpuops-demo-node           : ok=113  changed=0    unreachable=0    failed=0    skipped=40   rescued=0    ignored=0
other-node                 : ok=7    changed=2    unreachable=0    failed=1    skipped=0    rescued=0    ignored=0

Wednesday 02 December 2026  04:40:00 +0000 (0:00:00.100)       0:00:17.600 ****
===============================================================================
gpuops.cluster.compose_stack : Run the stack ---------------------------- 1.50s
gpuops.cluster.preflight : Gather facts in one remote call -------------- 0.81s
"""


def test_recap_sums_the_hosts():
    assert converge.recap(OUT) == {"ok": 120, "changed": 2, "failed": 1}


def test_slowest_reads_every_task_of_the_profile_recap():
    assert converge.slowest(OUT) == {
        "gpuops.cluster.compose_stack : Run the stack": 1.5,
        "gpuops.cluster.preflight : Gather facts in one remote call": 0.81,
    }


def test_median_slowest_takes_each_tasks_median_and_counts_a_missing_task_as_zero():
    runs = [{"a": 1.0, "b": 3.0}, {"a": 2.0, "b": 0.5}, {"a": 9.0}]
    assert converge.median_slowest(runs) == [["a", 2.0], ["b", 0.5]]
    assert converge.median_slowest(runs, count=1) == [["a", 2.0]]
