"""Workspace planning (GPUs, NUMA-local cpuset, memory), image mirroring and rule capping.

Topologies come from real `nvidia-smi topo -m` captures in ../shared/data, read with the
collection's own parser (module_utils.topology), exactly as gpu_facts' topology returns them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils.alert_rules import cap_rule_for, parse_duration
from ansible_collections.gpuops.cluster.plugins.plugin_utils.images import is_pinned, mirror_image, split_reference
from ansible_collections.gpuops.cluster.plugins.plugin_utils.workspaces import (
    format_cpu_list,
    parse_cpu_list,
    plan_workspaces,
    size_workspaces,
)
from gpu.nvidia_smi_q import parse_nvidia_smi_q


@pytest.fixture
def topology(shared_data: Path):
    def read(name: str) -> dict:
        return parse_topology((shared_data / "nvidia-smi" / "topo" / name).read_text())

    return read


def planned(members: list, topology: dict, memory_pool_mb: int = 0, cpus_total: float = 0, gpus_found=None) -> dict:
    """The workspaces as the plan holds them (plugin_utils/plan): planned, then sized on the host's pools."""
    return size_workspaces(plan_workspaces(members, topology, gpus_found=gpus_found), memory_pool_mb, cpus_total)


def member(name: str, uid: int, gpus: list) -> dict:
    return {"name": name, "uid": uid, "gpus": gpus}


def test_cpu_lists_round_trip() -> None:
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpu_list([11, 10, 8, 3, 2, 1, 0]) == "0-3,8,10-11"
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpu_list("0-3,x")


def test_h100x8_sxm_2numa_noNIC_members_get_numa_local_exclusive_cpus(topology) -> None:
    topo = topology("h100x8_sxm_2numa_noNIC.txt")
    members = [member("alice", 2001, [0, 1]), member("bob", 2002, [2]), member("carol", 2003, [4, 5, 6, 7])]
    plan = planned(members, topo, memory_pool_mb=819200)
    assert plan["problems"] == []
    ws = plan["members"]
    # NUMA 0 has 4 GPUs and CPUs 0-51,104-155: alice holds 2/4, bob 1/4; GPU 3 is free (its quarter stays free).
    assert ws["alice"]["cpuset"] == "0-25,104-129"
    assert ws["bob"]["cpuset"] == "26-38,130-142"
    assert ws["carol"]["cpuset"] == "52-103,156-207"
    assert ws["alice"]["numa_nodes"] == [0]
    assert ws["carol"]["numa_nodes"] == [1]
    assert ws["alice"]["memory_mb"] == 819200 * 2 // 8
    assert ws["carol"]["memory_mb"] == 819200 // 2
    cpus = [set(parse_cpu_list(w["cpuset"])) for w in ws.values()]
    assert sum(len(c) for c in cpus) == len(set().union(*cpus)), "CPUs must be exclusive"
    assert plan["warnings"] == []


def test_dgx_a100_nps4_member_across_numa_nodes_is_warned(topology) -> None:
    topo = topology("dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt")
    plan = planned([member("alice", 2001, [0, 2])], topo, memory_pool_mb=0)
    assert plan["problems"] == []
    assert plan["members"]["alice"]["cpuset"] == "16-23,48-55,144-151,176-183"
    assert plan["members"]["alice"]["numa_nodes"] == [1, 3]
    assert plan["members"]["alice"]["memory_mb"] is None
    assert any("different NUMA nodes" in w for w in plan["warnings"])


# The team's own rules (names, uids, GPUs given twice, limits, shared_gpus' shape, MPS caps) ran once, in the
# boilerplate play (test_team, test_mps); the workspaces check what depends on the host, and a workspace's GPU.
@pytest.mark.parametrize(
    ("members", "fragment"),
    [
        ([member("alice", 2001, [9])], "given GPU 9, but this host has GPUs 0, 1, 2, 3, 4, 5, 6, 7"),
        ([{"name": "erin", "uid": 2005, "shared_gpus": [{"gpu": 9, "memory": "1g"}]}], "erin shares GPU 9, but"),
        ([member("alice", 2001, [])], "non-empty list"),
    ],
)
def test_problems_are_refused(topology, members: list, fragment: str) -> None:
    plan = planned(members, topology("h100x8_sxm_2numa_noNIC.txt"), 1000)
    assert plan["members"] == {}
    assert any(fragment in p for p in plan["problems"]), plan["problems"]


def test_no_gpus_in_topology_is_a_problem() -> None:
    plan = planned([member("alice", 2001, [0])], {"gpus": []}, 1000)
    assert any("lists no GPUs" in p for p in plan["problems"])


