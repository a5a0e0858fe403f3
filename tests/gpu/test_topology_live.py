"""`nvidia-smi topo -m` on a real GPU host: the parser reads this driver's matrix, and gpu_facts agrees.

Skipped, with the reason, where there is no GPU: no ``nvidia-smi`` in PATH, or ``nvidia-smi -L`` fails
(no driver). Set ``GPUOPS_LIVE_OUT=<dir>`` to keep the raw matrix and what was parsed from it (JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_smi as smi
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import is_cpu_list, parse_topology


def run(argv):
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _listed() -> tuple[list | None, str | None]:
    """GPUs from `nvidia-smi -L`, or why there are none to test."""
    if not shutil.which("nvidia-smi"):
        return None, "no nvidia-smi in PATH: not a GPU host"
    rc, out, err = run(["nvidia-smi", "-L"])
    if rc != 0:
        return None, f"`nvidia-smi -L` exited {rc} ({' '.join((out or err).split())[:200]}): no working driver"
    return smi.parse_nvidia_smi_list(out), None


LISTED, NO_GPU = _listed()
pytestmark = pytest.mark.skipif(NO_GPU is not None, reason=str(NO_GPU))


def keep(name: str, content) -> None:
    out = os.environ.get("GPUOPS_LIVE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, indent=2)
        (Path(out) / name).write_text(text)


@pytest.fixture(scope="module")
def matrix() -> str:
    rc, out, err = run(["nvidia-smi", "topo", "-m"])
    assert rc == 0, f"`nvidia-smi topo -m` exited {rc}: {out}{err}"
    keep("topo-m.txt", out)
    return out


@pytest.fixture(scope="module")
def topology(matrix) -> dict:
    parsed = parse_topology(matrix)
    keep("topology.json", parsed)
    return parsed


def test_gpu_count_matches_nvidia_smi_list(topology):
    assert len(topology["gpus"]) == len(LISTED), topology["warnings"]
    assert [gpu["index"] for gpu in topology["gpus"]] == [gpu["index"] for gpu in LISTED]


def test_every_gpu_has_an_index_and_a_cpu_affinity(topology):
    for gpu in topology["gpus"]:
        assert isinstance(gpu["index"], int), gpu
        assert gpu["cpu_affinity"] is not None, (gpu, topology["warnings"])
        assert is_cpu_list(gpu["cpu_affinity"]), gpu
        assert gpu["numa_node"] is None or gpu["numa_node"] >= 0, gpu


def test_nvlink_domains_cover_every_gpu_exactly_once(topology):
    members = [index for domain in topology["nvlink_domains"] for index in domain]
    assert sorted(members) == [gpu["index"] for gpu in topology["gpus"]]
    assert len(members) == len(set(members))


def test_nvlink_peers_are_symmetric(topology):
    peers = {gpu["index"]: gpu["nvlink_peers"] for gpu in topology["gpus"]}
    for index, linked in peers.items():
        for peer, count in linked.items():
            assert peers[int(peer)].get(str(index)) == count, (index, peer)


def test_gpu_facts_with_topology_agrees(topology):
    """gather_gpu_facts(topology=True) reads the same matrix, once, and agrees with sysfs and NVLink counts."""
    ran = []

    def counted(argv):
        ran.append(" ".join([Path(argv[0]).name, *argv[1:]]))
        return run(argv)

    facts, warnings = gf.gather_gpu_facts(run=counted, which=shutil.which, topology=True, gpus_per_job=1)
    keep("gpu_facts_topology.json", {"facts": facts, "warnings": warnings})
    assert facts["source"] in ("nvml", "nvidia-smi")
    assert facts["count"] == len(LISTED)
    if facts["count"] <= 1:  # gpu_facts reads a matrix only for two GPUs or more
        assert facts["topology"] is None
        assert facts["notes"][-1].startswith(f"topology: not read because {facts['source']} lists {facts['count']} GPU")
        assert "nvidia-smi topo -m" not in ran
        return
    assert ran.count("nvidia-smi topo -m") == 1
    got = facts["topology"]
    assert got is not None, facts["notes"]
    assert {key: value for key, value in got.items() if key != "placements"} == {
        key: value for key, value in topology.items() if key != "placements"
    }
    assert got["placements"] == [[gpu["index"]] for gpu in topology["gpus"]]  # gpus_per_job=1 got through
    for fact, topo in zip(facts["gpus"], got["gpus"]):
        if fact["numa_node"] is not None and topo["numa_node"] is not None:
            assert fact["numa_node"] == topo["numa_node"], (fact["pci_bus_id"], topo)
        if fact["nvlink"] is not None and topo["nvlink_peers"]:
            # one peer's bonded links are a subset of the GPU's active links
            assert max(topo["nvlink_peers"].values()) <= fact["nvlink"], (fact, topo)
