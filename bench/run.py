#!/usr/bin/env python3
"""make bench, part 1: what the parsers and preflight cost, as RATIOS measured in one run; the tables and how to
read them: bench/README.md. Written to bench/results.json ("parsers")."""

from __future__ import annotations

import gc
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import timeit
from pathlib import Path

from _meta import REPO, record, started
from figures import table_lines

sys.path.insert(0, str(REPO / "collections"))  # the collection, imported in place
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "unit"))  # gpu_facts_helpers and the fake NVML it imports
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as GF
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_smi as SMI  # the nvidia-smi parsers
from ansible_collections.gpuops.cluster.plugins.module_utils import topology as TOPOLOGY
from ansible_collections.gpuops.cluster.plugins.plugin_utils import preflight as PREFLIGHT
from gpu import live  # tests/gpu's answer to "is there a GPU here?" (nvidia-smi -L), make gpu-check's too
from gpu_facts_helpers import Commands  # the unit tests' stand-in run/which for gather_gpu_facts

SHARED = Path(os.environ.get("GPUOPS_SHARED_DATA", REPO.parent / "shared" / "data"))
TOPO_DIR = SHARED / "nvidia-smi" / "topo"
QUERY_XML = SHARED / "nvidia-smi" / "query" / "a100-sxm4-80gb_mig-enabled_1of4gpus.xml"

NOWHERE = "/nonexistent"  # /sys and /proc roots for the gather: no sysfs NUMA reads on the measured path
REPEAT = 5  # repeats per measurement; the minimum is kept
MIN_SECONDS = 0.04  # each repeat loops until it lasts at least this long
SPAWN_REPEAT = 3  # repeats of the (slow, real) process-spawn loops
SYNTHETIC_GPUS = (8, 16, 32, 64)
FLEET_GPUS = (1, 8, 64, 512)
BIG_XML_GPUS = 64  # from this size on, the N-GPU XML takes long enough that fewer repeats do
FLEET_HOSTS = 1000
TABLES: list[dict] = []  # every table printed, as recorded in results.json


def best(fn, repeat: int = REPEAT, min_seconds: float = MIN_SECONDS) -> float:
    """Seconds per call of ``fn()``: as many calls per repeat as make one last ``min_seconds``, the fastest repeat;
    with ``min_seconds=0``, one call per repeat (a slow ``fn`` that loops itself). The collector stays on, as in a
    module run (timeit turns it off unless told)."""
    timer = timeit.Timer(fn, setup=gc.enable)
    number = 1
    while (elapsed := timer.timeit(number)) < min_seconds:
        number = max(number * 2, int(number * min_seconds / max(elapsed, 1e-9) * 1.2))
    return min([elapsed, *timer.repeat(repeat - 1, number)]) / number


def table(title: str, header: list[str], rows: list[list[str]], note: str = "") -> None:
    """Record a table for results.json and print it as the page will show it."""
    cells = [[str(cell) for cell in row] for row in rows]
    TABLES.append({"title": title, "header": header, "rows": cells, "note": note})
    print(f"\n{title}", *table_lines(TABLES[-1]), sep="\n")


def skip(title: str, reason: str) -> None:
    table(title, [], [], f"skipped: {reason}")


def synthetic_matrix(gpus: int) -> str:
    """``nvidia-smi topo -m`` of an all-to-all NV18 machine (HGX-like), two NUMA nodes, tab-separated."""
    labels = [f"GPU{index}" for index in range(gpus)]
    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for row in range(gpus):
        cells = ["X" if row == column else "NV18" for column in range(gpus)]
        node = 0 if row < gpus // 2 else 1
        cpus = "0-51,104-155" if node == 0 else "52-103,156-207"
        lines.append("\t".join([labels[row], *cells, cpus, str(node), "N/A"]))
    return "\n".join(lines) + "\n"


