# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters: the two steps of roles/diagnose/tasks/slowdown.yml: ``slowdown_queries`` (which series, which window)
and ``slowdown_answer`` (Prometheus's answers -> window means -> the rule's causes).

Thin: the rule is plugins/plugin_utils/training_slowdown.py (docs/operations.md, "Is training slow?"), the
Prometheus side plugins/plugin_utils/slowdown_query.py; documentation in slowdown_queries.yml and slowdown_answer.yml.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

sq = lazy("slowdown_query")
_training_slowdown = lazy("training_slowdown")


def slowdown_queries(platform, **options) -> dict:
    try:
        return sq.build(str(platform), options)
    except (TypeError, ValueError) as exc:  # SlowdownInputError is a ValueError
        raise AnsibleFilterError(f"slowdown_queries: {exc}") from exc


def slowdown_answer(answers, nvlink_capacity_known=True, thresholds=None, about=None) -> dict:
    try:
        signals = _training_slowdown.check_signals(sq.window_means(dict(answers or {}), bool(nvlink_capacity_known)))
        causes = _training_slowdown.training_slowdown(signals, thresholds)
    except _training_slowdown.SlowdownInputError as exc:
        raise AnsibleFilterError(f"slowdown_answer: {exc}") from exc
    measured = [k for k, v in signals.items() if v is not None]
    verdict = "no data" if not measured else ("slow" if causes else "healthy")
    answer = {**dict(about or {}), "signals": signals, "causes": causes, "verdict": verdict,
              "not_measured": [k for k, v in signals.items() if v is None], "means": sq.means_text(signals)}
    return {**answer, "lines": sq.answer_lines(answer)}


class FilterModule:
    """gpuops.cluster "is training slow?" filters."""

    def filters(self) -> dict:
        return {"slowdown_queries": slowdown_queries, "slowdown_answer": slowdown_answer}
