"""training_slowdown: each cause alone, combinations and their order, every threshold exactly at, just below and
just above its line, a healthy job, overrides, refused input, and the held-out signal sets
(fixtures/slowdown/heldout.yml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.diagnose import slowdown_answer
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_slowdown import (
    FIXES,
    SlowdownInputError,
    training_slowdown,
)

HELDOUT = yaml.safe_load((Path(__file__).parent / "fixtures" / "slowdown" / "heldout.yml").read_text())
EPS = 1e-4
# A busy, cool, well-fed 8-GPU job: no rule holds. Each test changes what it is about.
HEALTHY = {"memory_bandwidth_util": 0.80, "nvlink_util": 0.90, "gpu_temp_c": 70.0, "pcie_util": 0.10,
           "sm_active": 0.85, "gpu_count": 8, "throttle_thermal": 0.0}


def causes(**changes) -> list[str]:
    return [c["cause"] for c in training_slowdown({**HEALTHY, **changes})]


def test_healthy_job_has_no_cause():
    assert training_slowdown(HEALTHY) == []


def test_nothing_measured_is_no_cause():
    assert training_slowdown({}) == []


@pytest.mark.parametrize(("changes", "cause"), [
    ({"memory_bandwidth_util": 0.35}, "input_bound"),
    ({"nvlink_util": 0.40}, "topology"),
    ({"gpu_temp_c": 88.0}, "thermal"),
    ({"throttle_thermal": 0.30}, "thermal"),
    ({"pcie_util": 0.85, "sm_active": 0.30}, "pcie_bound"),
], ids=["input_bound", "topology", "thermal_temperature", "thermal_throttle", "pcie_bound"])
def test_each_cause_alone(changes, cause):
    found = training_slowdown({**HEALTHY, **changes})
    assert [c["cause"] for c in found] == [cause]
    assert found[0]["fix"] == FIXES[cause]
    assert all(isinstance(v, (int, float)) or v is None for v in found[0]["evidence"].values())


def test_evidence_carries_the_numbers():
    [found] = training_slowdown({**HEALTHY, "memory_bandwidth_util": 0.42})
    assert found["evidence"] == {"memory_bandwidth_util": 0.42, "threshold": 0.60, "shortfall": 0.3}
    assert "42% < 60%" in found["summary"]


@pytest.mark.parametrize(("changes", "holds"), [
    # memory bandwidth: below 60% holds, 60% itself does not
    ({"memory_bandwidth_util": 0.60}, []),
    ({"memory_bandwidth_util": 0.60 - EPS}, ["input_bound"]),
    ({"memory_bandwidth_util": 0.60 + EPS}, []),
    # NVLink: below 80% holds
    ({"nvlink_util": 0.80}, []),
    ({"nvlink_util": 0.80 - EPS}, ["topology"]),
    ({"nvlink_util": 0.80 + EPS}, []),
    # temperature: above 80 C holds
    ({"gpu_temp_c": 80.0}, []),
    ({"gpu_temp_c": 80.0 + EPS}, ["thermal"]),
    ({"gpu_temp_c": 80.0 - EPS}, []),
    # throttling: more than 10% of the window holds
    ({"throttle_thermal": 0.10}, []),
    ({"throttle_thermal": 0.10 + EPS}, ["thermal"]),
    ({"throttle_thermal": 0.10 - EPS}, []),
    # PCIe: at or above 70% of the link with SMs active under 50%
    ({"pcie_util": 0.70, "sm_active": 0.30}, ["pcie_bound"]),
    ({"pcie_util": 0.70 - EPS, "sm_active": 0.30}, []),
    ({"pcie_util": 0.70 + EPS, "sm_active": 0.30}, ["pcie_bound"]),
    ({"pcie_util": 0.90, "sm_active": 0.50}, []),
    ({"pcie_util": 0.90, "sm_active": 0.50 - EPS}, ["pcie_bound"]),
    ({"pcie_util": 0.90, "sm_active": 0.50 + EPS}, []),
], ids=lambda v: str(v) if isinstance(v, list) else ",".join(f"{k}={x:g}" for k, x in v.items()))
def test_thresholds_at_and_either_side(changes, holds):
    assert causes(**changes) == holds


def test_nvlink_is_not_judged_for_a_single_gpu_or_without_a_figure():
    assert causes(gpu_count=1, nvlink_util=0.05) == []
    assert causes(nvlink_util=None) == []
    assert causes(gpu_count=None, nvlink_util=0.5) == ["topology"]  # a figure at all means several GPUs


def test_pcie_needs_both_signals():
    assert causes(pcie_util=0.95, sm_active=None) == []
    assert causes(pcie_util=None, sm_active=0.1) == []


def test_thermal_comes_first():
    found = causes(gpu_temp_c=85.0, memory_bandwidth_util=0.2, nvlink_util=0.1)
    assert found == ["thermal", "topology", "input_bound"]


def test_topology_before_pcie_before_input_when_pcie_holds():
    # input_bound's shortfall (0.83) is larger than topology's (0.5): with PCIe full the order is fixed anyway.
    assert causes(memory_bandwidth_util=0.10, nvlink_util=0.40, pcie_util=0.9, sm_active=0.2) == [
        "topology", "pcie_bound", "input_bound"]
    assert causes(memory_bandwidth_util=0.10, gpu_count=1, nvlink_util=None, pcie_util=0.9, sm_active=0.2) == [
        "pcie_bound", "input_bound"]


def test_topology_and_input_bound_by_relative_shortfall():
    # memory 0.30: (0.6-0.3)/0.6 = 0.5; NVLink 0.60: (0.8-0.6)/0.8 = 0.25
    assert causes(memory_bandwidth_util=0.30, nvlink_util=0.60) == ["input_bound", "topology"]
    # memory 0.54: 0.1; NVLink 0.20: 0.75
    assert causes(memory_bandwidth_util=0.54, nvlink_util=0.20) == ["topology", "input_bound"]
    # equal shortfall (0.25 each): topology first
    assert causes(memory_bandwidth_util=0.45, nvlink_util=0.60) == ["topology", "input_bound"]


def test_all_four():
    assert causes(memory_bandwidth_util=0.2, nvlink_util=0.3, gpu_temp_c=90.0, pcie_util=0.8, sm_active=0.1) == [
        "thermal", "topology", "pcie_bound", "input_bound"]


def test_thresholds_are_overridable():
    assert causes(memory_bandwidth_util=0.55) == ["input_bound"]
    found = training_slowdown({**HEALTHY, "memory_bandwidth_util": 0.55}, {"memory_bandwidth_util_min": 0.5})
    assert found == []
    cooler = 75
    found = training_slowdown({**HEALTHY, "gpu_temp_c": 78.0}, {"gpu_temp_c_max": cooler})
    assert [c["cause"] for c in found] == ["thermal"]
    assert found[0]["evidence"]["gpu_temp_c_max"] == float(cooler)


@pytest.mark.parametrize(("signals", "thresholds", "message"), [
    ({"pcie_util": 1.4}, None, "pcie_util is 1.400, above 1.*diagnose_pcie_gbps"),
    (HEALTHY, {"memory_min": 0.5}, r"unknown threshold\(s\) \['memory_min'\]"),
    (HEALTHY, {"gpu_temp_c_max": None}, r"threshold gpu_temp_c_max is None; expected a number >= 0.*default \(80.0\)"),
    (HEALTHY, {"gpu_temp_c_max": "80"}, "threshold gpu_temp_c_max is '80'; expected a number >= 0"),
    (HEALTHY, {"pcie_util_min": True}, "threshold pcie_util_min is True; expected a number >= 0"),
    (HEALTHY, {"pcie_util_min": -0.1}, "threshold pcie_util_min is -0.1; expected a number >= 0"),
    (HEALTHY, {"pcie_util_min": float("nan")}, "threshold pcie_util_min is nan; expected a number >= 0"),
])
def test_refused_input_says_what_and_the_fix(signals, thresholds, message):
    with pytest.raises(SlowdownInputError, match=message) as raised:
        training_slowdown(signals, thresholds)
    assert "Fix:" in str(raised.value)


def test_filter_turns_input_errors_into_filter_errors():
    with pytest.raises(AnsibleFilterError, match=r"unknown threshold\(s\) \['memory_util_min'\]"):
        slowdown_answer({}, thresholds={"memory_util_min": 0.5})
    assert slowdown_answer({}, thresholds={"memory_bandwidth_util_min": 0.5})["causes"] == []


def test_heldout_set_covers_every_cause_and_healthy():
    seen = {c for case in HELDOUT for c in case["expect"]}
    assert seen == set(FIXES)
    assert any(case["expect"] == [] for case in HELDOUT)


@pytest.mark.parametrize("case", HELDOUT, ids=[c["name"] for c in HELDOUT])
def test_heldout_signal_sets(case):
    assert [c["cause"] for c in training_slowdown(case["signals"])] == case["expect"], case["why"]