def bench_topology() -> None:
    title = "1a. parse_topology on every real capture (../shared/data/nvidia-smi/topo)"
    if not TOPO_DIR.is_dir():
        skip(title, f"real third-party data not present: {TOPO_DIR} (see ../shared/data/README.md)")
    else:
        measured = []
        for path in sorted(TOPO_DIR.glob("*.txt")):
            text = path.read_text()
            parsed = TOPOLOGY.parse_topology(text)
            devices = len(parsed["gpus"]) + len(parsed["nics"])
            seconds = best(lambda text=text: TOPOLOGY.parse_topology(text))
            measured.append((path.stem, len(parsed["gpus"]), devices, len(text), seconds))
        smallest = min(measured, key=lambda item: (item[2], item[3]))
        rows = [
            [name[:58], gpus, devices, size, f"{seconds * 1e6:.1f}", f"{seconds / smallest[4]:.2f}"]
            for name, gpus, devices, size, seconds in sorted(measured, key=lambda item: (item[2], item[3]))
        ]
        table(
            title,
            ["capture", "GPUs", "devices", "bytes", "us/parse", "x smallest"],
            rows,
            f"ratio is to the smallest matrix ({smallest[0]}, {smallest[2]} devices)",
        )

    measured = []
    for gpus in SYNTHETIC_GPUS:
        text = synthetic_matrix(gpus)
        parsed = TOPOLOGY.parse_topology(text)
        if len(parsed["gpus"]) != gpus or not parsed["nvlink_all_to_all"] or parsed["warnings"]:
            raise SystemExit(f"the synthetic {gpus}-GPU matrix did not parse as generated: {parsed['warnings']}")
        measured.append((gpus, best(lambda text=text: TOPOLOGY.parse_topology(text))))
    base_gpus, base = measured[0]
    rows = [
        [
            f"{gpus} GPUs NV18 all-to-all",
            gpus * gpus,
            f"{seconds * 1e6:.0f}",
            f"{seconds / base:.1f}",
            f"{seconds / (gpus * gpus) * 1e6:.2f}",
            f"{(seconds / (gpus * gpus)) / (base / (base_gpus * base_gpus)):.2f}",
        ]
        for gpus, seconds in measured
    ]
    table(
        "1b. parse_topology on synthetic matrices: cost per GPU x GPU cell",
        ["matrix", "cells", "us/parse", f"x {base_gpus}", "us/cell", f"per-cell x {base_gpus}"],
        rows,
        "per-cell ratio near 1 means the cost grows linearly in cells (GPUs squared)",
    )


def fleet_xml(template: str, gpus: int) -> str:
    """The real ``-q -x`` capture with its GPU block repeated ``gpus`` times (distinct bus ids and UUIDs)."""
    start, end = template.index("<gpu id="), template.index("</gpu>") + len("</gpu>")
    block = template[start:end]
    bus_id = re.search(r"<pci_bus_id>([^<]+)</pci_bus_id>", block).group(1)
    uuid = re.search(r"<uuid>([^<]+)</uuid>", block).group(1)
    copies = []
    for index in range(gpus):
        new_bus = f"{index // 256:08X}:{index % 256:02X}:00.0"
        copies.append(block.replace(bus_id, new_bus).replace(uuid, f"{uuid[:-4]}{index:04x}"))
    head = re.sub(r"<attached_gpus>\d+</attached_gpus>", f"<attached_gpus>{gpus}</attached_gpus>", template[:start])
    return head + "\n    ".join(copies) + template[end:]


LINKS = "".join(f"\t Link {link}: 25 GB/s\n" for link in range(12))  # 12 active links per GPU


