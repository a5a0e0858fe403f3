# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The filters of the day-2 checks, validate's and diagnose's (plugin_utils/validate.py judges with diagnose's links):

* ``outputs | gpuops.cluster.validate_rows(platform=..., gpu_count=..., ...)``: validate.yml's result rows;
* ``outputs | gpuops.cluster.diagnose_chain(platform=..., ...)``: the chain of links, walked to the first broken one;
* the two steps of roles/diagnose/tasks/slowdown.yml: ``slowdown_queries`` (which series, which window) and
  ``slowdown_answer`` (Prometheus's answers -> window means -> the rule's causes);
* ``reports | gpuops.cluster.fleet_report_html(generated=...)``: the fleet report page that validate, burnin,
  diagnose's slowdown and health write (index.html).

Thin: the judgements live in plugins/plugin_utils/validate.py, the links and the walk in diagnose.py, the slowdown
rule in training_slowdown.py (docs/operations.md, "Is training slow?") and its Prometheus side in slowdown_query.py,
the page in fleet_report.py; documentation in validate_rows.yml, diagnose_chain.yml, slowdown_queries.yml,
slowdown_answer.yml and fleet_report_html.yml.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

diagnose = lazy("diagnose")
fleet_report = lazy("fleet_report")
sq = lazy("slowdown_query")
_training_slowdown = lazy("training_slowdown")
validate = lazy("validate")


def validate_rows(outputs, platform: str = "compose", gpu_count: int = 0, topology=None, members=None,  # noqa: PLR0913, PLR0917
                  node: str = "", sharing=None, pcie_gen: int = 4, no_gpu_reason: str = "") -> list:
    """Keyword arguments mirror the filter's documented options (validate_rows.yml)."""
    gpu_count, pcie_gen = int(gpu_count), int(pcie_gen)
    if gpu_count == 0:
        return validate.no_gpu_rows(platform, no_gpu_reason)
    if platform == "compose":
        return validate.compose_rows(outputs, gpu_count, topology, list(members or []), pcie_gen)
    return validate.kubernetes_rows(outputs, node, gpu_count, *diagnose.node_sharing(sharing, node))


def diagnose_chain(outputs, platform: str = "compose", expected_gpus=None, node: str = "", pin: str = "",
                   sharing=None) -> dict:
    if platform == "compose":
        return diagnose.chain(outputs, platform, list(expected_gpus or []), pin=pin or "")
    count = int(expected_gpus or 0)
    replicas, mig = diagnose.node_sharing(sharing, node)
    return diagnose.chain(outputs, platform, count if mig else count * replicas, node, pin or "", mig)


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


def fleet_report_html(reports, generated: str = "", title: str = "gpuops.cluster fleet report", burnin=None) -> str:
    return fleet_report.render_fleet_report(reports, str(generated), str(title), burnin)


class FilterModule:
    """gpuops.cluster day-2 filters (validate's rows, diagnose's chain, "is training slow?", the fleet report page)."""

    def filters(self) -> dict:
        return {"validate_rows": validate_rows, "diagnose_chain": diagnose_chain, "slowdown_queries": slowdown_queries,
                "slowdown_answer": slowdown_answer, "fleet_report_html": fleet_report_html}
