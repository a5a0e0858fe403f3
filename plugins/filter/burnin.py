# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""burnin.yml's filters: burnin_schedule, burnin_report, burnin_markdown, burnin_launch, burnin_objects,
burnin_tools.

Thin: the judgements are in plugins/plugin_utils/burnin.py (burnin_membw.py for the memory bandwidth), the launch
in plugins/plugin_utils/burnin_jobs.py;
documentation in the .yml file of each filter next to this file.
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


def _dict(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise AnsibleFilterError(f"{what} must be a dict, got {type(value).__name__}")
    return value


def burnin_schedule(nodes) -> list:
    return burnin.pair_schedule(nodes)


def _text(result) -> str | None:
    """A registered command's output, or None where it did not run."""
    if not isinstance(result, dict) or result.get("skipped") or "rc" not in result:
        return None
    return _diagnose.output(result)


def burnin_node(result, node: str = "", gpu=None, config=None, health=None, nvbandwidth=None,
                planned=None) -> dict:
    """One node of burnin_report: a registered single-node run judged against what the node's NVLink or PCIe should
    give; the node's nvbandwidth run (skipped when none was found) against its GPUs' HBM peak (burnin_membw.py); the
    node's measurements (that run, nvbandwidth's, gpu_health's GPU state) against the thresholds table; the GPUs
    found against the ``planned`` ones (burnin.judge_node)."""
    result = _dict(result or {}, "burnin_node's input (a registered command result)")
    gpu = _dict(gpu, "burnin_node's gpu (gpu_facts' result: count, gpus, topology)")
    config = _dict(config or {}, "burnin_node's config (the burn-in settings)")
    if not isinstance(gpu.get("gpus"), list):
        raise AnsibleFilterError("burnin_node needs gpu.gpus, gpu_facts' list of GPUs, "
                                 f"got {type(gpu.get('gpus')).__name__}")
    names = [str(g.get("name") or "") if isinstance(g, dict) else str(g) for g in gpu["gpus"]]
    count = int(gpu.get("count") or len(names))
    text = _text(result)
    topology = gpu.get("topology") if isinstance(gpu.get("topology"), dict) else None
    expected = _validate.expected_busbw(topology, list(range(count)), int(config.get("validate_pcie_gen") or 4))
    health = health if isinstance(health, dict) else None
    try:
        membw_options = {"floor": float(config.get("burnin_membw_floor") or 0),
                         "expected_gbps": float(config.get("burnin_membw_expected_gbps") or 0),
                         "binary": str(config.get("burnin_nvbandwidth") or "")}
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("burnin_node: burnin_membw_floor and burnin_membw_expected_gbps must be numbers "
                                 f"({exc})") from exc
    membw = _burnin_membw.judge_membw(str(node), nvbandwidth if isinstance(nvbandwidth, dict) else None, names,
                                      membw_options)
    try:
        measured = _thresholds.measure(nccl=text, nvbandwidth=_text(nvbandwidth),
                                       health=(health or {}).get("gpus") if health and "gpus" in health else None)
        judged = _thresholds.judge(names[0] if names else "", measured,
                                   overrides=_dict(config.get("burnin_thresholds") or {}, "burnin_thresholds"),
                                   gpu_count=count)
    except ValueError as exc:
        raise AnsibleFilterError(f"burnin_thresholds: {exc}") from exc
    return burnin.judge_node(str(node), text or "", None if text is None else result.get("rc"), expected, health,
                             membw, judged, str(result.get("skip_reason") or "") if text is None else "",
                             gpus=(count, count if planned is None else int(planned)))


def _single_run(run, gpus: int, platform: str) -> dict:
    """A node's single-node run: on Kubernetes its Job's log; on Compose the host's run, and why it did not run."""
    if platform == "kubernetes":
        return run if isinstance(run, dict) else {"rc": None, "stdout": "no Job ran"}
    reason = ("one GPU: all_reduce_perf has nothing to reduce across (its bus bandwidth is 0 by definition)"
              if gpus < 2 else "no all_reduce_perf: not in PATH, and burnin_tools_build is false")  # noqa: PLR2004
    return {**(run if isinstance(run, dict) else {"skipped": True}), "skip_reason": reason}


def burnin_report(pairs, nodes=None, config=None, **options) -> dict:
    """``{"a,b": registered result}`` of the pair runs, with each node's runs (burnin_node), judged for the fleet."""
    pairs = _dict(pairs or {}, "burnin_report's input (pair runs by 'a,b')")
    config = _dict(config or {}, "burnin_report's config (the burn-in settings)")
    if not isinstance(nodes or [], list):
        raise AnsibleFilterError(f"burnin_report's nodes must be a list, got {type(nodes).__name__}")
    platform, singles, topologies = str(options.get("platform") or "compose"), [], []
    for item in nodes or []:
        entry = _dict(item, "each of burnin_report's nodes")
        gpu = _dict(entry.get("gpu"), "a node's gpu (gpu_facts' result: count, gpus, topology)")
        singles.append(burnin_node(_single_run(entry.get("run"), int(gpu.get("count") or 0), platform),
                                   node=str(entry.get("node") or ""), gpu=gpu, config=config,
                                   health=entry.get("health"), nvbandwidth=entry.get("nvbandwidth"),
                                   planned=entry.get("planned")))
        topologies.append(gpu.get("topology") if isinstance(gpu.get("topology"), dict) else None)
    options.update(topologies=topologies, socket_ifname=str(config.get("socket_ifname") or ""),
                   expected_gbps=float(config.get("burnin_pair_expected_busbw") or 0),
                   floor_share=float(config.get("burnin_pair_floor") or 0))
    return burnin.judge_fleet(singles, {k: v for k, v in pairs.items() if isinstance(v, dict)}, options)


def burnin_markdown(report) -> str:
    report = _dict(report, "burnin_markdown's input (burnin_report's result)")
    try:
        return burnin.markdown(report)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"burnin_markdown: not a burnin_report result ({exc})") from exc