def nvlink_status(gpus: list) -> str:
    return "".join(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n" + LINKS for gpu in gpus)


def spawn(times: int, binary: str) -> None:
    for _ in range(times):
        subprocess.run([binary], check=False)


def bench_gather() -> None:
    title = "2. gpu_facts: one `nvidia-smi -q -x` pass for N GPUs vs N per-GPU invocations"
    if not QUERY_XML.exists():
        skip(title, f"real third-party data not present: {QUERY_XML} (see ../shared/data/README.md)")
        return
    binary = shutil.which("true") or "/bin/true"
    template = QUERY_XML.read_text()
    one_gpu = fleet_xml(template, 1)
    parse_one = best(lambda: SMI.parse_nvidia_smi_xml(one_gpu))
    rows = []
    for gpus in FLEET_GPUS:
        xml = fleet_xml(template, gpus)
        parsed = SMI.parse_nvidia_smi_xml(xml)
        outputs = {"nvidia-smi -q -x": (0, xml, ""), "nvidia-smi nvlink -s": (0, nvlink_status(parsed["gpus"]), "")}
        runner = Commands(outputs, binaries=("nvidia-smi",))

        def gather(runner=runner):
            return GF.gather_gpu_facts(
                backend="nvidia-smi", run=runner.run, which=runner.which, sysfs_root=NOWHERE, proc_root=NOWHERE
            )

        facts, _warnings = gather()
        if facts["count"] != gpus:
            raise SystemExit(f"the {gpus}-GPU XML gathered {facts['count']} GPUs")
        runner.ran.clear()
        gather()
        commands = len(runner.ran)  # what one pass really runs: -q -x and nvlink -s
        one_pass = best(gather, repeat=SPAWN_REPEAT if gpus >= BIG_XML_GPUS else REPEAT)
        per_gpu_parse = best(
            lambda gpus=gpus: [SMI.parse_nvidia_smi_xml(one_gpu) for _ in range(gpus)], REPEAT, min_seconds=0
        )
        spawn_one_pass = best(lambda commands=commands: spawn(commands, binary), SPAWN_REPEAT, min_seconds=0)
        spawn_per_gpu = best(lambda gpus=gpus: spawn(gpus, binary), SPAWN_REPEAT, min_seconds=0)
        total_one = one_pass + spawn_one_pass
        total_per = per_gpu_parse + spawn_per_gpu
        rows.append(
            [
                gpus,
                f"{one_pass * 1e3:.2f}",
                f"{one_pass / gpus * 1e6:.0f}",
                commands,
                f"{total_one * 1e3:.2f}",
                f"{per_gpu_parse * 1e3:.2f}",
                gpus,
                f"{total_per * 1e3:.2f}",
                f"{per_gpu_parse / one_pass:.2f}",
                f"{total_per / total_one:.2f}",
            ]
        )
        largest = (gpus, gather)
    gpus, gather = largest
    without_gc = min(timeit.repeat(gather, number=1, repeat=SPAWN_REPEAT))  # timeit's default: the collector off
    table(
        title,
        [
            "N GPUs",
            "1-pass ms",
            "us/GPU",
            "spawns",
            "1-pass+spawn",
            "per-GPU ms",
            "spawns",
            "per-GPU+spawn",
            "parse x",
            "total x",
        ],
        rows,
        f"ratios are per-GPU / one-pass; spawn = {binary} via subprocess, measured here "
        f"(1-GPU XML parse: {parse_one * 1e6:.0f} us)",
    )
    print(
        f"  one pass of {gpus} GPUs with Python's cyclic GC off: {without_gc * 1e3:.2f} ms "
        f"({without_gc / gpus * 1e6:.0f} us/GPU); against us/GPU above, the difference is GC over the big XML tree"
    )


def fleet_hosts(count: int) -> dict[str, list[tuple[dict, dict]]]:
    """Hand-made (plan, facts) pairs of four kinds of host, ``count`` in all."""
    debian = {"distribution": "Debian", "version": "12.7"}
    fabric = {"state": "Completed", "status": "Success", "clique_id": 0, "cluster_uuid": None}
    hgx_gpus = [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "mig_mode": "Disabled", "nvlink": 18, "fabric": fabric}
        for i in range(8)
    ]
    kinds = {
        "HGX 8 GPU, FM, topology": (
            {
                "driver_version": "550.90.07",
                "cuda_version": "12.4",
                "gpu_assignments": [{"name": f"u{i}", "gpus": [i]} for i in range(8)],
                "team_size": 12,
            },
            {
                "os": debian,
                "gpu": {
                    "present": True,
                    "count": 8,
                    "gpus": hgx_gpus,
                    "fabric_manager": {"required": True, "version": "550.90.07"},
                    "topology": {"nvlink_domains": [list(range(8))]},
                },
            },
        ),
        "PCIe 1 GPU, compose": (
            {"driver_version": "535.261.03", "cuda_version": "12.2", "team_size": 3, "gpu_count": 1},
            {
                "os": debian,
                "gpu": {
                    "present": True,
                    "count": 1,
                    "fabric_manager": {"required": False},
                    "gpus": [{"index": 0, "name": "NVIDIA L4", "mig_mode": "N/A", "nvlink": 0}],
                },
            },
        ),
        "no GPU, no pin": (
            {},
            {"os": {"distribution": "Ubuntu", "version": "24.04"}, "gpu": {"present": False, "count": 0, "gpus": []}},
        ),
        "bad plan (refused)": (
            {
                "driver_version": "470.82.01",
                "cuda_version": "12.4",
                "gpu_assignments": [{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [1]}],
            },
            {"os": {"distribution": "CentOS", "version": "7"}, "gpu": {"present": True, "count": 2, "gpus": []}},
        ),
    }
    names = list(kinds)
    fleet: dict[str, list[tuple[dict, dict]]] = {name: [] for name in names}
    for host in range(count):
        name = names[host % len(names)]
        fleet[name].append(kinds[name])
    return fleet


