"""`nvidia-smi topo -m` on a real GPU host: the parser reads this driver's matrix, and gpu_facts agrees.

Skipped, with the reason, where there is no GPU: no ``nvidia-smi`` in PATH, or ``nvidia-smi -L`` fails
(no driver) or lists none. Where it lists GPUs, every loop first asserts it has something to loop over. Set
``GPUOPS_LIVE_OUT=<dir>`` to keep the raw matrix and what was parsed from it (JSON).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import is_cpu_list, parse_topology

from .live import LISTED, NO_GPU, keep, listed_nonempty, run

pytestmark = pytest.mark.skipif(NO_GPU is not None, reason=str(NO_GPU))


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
    for gpu in listed_nonempty(topology["gpus"], "GPU in the topology matrix"):
        assert isinstance(gpu["index"], int), gpu
        assert gpu["cpu_affinity"] is not None, (gpu, topology["warnings"])
        assert is_cpu_list(gpu["cpu_affinity"]), gpu
        assert gpu["numa_node"] is None or gpu["numa_node"] >= 0, gpu


def test_nvlink_domains_cover_every_gpu_exactly_once(topology):
    members = [index for domain in topology["nvlink_domains"] for index in domain]
    listed_nonempty(members, "GPU in the NVLink domains (one domain per GPU without NVLink)")
    assert sorted(members) == [gpu["index"] for gpu in topology["gpus"]]
    assert len(members) == len(set(members))


def test_nvlink_peers_are_symmetric(topology):
    peers = {gpu["index"]: gpu["nvlink_peers"] for gpu in listed_nonempty(topology["gpus"], "GPU in the matrix")}
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
    # read for one GPU too: its CPU and NUMA affinity make its workspace's cpuset (issue 36)
    assert ran.count("nvidia-smi topo -m") == 1
    got = facts["topology"]
    assert got is not None, (facts.get("topology_error"), facts["notes"])
    assert {key: value for key, value in got.items() if key != "placements"} == {
        key: value for key, value in topology.items() if key != "placements"
    }
    assert got["placements"] == [[gpu["index"]] for gpu in topology["gpus"]]  # gpus_per_job=1 got through
    pairs = list(zip(facts["gpus"], got["gpus"]))
    for fact, topo in listed_nonempty(pairs, "GPU in both gpu_facts and its topology"):
        if fact["numa_node"] is not None and topo["numa_node"] is not None:
            assert fact["numa_node"] == topo["numa_node"], (fact["pci_bus_id"], topo)
        if fact["nvlink"] is not None and topo["nvlink_peers"]:
            # one peer's bonded links are a subset of the GPU's active links
            assert max(topo["nvlink_peers"].values()) <= fact["nvlink"], (fact, topo)