def _topologies(value, what: str) -> list:
    if not isinstance(value, list):
        raise AnsibleFilterError(f"{what} needs a list of topologies (gpu_facts' topology, one per node), "
                                 f"got {type(value).__name__}")
    return [t if isinstance(t, dict) else None for t in value]


def burnin_launch(config, role: str = "single", gpus: int = 1, hosts=None, topologies=None) -> str:
    """A shell command line: V(single) (all_reduce_perf over the node's GPUs), V(sshd) or V(mpirun) of a pair, with
    the pair's NCCL settings (burnin_jobs.pair_nccl)."""
    config = _dict(config, "burnin_launch's input (the burn-in settings)")
    if role == "single":
        return " ".join(burnin_jobs.single_command(config, int(gpus)))
    if role == "sshd":
        return burnin_jobs.sshd_command(config)
    if role == "mpirun" and isinstance(hosts, list) and len(hosts) == 2:  # noqa: PLR2004
        env = burnin_jobs.pair_nccl(_topologies(topologies or [], "burnin_launch('mpirun')"),
                                    str(config.get("socket_ifname") or ""))["env"]
        return burnin_jobs.mpirun_command(config, [str(h) for h in hosts], int(gpus), env)
    raise AnsibleFilterError(f"burnin_launch: role '{role}' is not single, sshd or mpirun with two hosts")


def burnin_objects(nodes, pairs=None, config=None) -> list:
    if not isinstance(nodes, list):
        raise AnsibleFilterError("burnin_objects needs a list of nodes ({name, gpus, topology}), "
                                 f"got {type(nodes).__name__}")
    return burnin_jobs.objects(nodes, list(pairs or []), _dict(config, "burnin_objects' config"))


def burnin_tools(probe, config=None, gpus: int = 0, platform: str = "compose") -> dict:
    """The tools probe's output -> what the node runs its single-node checks with, and what burn-in builds."""
    if not isinstance(probe, str):
        raise AnsibleFilterError(f"burnin_tools needs the probe's stdout, got {type(probe).__name__}")
    return burnin_jobs.tools(probe, _dict(config, "burnin_tools' config"), int(gpus), str(platform))


class FilterModule:
    """gpuops.cluster burn-in filters."""

    def filters(self) -> dict:
        return {"burnin_schedule": burnin_schedule, "burnin_report": burnin_report, "burnin_markdown": burnin_markdown,
                "burnin_launch": burnin_launch, "burnin_objects": burnin_objects, "burnin_tools": burnin_tools}