def bench_preflight() -> None:
    fleet = fleet_hosts(FLEET_HOSTS)
    hosts = [pair for pairs in fleet.values() for pair in pairs]

    def evaluate_all(pairs):
        for plan, facts in pairs:
            PREFLIGHT.evaluate(plan, facts)

    per_kind = {
        name: best(lambda pairs=pairs: evaluate_all(pairs), REPEAT, min_seconds=0) / len(pairs)
        for name, pairs in fleet.items()
    }
    whole = best(lambda: evaluate_all(hosts), REPEAT, min_seconds=0)
    cheapest = min(per_kind.values())
    rows = [
        [name, len(fleet[name]), f"{seconds * 1e6:.1f}", f"{seconds / cheapest:.2f}"]
        for name, seconds in per_kind.items()
    ]
    rows.append(
        [
            f"whole fleet ({FLEET_HOSTS} hosts)",
            len(hosts),
            f"{whole / len(hosts) * 1e6:.1f}",
            f"{whole / len(hosts) / cheapest:.2f}",
        ]
    )
    table(
        f"3. preflight evaluate() per host, {FLEET_HOSTS}-host fleet of hand-made facts",
        ["host kind", "hosts", "us/host", "x cheapest"],
        rows,
        f"the whole fleet's evaluate() took {whole * 1e3:.1f} ms on the controller",
    )


# One module run on a host: a fresh interpreter imports gpu_facts and gathers with one backend, as the AnsiballZ
# payload does (each host, each run). "pci" is what a host without a GPU does (the bench fleet's containers).
_GATHER_ONCE = """
import shutil, subprocess, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts

def run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr

facts, _ = gpu_facts.gather_gpu_facts(backend=sys.argv[2], run=run, which=shutil.which)
print(facts["source"], facts["count"])
"""
NVML_BACKENDS = ("pci", "nvidia-smi", "nvml")


def _gather_in_fresh_python(backend: str) -> str:
    argv = [sys.executable, "-c", _GATHER_ONCE, str(REPO / "collections"), backend]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gpu_facts backend {backend} failed in a fresh interpreter: {last}")
    return proc.stdout.strip()


def no_gpu_reason() -> str | None:
    """Why table 4 cannot run here (None on a GPU host where both nvidia-smi and NVML answer)."""
    if live.NO_GPU:
        return live.NO_GPU
    try:
        _gather_in_fresh_python("nvml")
    except SystemExit as err:
        return f"NVML does not answer here: {err}"
    return None


def bench_nvml() -> bool:
    """Table 4; True when it ran (the host had a GPU)."""
    title = "4. gpu_facts on this host, one fresh interpreter per gather (one module run): what NVML adds per host"
    reason = no_gpu_reason()
    if reason:
        skip(title, reason)
        return False
    answers = {backend: _gather_in_fresh_python(backend) for backend in NVML_BACKENDS}
    seconds = {
        backend: best(lambda backend=backend: _gather_in_fresh_python(backend), SPAWN_REPEAT, min_seconds=0)
        for backend in NVML_BACKENDS
    }
    base = seconds["pci"]
    rows = [
        [backend, answers[backend], f"{secs * 1e3:.0f}", f"{(secs - base) * 1e3:+.0f}", f"{secs / base:.2f}"]
        for backend, secs in seconds.items()
    ]
    table(
        title,
        ["backend", "source, GPUs found", "ms", "ms over pci", "x pci"],
        rows,
        "pci is what a host without a GPU runs (the fleet bench's targets); each figure includes the interpreter's "
        "start and the collection's imports, as a module run does",
    )
    return True


def main() -> None:
    start, t0 = started(), time.perf_counter()
    print(
        f"gpuops.cluster bench: Python {platform.python_version()}, {os.cpu_count()} CPUs; "
        f"min of {REPEAT} repeats (spawns: {SPAWN_REPEAT}); ratios, not pass/fail"
    )
    bench_topology()
    bench_gather()
    bench_preflight()
    on_gpu = bench_nvml()
    print(f"\ntotal bench time: {time.perf_counter() - t0:.1f} s")
    # tables 1-3 run in-process (no targets); table 4 measures this host: targets_gpu is true only when it ran
    record("parsers", start, "bench/run.py", True if on_gpu else None, {"tables": TABLES})


if __name__ == "__main__":
    main()
