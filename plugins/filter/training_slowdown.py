# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters: ``signals | gpuops.cluster.training_slowdown(thresholds=...)`` (the rule), and the two steps of
playbooks/tasks/diagnose_slowdown.yml around it: ``slowdown_queries`` (which series, which window) and
``slowdown_answer`` (Prometheus's answers -> window means -> causes).

Thin: the rule is plugins/plugin_utils/training_slowdown.py, the Prometheus side plugins/plugin_utils/slowdown_query.py;
documentation in training_slowdown.yml, slowdown_queries.yml and slowdown_answer.yml.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils import slowdown_query as sq
from ansible_collections.gpuops.cluster.plugins.plugin_utils.training_slowdown import (
    SlowdownInputError,
    check_signals,
    training_slowdown as rule,
)


def training_slowdown(signals, thresholds=None) -> list[dict]:
    try:
        return rule(signals, thresholds)
    except SlowdownInputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def slowdown_queries(platform, job="", window="", gpus=None, members=None, namespace="", hosts=None, now=0.0,
                     lookback_s=21600, pcie_gbps=None, pcie_gen=4, nvlink_peak_gbps=None, topologies=None,
                     rate_window="5m") -> dict:
    try:
        now = float(now)
        span = sq.parse_window(window, now) if window else sq.parse_window(f"{now - float(lookback_s)}/{now}", now)
        sels = sq.selectors(str(platform), str(job or ""), gpus, members, str(namespace or ""), list(hosts or []))
        pcie = float(pcie_gbps) if pcie_gbps not in (None, "") else sq.pcie_gbps(pcie_gen)
        if nvlink_peak_gbps in (None, ""):
            peaks = [sq.nvlink_peak_gbps(t) for t in topologies or [] if isinstance(t, dict)]
            nvlink_peak_gbps = max((p for p in peaks if p), default=None)
        known = nvlink_peak_gbps is not None
        return {**span, "start_utc": sq.utc(span["start"]), "end_utc": sq.utc(span["end"]), "selectors": sels,
                "pcie_gbps": pcie, "nvlink_peak_gbps": float(nvlink_peak_gbps) if known else None,
                "nvlink_capacity_known": known,
                "queries": sq.queries(sels, pcie, float(nvlink_peak_gbps) if known else 1.0, str(rate_window))}
    except (SlowdownInputError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"slowdown_queries: {exc}") from exc


def slowdown_answer(answers, nvlink_capacity_known=True, thresholds=None, about=None) -> dict:
    try:
        signals = check_signals(sq.window_means(dict(answers or {}), bool(nvlink_capacity_known)))
        causes = rule(signals, thresholds)
    except SlowdownInputError as exc:
        raise AnsibleFilterError(f"slowdown_answer: {exc}") from exc
    measured = [k for k, v in signals.items() if v is not None]
    verdict = "no data" if not measured else ("slow" if causes else "healthy")
    answer = {**dict(about or {}), "signals": signals, "causes": causes, "verdict": verdict,
              "not_measured": [k for k, v in signals.items() if v is None], "means": sq.means_text(signals)}
    return {**answer, "lines": sq.answer_lines(answer)}


class FilterModule:
    """gpuops.cluster "is training slow?" filters."""

    def filters(self) -> dict:
        return {"training_slowdown": training_slowdown, "slowdown_queries": slowdown_queries,
                "slowdown_answer": slowdown_answer}