def test_fewer_cpus_than_members_share_and_warn() -> None:
    topo = {"gpus": [{"index": 0, "cpu_affinity": "0", "numa_node": 0},
                     {"index": 1, "cpu_affinity": "0", "numa_node": 0}]}
    plan = planned([member("alice", 2001, [0]), member("bob", 2002, [1])], topo, 0)
    assert plan["members"]["alice"]["cpuset"] == "0"
    assert plan["members"]["bob"]["cpuset"] == "0"
    assert any("share CPUs" in w for w in plan["warnings"])


def test_missing_cpu_affinity_gives_no_cpuset() -> None:
    topo = {"gpus": [{"index": 0, "cpu_affinity": None, "numa_node": None}]}
    plan = planned([member("alice", 2001, [0])], topo, 0)
    assert plan["members"]["alice"]["cpuset"] is None
    assert any("no CPU affinity" in w for w in plan["warnings"])


@pytest.mark.parametrize(
    ("ref", "mirror", "expected"),
    [
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-ubuntu22.04", "registry.lan:5000",
         "registry.lan:5000/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-ubuntu22.04"),
        ("grafana/grafana:11.6.0", "127.0.0.1:5001", "127.0.0.1:5001/grafana/grafana:11.6.0"),
        ("debian:trixie", "harbor.lan/proxy/", "harbor.lan/proxy/library/debian:trixie"),
        ("localhost:5000/a/b:1", "m", "m/a/b:1"),
        ("quay.io/prometheus/prometheus:v2.53.3", "", "quay.io/prometheus/prometheus:v2.53.3"),
        ("ghcr.io/x/y@sha256:" + "a" * 64, "m:1", "m:1/x/y@sha256:" + "a" * 64),
    ],
)
def test_mirror_image(ref: str, mirror: str, expected: str) -> None:
    assert mirror_image(ref, mirror) == expected


def test_pinned_and_bad_references() -> None:
    assert is_pinned("quay.io/prometheus/prometheus:v2.53.3")
    assert not is_pinned("quay.io/prometheus/prometheus")
    assert not is_pinned("registry.lan:5000/prometheus")
    assert not is_pinned("grafana/grafana:latest")
    assert split_reference("registry.lan:5000/prometheus")["tag"] is None
    for bad in ("", "Grafana/Grafana:1", "a b:1", "x@sha256:zz"):
        with pytest.raises(ValueError, match=r"image reference|lower case|sha256"):
            split_reference(bad)
    with pytest.raises(ValueError, match="without a scheme"):
        mirror_image("a/b:1", "https://registry.lan")


def test_cap_rule_for() -> None:
    rules = {"groups": [{"name": "g", "rules": [
        {"alert": "A", "expr": "x", "for": "1h"}, {"alert": "B", "expr": "y", "for": "5s"},
        {"record": "r", "expr": "z"}]}]}
    capped = cap_rule_for(rules, "10s")
    assert [r.get("for") for r in capped["groups"][0]["rules"]] == ["10s", "5s", None]
    assert rules["groups"][0]["rules"][0]["for"] == "1h", "input must not change"
    assert cap_rule_for(rules, "") == rules
    assert parse_duration("1h30m") == 90 * 60
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        parse_duration("5 minutes")


MIB_PER_GIB = 1024


# --- limits and MPS-shared GPUs (issue 23): the h100x8 topology with the GPU memory of a real HGX H100 capture ---

@pytest.fixture
def h100(topology, shared_data: Path):
    query = shared_data / "nvidia-smi" / "query" / "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt"
    return topology("h100x8_sxm_2numa_noNIC.txt"), parse_nvidia_smi_q(query.read_text())["gpus"]


