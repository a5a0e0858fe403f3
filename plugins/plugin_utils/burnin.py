# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""burnin.yml's judgements: pure functions over nccl-tests ``all_reduce_perf`` output and ``NCCL_DEBUG=INFO`` lines -
each node (``judge_node``), the pairs (``pair_schedule``) and the fleet (``judge_fleet``: slow nodes, suspect links,
TCP fallback on an RDMA fabric, the rankings, and every check PASS, WARN, FAIL or UNKNOWN with the worst as the
``verdict``, thresholds.py). The rules, with examples: docs/operations.md (burnin.yml).
"""

from __future__ import annotations

import re
from statistics import median

from ansible_collections.gpuops.cluster.plugins.plugin_utils import thresholds
from ansible_collections.gpuops.cluster.plugins.plugin_utils.burnin_jobs import pair_nccl
from ansible_collections.gpuops.cluster.plugins.plugin_utils.diagnose import output, ran
from ansible_collections.gpuops.cluster.plugins.plugin_utils.validate import judge_nccl, parse_all_reduce

# Below this share of the expected pair bus bandwidth a pair is slow.
PAIR_FLOOR = 0.7
_VIA_NET = re.compile(r"via NET/([A-Za-z]+)")
_USING_NETWORK = re.compile(r"Using network ([A-Za-z][\w ]*?)\s*$", re.M)
_NET_INIT = re.compile(r"NET/(IB|Socket)\s*:\s*Using\s+(.*)$", re.M)
_INTRA = (("NVLS", re.compile(r"NVLS multicast support is available|via P2P/NVLS|NVLS Head")),
          ("P2P", re.compile(r"via P2P/")), ("SHM", re.compile(r"via SHM/")))
# INFO/WARN lines that say why NCCL could not use the RDMA devices.
_HINTS = (
    (re.compile(r"Failed to open libibverbs"), "the image has no libibverbs (rdma-core): NCCL cannot open the HCAs"),
    (re.compile(r"NET/IB\s*:\s*No device found"),
     "NCCL saw no RDMA device in the container (/dev/infiniband not passed in, or on Kubernetes no RDMA device "
     "plugin resource)"),
    (re.compile(r"NCCL_IB_DISABLE set by environment to 1"), "NCCL_IB_DISABLE=1 is set"),
)


def _name(net: str) -> str:
    net = net.strip()
    return "IB" if net.upper().startswith("IB") else "Socket" if net.lower() == "socket" else net


def transport(text: str) -> dict:
    """{"network": "IB" | "Socket" | <plugin> | None, "intra": [...], "evidence": line, "hints": [...]}.

    The channels' ``via NET/<name>`` lines are what NCCL really used; without them ``Using network <name>``;
    without that the ``NET/IB : Using`` init line (IB found). ``NET/Socket : Using`` is printed even when IB is
    used, so it means sockets only when no IB line is there."""
    text = text or ""
    lines = text.splitlines()
    network, evidence = None, ""
    via = _VIA_NET.findall(text)
    if via:
        nets = sorted({_name(n) for n in via})
        network = "Socket" if nets == ["Socket"] else next((n for n in nets if n != "Socket"), nets[0])
        evidence = next(ln for ln in lines if any(_name(n) == network for n in _VIA_NET.findall(ln)))
    elif _USING_NETWORK.search(text):
        found = _USING_NETWORK.findall(text)
        network = _name(found[-1])
        evidence = next(ln for ln in lines if "Using network" in ln)
    else:
        inits = dict(_NET_INIT.findall(text))
        if "IB" in inits:
            network = "IB"
        elif "Socket" in inits:
            network = "Socket"
        if network:
            evidence = next(ln for ln in lines if f"NET/{network}" in ln and "Using" in ln)
    intra = [name for name, pattern in _INTRA if pattern.search(text)]
    hints = [why for pattern, why in _HINTS if pattern.search(text)]
    return {"network": network, "intra": intra, "evidence": evidence.strip()[:240], "hints": hints}


def judge_node(  # noqa: PLR0913, PLR0917 -- a node's every measurement, each from its own run, judged together
    node: str, text: str, rc: int | None, expected: dict, health: dict | None = None, membw: dict | None = None,
    judged: dict | None = None, skipped: str = "", gpus: tuple = (0, 0),
) -> dict:
    """One node's single-node all_reduce_perf over all its GPUs, against ``expected`` (expected_busbw), its
    gpu_health verdict when that ran (a ``failed`` verdict fails the node, naming the findings) and its
    memory-bandwidth result (burnin_membw.judge_membw; ``failed`` fails the node, ``skipped`` says why).
    judged: thresholds.judge's verdict of the node's measurements (kept as ``thresholds``). skipped: why the
    single-node run did not run (one GPU, no nccl-tests): its row is then ``skipped``, never ok or failed.
    gpus: (found, planned) - the GPUs found now and those the plan holds; any difference fails the node."""
    row = {"status": "skipped", "detail": skipped} if skipped else judge_nccl(text, rc, expected)
    parsed = parse_all_reduce(text)
    verdict = str((health or {}).get("verdict") or "not run")
    status, detail = row["status"], row["detail"]
    if verdict == "failed":
        bad = [f"{f.get('check')} (GPU {f.get('gpu')}): {f.get('evidence')}" for f in (health or {}).get("findings")
               or [] if f.get("severity") == "failed"]
        status, detail = "failed", f"gpu_health failed: {'; '.join(bad) or 'see its findings'}; {detail}"
    if gpus[0] != gpus[1]:
        status, detail = "failed", (f"{gpus[0]} GPUs found, the plan holds {gpus[1]} (gpuops_plan.hosts.{node}."
                                    "gpu_count): find the lost GPU (gpu_health's gpu_missing names it on the PCI "
                                    f"bus), or rerun preflight where the node changed on purpose; {detail}")
    membw = membw or {"status": "not run", "detail": "memory bandwidth not tested"}
    if membw.get("status") == "failed":
        status, detail = "failed", f"memory bandwidth: {membw.get('detail')}; {detail}"
    measured = None if skipped else parsed["peak_busbw"]
    return {"node": node, "status": status, "measured": measured, "expected": expected["peak"],
            "floor": expected["floor"], "path": expected["path"], "detail": detail, "health": verdict,
            "transport": transport(text), "membw": membw, "thresholds": judged}


def pair_schedule(nodes: list[str]) -> list[list[str]]:
    """Deterministic 2-node pairs over the sorted node names: the ring (i, i+1), then the offset-2 pairs
    (i, i+2) when there are five nodes or more (four nodes: every pair). Each node of three or more is in two
    pairs at least (ring), and in four from five nodes on, so one slow node shows in every pair it is in."""
    names = sorted(dict.fromkeys(str(n) for n in nodes))
    count = len(names)
    if count < 2:  # noqa: PLR2004
        return []
    offsets = (1,) if count < 4 else (1, 2)  # noqa: PLR2004
    pairs: list[list[str]] = []
    for offset in offsets:
        for i in range(count):
            pair = sorted((names[i], names[(i + offset) % count]))
            if pair[0] != pair[1] and pair not in pairs:
                pairs.append(pair)
    return pairs


def _fix(platform: str, hcas: str, ifname: str) -> str:
    steps = [f"set NCCL_IB_HCA={hcas or '=<the HCAs nearest the GPUs, e.g. =mlx5_0,mlx5_1>'} and "
             f"NCCL_SOCKET_IFNAME={ifname or '=<the bootstrap interface>'} (and not NCCL_IB_DISABLE=1)"]
    if platform == "kubernetes":
        steps.append("give the pods the RDMA devices: deploy an RDMA device plugin (e.g. the NVIDIA Network "
                     "Operator's rdma-shared-device-plugin) and request its resource (burnin_rdma_resource)")
    else:
        steps.append("run the container with --device /dev/infiniband, --cap-add IPC_LOCK and --ulimit "
                     "memlock=-1, from an image with rdma-core (libibverbs)")
    return "; ".join(steps)


def _pair_row(pair: list[str], result: dict, expected: float | None, floor_share: float, rdma: bool,
              fix: str) -> dict:
    rc, text = ran(result)
    parsed = parse_all_reduce(text)
    used = transport(text)
    row = {"pair": list(pair), "measured": parsed["peak_busbw"], "expected": expected,
           "floor": round(expected * floor_share, 1) if expected else None, "network": used["network"],
           "intra": used["intra"], "status": "ok", "detail": ""}
    if rc not in (0, None) or not parsed["rows"]:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = next((ln for ln in lines if "rror" in ln or "WARN" in ln), lines[-1] if lines else "no output")
        row.update(status="failed", measured=None, detail=f"all_reduce_perf did not run (exit {rc}): {why[:200]}")
    elif parsed["wrong"]:
        row.update(status="failed", detail=f"{parsed['wrong']} wrong results")
    elif rdma and used["network"] == "Socket":
        why = "; ".join(used["hints"]) or "NCCL found no usable RDMA device"
        row.update(status="tcp_fallback",
                   detail=(f"NCCL used TCP sockets (NET/Socket) on a fabric with InfiniBand/RoCE devices: {why} "
                           f"[{used['evidence']}]. Fix: {fix}"))
    elif expected and parsed["peak_busbw"] < row["floor"]:
        row.update(status="slow", detail=f"{parsed['peak_busbw']:.1f} GB/s, below {row['floor']:.1f} "
                                         f"({floor_share:.0%} of {expected:.1f})")
    return row


def judge_fleet(singles: list[dict], pairs: dict, options: dict) -> dict:
    """The burn-in report.

    singles: judge_node results. pairs: {"a,b": registered result ({rc, stdout, stderr})} for each scheduled
    pair. options: expected_gbps (the pair expectation, GB/s; 0 = the median of the measured pairs),
    floor_share (default PAIR_FLOOR), rdma (the fabric has IB/RoCE devices), platform, topologies and
    socket_ifname (the pairs' NCCL settings, burnin_jobs.pair_nccl, for the fix text).
    """
    floor_share = float(options.get("floor_share") or PAIR_FLOOR)
    env = pair_nccl(options.get("topologies") or [], str(options.get("socket_ifname") or ""))["env"]
    fix = _fix(str(options.get("platform") or "compose"), env.get("NCCL_IB_HCA", ""), env.get("NCCL_SOCKET_IFNAME", ""))
    parsed = {key: parse_all_reduce(output(val)) for key, val in pairs.items()}
    measured = [p["peak_busbw"] for p in parsed.values() if p["rows"]]
    expected = float(options.get("expected_gbps") or 0) or (round(median(measured), 1) if measured else None)
    source = ("burnin_pair_expected_busbw" if options.get("expected_gbps")
              else "median of the measured pairs; set burnin_pair_expected_busbw for an absolute one")
    rows = [_pair_row(key.split(","), val, expected, floor_share, bool(options.get("rdma")), fix)
            for key, val in pairs.items()]
    bad = [r for r in rows if r["status"] != "ok"]
    nodes = sorted({n for r in rows for n in r["pair"]} | {s["node"] for s in singles})
    of = {n: [r for r in rows if n in r["pair"]] for n in nodes}
    slow_nodes = []
    if bad and len(bad) < len(rows):
        slow_nodes = [n for n in nodes if len(of[n]) >= 2 and all(r["status"] != "ok" for r in of[n])]  # noqa: PLR2004
    tcp = [r["pair"] for r in rows if r["status"] == "tcp_fallback"]
    everywhere = len(rows) > 1 and len(bad) == len(rows)
    suspect = [] if everywhere else [r["pair"] for r in bad
                                     if not set(r["pair"]) & set(slow_nodes) and r["pair"] not in tcp]
    findings = []
    for node in slow_nodes:
        listed = ", ".join(f"{r['pair'][0]}-{r['pair'][1]} {_gbps(r)}" for r in of[node])
        findings.append(f"slow node {node}: every pair with it is below expectation ({listed}), "
                        "pairs without it are not")
    for pair in suspect:
        row = next(r for r in rows if r["pair"] == pair)
        findings.append(f"suspect link {pair[0]}-{pair[1]}: only this pair of its nodes is below expectation "
                        f"({row['status']}: {row['detail']})")
    if everywhere:
        why = "; ".join(sorted({r["detail"] for r in bad if r["status"] == "failed"}))[:400]
        findings.append(f"every pair is below expectation or failed (expectation {gbps_cell(expected) or 'none'} GB/s, "
                        f"{source}): a fabric-wide problem or a wrong expectation, not one node"
                        + (f"; {why}" if why else ""))
    findings += [f"{r['pair'][0]}-{r['pair'][1]}: {r['detail']}" for r in rows if r["status"] == "tcp_fallback"]
    failed_singles = [s for s in singles if s["status"] == "failed"]
    findings += [f"{s['node']} single-node: {s['detail']}" for s in failed_singles]
    node_rows = []
    for node in nodes:
        single = next((s for s in singles if s["node"] == node), None)
        values = [r["measured"] for r in of[node] if r["measured"] is not None]
        node_rows.append({
            "node": node, "status": "slow" if node in slow_nodes else (
                "failed" if single and single["status"] == "failed" else "ok"),
            "single_measured": single["measured"] if single else None,
            "single_expected": single["expected"] if single else None,
            "single_path": single["path"] if single else "", "pairs": len(of[node]),
            "membw": {k: v for k, v in (single.get("membw") or {}).items() if k != "gpus"} if single else None,
            "pair_mean": round(sum(values) / len(values), 1) if values else None, "pair_expected": expected,
        })
    node_rows.sort(key=lambda r: (r["status"] == "ok", r["pair_mean"] if r["pair_mean"] is not None else -1,
                                  r["node"]))
    rows.sort(key=lambda r: (r["status"] == "ok", r["measured"] if r["measured"] is not None else -1, r["pair"]))
    checks = _checks(singles, rows)
    findings += [f"{c['node']} {c['check']} {c['status']}: {c['detail']}" for c in checks
                 if c["status"] in ("FAIL", "WARN") and c["check"] in thresholds.CHECKS]
    verdict = thresholds.worst(c["status"] for c in checks)
    ok = not (slow_nodes or bad or failed_singles) and verdict != "FAIL"
    if not rows and not singles:
        findings.append("no node with GPUs: nothing was burnt in")
    status = ("ok" if ok else "failed") if rows or singles else "skipped"
    return {"status": status, "verdict": verdict, "exit_code": thresholds.EXIT_CODES[verdict], "checks": checks,
            "expected_gbps": expected, "expected_source": source,
            "floor_share": floor_share, "slow_nodes": slow_nodes, "suspect_links": suspect, "tcp_fallback": tcp,
            "findings": findings,
            "nodes": node_rows, "pairs": rows, "singles": singles}


def _checks(singles: list[dict], pairs: list[dict]) -> list[dict]:
    """Every check of the run as {node, check, status: PASS | WARN | FAIL | UNKNOWN, detail}: per node the health
    sweep, the single-node run against its NVLink or PCIe path, the memory bandwidth and the thresholds table's
    checks; per pair (node "a-b") its run."""
    out = []
    for single in singles:
        membw = single.get("membw") or {}
        out += [{"node": single["node"], "check": "health", "status": thresholds.status_of(single.get("health")),
                 "detail": f"gpu_health {single.get('health')}"},
                {"node": single["node"], "check": "single_node_busbw",
                 "status": thresholds.status_of(single["status"]), "detail": single["detail"]},
                {"node": single["node"], "check": "memory_bandwidth",
                 "status": thresholds.status_of(membw.get("status")), "detail": membw.get("detail") or ""}]
        out += [{"node": single["node"], "check": c["check"], "status": c["status"], "detail": c["detail"]}
                for c in (single.get("thresholds") or {}).get("checks") or []]
    out += [{"node": "-".join(p["pair"]), "check": "pair_busbw", "status": thresholds.status_of(p["status"]),
             "detail": p["detail"] or _gbps(p)} for p in pairs]
    return out


def _gbps(row: dict) -> str:
    return "did not run" if row["measured"] is None else f"{row['measured']:.1f} GB/s"


def membw_cell(membw: dict | None) -> str:
    """A node's memory-bandwidth result in one cell: "ok 3037.7/3350.0", "failed 2232.6/4800.0", or the
    skip reason ("skipped: nvbandwidth not found ...")."""
    if not membw:
        return ""
    status = str(membw.get("status") or "")
    if membw.get("measured_gbps") is None or status == "skipped":
        return str(membw.get("detail") or status) if status != "ok" else "ok"
    return f"{status} {gbps_cell(membw['measured_gbps'])}/{gbps_cell(membw.get('expected_gbps')) or '?'}"


def gbps_cell(value) -> str:
    """A GB/s figure as a table shows it: one decimal, "" for none."""
    return "" if value is None else f"{float(value):.1f}"


def markdown(report: dict) -> str:
    """The burn-in report as Markdown (burnin.md beside burnin.json, and the example in docs/operations.md)."""
    lines = [f"burn-in: **{report['status']}**; pair expectation {gbps_cell(report['expected_gbps'])} GB/s "
             f"({report['expected_source']}), slow below {report['floor_share']:.0%} of it", ""]
    lines += [f"- {finding}" for finding in report["findings"]] or ["- no finding: every node and pair passed"]
    lines += ["", "| node | result | single-node GB/s | expected (path) | pairs | pair mean GB/s | pair expected "
                  "| memory GB/s (read+write / HBM peak) |",
              "|---|---|---|---|---|---|---|---|"]
    for node in report["nodes"]:
        path = f" ({node['single_path']})" if node["single_path"] else ""
        lines.append(f"| {node['node']} | {node['status']} | {gbps_cell(node['single_measured'])} | "
                     f"{gbps_cell(node['single_expected'])}{path} | {node['pairs']} | {gbps_cell(node['pair_mean'])} | "
                     f"{gbps_cell(node['pair_expected'])} | {membw_cell(node.get('membw'))} |")
    lines += ["", "| pair | result | measured GB/s | expected GB/s | network |", "|---|---|---|---|---|"]
    for pair in report["pairs"]:
        lines.append(f"| {pair['pair'][0]}-{pair['pair'][1]} | {pair['status']} | {gbps_cell(pair['measured'])} | "
                     f"{gbps_cell(pair['expected'])} | {pair['network'] or '?'} |")
    return "\n".join(lines) + "\n"
