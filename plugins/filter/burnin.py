# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""burnin.yml's filters: burnin_schedule, burnin_report, burnin_markdown, burnin_launch, burnin_objects,
burnin_tools.

Thin: the judgements are in plugins/plugin_utils/burnin.py (burnin_membw.py for the memory bandwidth), the launch
in plugins/plugin_utils/burnin_jobs.py; documentation in the .yml file of each filter next to this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

burnin_jobs = lazy("burnin_jobs")
burnin = lazy("burnin")
_burnin_membw = lazy("burnin_membw")
_thresholds = lazy("thresholds")
_diagnose = lazy("diagnose")
_validate = lazy("validate")


def burnin_schedule(nodes) -> list:
    return burnin.pair_schedule(nodes)


def _text(result) -> str | None:
    """A registered command's output, or None where it did not run (skipped, or no result at all)."""
    return _diagnose.output(result) if result and "rc" in result and not result.get("skipped") else None


def burnin_node(result, node: str = "", gpu=None, config=None, health=None, nvbandwidth=None,
                planned=None) -> dict:
    """One node of burnin_report: a registered single-node run judged against what the node's NVLink or PCIe should
    give; the node's nvbandwidth run (skipped when none was found) against its GPUs' HBM peak (burnin_membw.py); the
    node's measurements (that run, nvbandwidth's, gpu_health's GPU state) against the thresholds table; the GPUs
    found against the ``planned`` ones (burnin.judge_node). gpu: gpu_facts' result, with the plan's topology."""
    config = config or {}
    names = [str(g.get("name") or "") for g in gpu["gpus"]]
    count = int(gpu.get("count") or len(names))
    text = _text(result)
    expected = _validate.expected_busbw(gpu.get("topology"), list(range(count)),
                                        int(config.get("validate_pcie_gen") or 4))
    membw = _burnin_membw.judge_membw(str(node), nvbandwidth, names,
                                      {"floor": float(config.get("burnin_membw_floor") or 0),
                                       "expected_gbps": float(config.get("burnin_membw_expected_gbps") or 0),
                                       "binary": str(config.get("burnin_nvbandwidth") or "")})
    try:
        measured = _thresholds.measure(nccl=text, nvbandwidth=_text(nvbandwidth), health=(health or {}).get("gpus"))
        judged = _thresholds.judge(names[0] if names else "", measured, overrides=config.get("burnin_thresholds") or {},
                                   gpu_count=count)
    except ValueError as exc:
        raise AnsibleFilterError(f"burnin_thresholds: {exc}") from exc
    return burnin.judge_node(str(node), text or "", None if text is None else result.get("rc"), expected, health,
                             membw, judged, str(result.get("skip_reason") or "") if text is None else "",
                             gpus=(count, count if planned is None else int(planned)))


def _single_run(run, gpus: int, platform: str) -> dict:
    """A node's single-node run: on Kubernetes its Job's log; on Compose the host's run, and why it did not run."""
    if platform == "kubernetes":
        return run or {"rc": None, "stdout": "no Job ran"}
    reason = ("one GPU: all_reduce_perf has nothing to reduce across (its bus bandwidth is 0 by definition)"
              if gpus < 2 else "no all_reduce_perf: not in PATH, and burnin_tools_build is false")  # noqa: PLR2004
    return {**(run or {"skipped": True}), "skip_reason": reason}


def burnin_report(pairs, nodes=None, config=None, **options) -> dict:
    """``{"a,b": registered result}`` of the pair runs, with each node's runs (burnin_node), judged for the fleet."""
    config, nodes = config or {}, nodes or []
    platform = str(options.get("platform") or "compose")
    singles = [burnin_node(_single_run(n.get("run"), int(n["gpu"].get("count") or 0), platform), node=n["node"],
                           gpu=n["gpu"], config=config, health=n.get("health"), nvbandwidth=n.get("nvbandwidth"),
                           planned=n.get("planned")) for n in nodes]
    options.update(topologies=[n["gpu"].get("topology") for n in nodes],
                   socket_ifname=str(config.get("socket_ifname") or ""),
                   expected_gbps=float(config.get("burnin_pair_expected_busbw") or 0),
                   floor_share=float(config.get("burnin_pair_floor") or 0))
    return burnin.judge_fleet(singles, pairs, options)


def burnin_markdown(report) -> str:
    return burnin.markdown(report)


def burnin_launch(config, role: str = "single", gpus: int = 1, hosts=None, topologies=None) -> str:
    """A shell command line: V(single) (all_reduce_perf over the node's GPUs), V(sshd) or V(mpirun) of a pair, with
    the pair's NCCL settings (burnin_jobs.pair_nccl)."""
    if role == "single":
        return " ".join(burnin_jobs.single_command(config, int(gpus)))
    if role == "sshd":
        return burnin_jobs.sshd_command(config)
    env = burnin_jobs.pair_nccl(topologies or [], str(config.get("socket_ifname") or ""))["env"]
    return burnin_jobs.mpirun_command(config, [str(h) for h in hosts], int(gpus), env)


def burnin_objects(nodes, pairs=None, config=None) -> list:
    return burnin_jobs.objects(nodes, pairs, config)


def burnin_tools(probe, config=None, gpus: int = 0, platform: str = "compose") -> dict:
    """The tools probe's output -> what the node runs its single-node checks with, and what burn-in builds."""
    return burnin_jobs.tools(probe, config, int(gpus), str(platform))


class FilterModule:
    """gpuops.cluster burn-in filters."""

    def filters(self) -> dict:
        return {"burnin_schedule": burnin_schedule, "burnin_report": burnin_report, "burnin_markdown": burnin_markdown,
                "burnin_launch": burnin_launch, "burnin_objects": burnin_objects, "burnin_tools": burnin_tools}