def test_default_limits_follow_the_gpu_share_and_explicit_ones_win(h100) -> None:
    topo, found = h100
    members = [{**member("alice", 2001, [0, 1]), "memory": "64g", "cpus": 8},
               member("bob", 2002, [2, 3]), member("carol", 2003, [4, 5, 6, 7])]
    plan = planned(members, topo, memory_pool_mb=819200, cpus_total=208, gpus_found=found)
    assert plan["problems"] == []
    ws = plan["members"]
    assert (ws["alice"]["memory_mb"], ws["alice"]["cpus"]) == (65536, 8.0)
    assert (ws["bob"]["memory_mb"], ws["bob"]["cpus"]) == (819200 * 2 // 8, 208 * 2 / 8)
    assert (ws["carol"]["memory_mb"], ws["carol"]["cpus"]) == (819200 // 2, 104.0)
    assert [w["mps"] for w in ws.values()] == [None, None, None]
    assert plan["shared"] == {}


def test_no_host_figures_no_default_limits(h100) -> None:
    """preflight's plan: no host memory or CPU count is read there; only a member's own limits are planned."""
    topo, _found = h100
    plan = planned([{**member("alice", 2001, [0]), "memory": "1g"}, member("bob", 2002, [1])], topo, 0)
    assert plan["members"]["alice"]["memory_mb"] == MIB_PER_GIB
    assert plan["members"]["bob"]["memory_mb"] is None
    assert plan["members"]["bob"]["cpus"] is None


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"memory": "700g"}, ["memory limits overcommit this host", "alice 716800 MiB (memory given)",
                              "bob 204800 MiB (share)", "921600 MiB", "more than the 819200 MiB",
                              "Fix: lower the memory of alice"]),
        ({"cpus": 200}, ["cpus limits overcommit this host", "alice 200 CPUs (cpus given)", "bob 52 CPUs (share)",
                         "more than the 208 CPUs", "Fix: lower the cpus of alice"]),
    ],
)
def test_limits_that_overcommit_the_host_are_refused_naming_members_and_numbers(h100, change, fragments) -> None:
    topo, found = h100
    members = [{**member("alice", 2001, [0, 1]), **change}, member("bob", 2002, [2, 3])]
    plan = planned(members, topo, memory_pool_mb=819200, cpus_total=208, gpus_found=found)
    assert plan["members"] == {}
    text = "; ".join(plan["problems"])
    for fragment in fragments:
        assert fragment in text, text


def test_a_shared_gpu_runs_mps_with_each_members_cap(h100) -> None:
    topo, found = h100
    members = [member("alice", 2001, [0, 1]),
               {"name": "erin", "uid": 2005, "shared_gpus": [{"gpu": 4, "memory": "20g"}]},
               {"name": "frank", "uid": 2006, "shared_gpus": [{"gpu": 4, "memory": "56g"}]}]
    plan = planned(members, topo, memory_pool_mb=819200, cpus_total=208, gpus_found=found)
    assert plan["problems"] == []
    ws = plan["members"]
    assert ws["erin"]["mps"] == {"gpu": 4, "pinned_mem_limit": "0=20G"}
    assert ws["frank"]["mps"] == {"gpu": 4, "pinned_mem_limit": "0=56G"}
    assert ws["erin"]["gpus"] == []
    assert ws["erin"]["shared_gpus"] == [{"gpu": 4, "memory_mb": 20480}]
    assert plan["shared"] == {"4": {"members": {"erin": 20480, "frank": 57344}, "memory_total_mib": 81559,
                                    "default_limit": "20G"}}
    # half a GPU each: half of one GPU's share of memory and CPUs; the GPU's part of NUMA 1's CPUs, for both
    assert ws["erin"]["memory_mb"] == 819200 // 16
    assert ws["erin"]["cpus"] == 208 / 8 / 2
    assert ws["erin"]["cpuset"] == ws["frank"]["cpuset"] == "52-64,156-168"
    assert ws["erin"]["numa_nodes"] == [1]
    assert ws["alice"]["mps"] is None


def test_mps_caps_past_the_gpus_memory_are_refused(h100) -> None:
    topo, found = h100
    members = [{"name": "erin", "uid": 2005, "shared_gpus": [{"gpu": 4, "memory": "40g"}]},
               {"name": "frank", "uid": 2006, "shared_gpus": [{"gpu": 4, "memory": "40g"}]}]
    plan = planned(members, topo, memory_pool_mb=819200, gpus_found=found)
    assert plan["members"] == {}
    assert plan["problems"] == [
        "the members sharing GPU 4 are given erin 40G, frank 40G of its memory (shared_gpus), 81920 MiB in all, more "
        "than the GPU's 81559 MiB; MPS could not honour every cap. Fix: lower the memory of the shared_gpus entries "
        "for GPU 4, so they add up to at most 81559M"]


def test_a_shared_gpus_unknown_memory_is_a_warning_not_a_guess(h100) -> None:
    topo, _found = h100
    members = [{"name": "erin", "uid": 2005, "shared_gpus": [{"gpu": 4, "memory": "40g"}]}]
    plan = planned(members, topo, 0)
    assert plan["problems"] == []
    assert plan["shared"]["4"]["memory_total_mib"] is None
    assert "GPU 4 is shared (erin 40G) but its memory is not known here" in plan["warnings"][0]
