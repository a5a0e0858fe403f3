"""The MPS memory rule (plugin_utils/mps.py): a cap minus the client's CUDA context must leave the least usable memory.

The reserve's default is checked against the real capture it comes from, ../shared/data/nvidia-smi/h200-driver580/
mps-pinned-mem-limit.txt (one H200, driver 580.159.04, CUDA 13.0; a client allocating 64 MiB blocks until refused
under CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G, 2G and 8G; SOURCES.md there). The rule's edges (exactly the smallest
cap passes, one MiB less is refused) are checked on the rule itself and through each caller on both platforms:
compose members' shared_gpus caps (team, the plan's workspaces and the team filter) and a Kubernetes pool's
per-replica share (gpu_sharing, gpu_operator, the plan).
"""

from __future__ import annotations

import re

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.plan import team_problems as team_problems_filter
from ansible_collections.gpuops.cluster.plugins.plugin_utils import (
    gpu_operator,
    gpu_sharing,
    mps,
    plan,
    platform,
    preflight,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import gpu_assignment_problems, team_problems
from conftest import shared_path

CAPTURE = ("nvidia-smi", "h200-driver580", "mps-pinned-mem-limit.txt")
CAPTURE_LINE = re.compile(r"^cap (\d+)G -> .*allocated MiB (\d+);")
DEFAULTS = mps.limits()
SMALLEST = DEFAULTS.reserve_mib + DEFAULTS.min_usable_mib
TEAMS = [{"name": "research"}]
TOPOLOGY = {"gpus": [{"index": 0, "cpu_affinity": "0-3", "numa_node": 0},
                     {"index": 1, "cpu_affinity": "4-7", "numa_node": 0}]}


def sharer(cap: str, name: str = "bob", uid: int = 2002, gpu: int = 1) -> dict:
    return {"name": name, "uid": uid, "team": "research", "shared_gpus": [{"gpu": gpu, "memory": cap}]}


def members(cap: str) -> list[dict]:
    return [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0]}, sharer(cap)]


def workspace_plan(team: list[dict], topology: dict) -> dict:
    """The plan's workspaces of one compose host (plan.host_part), which compose_stack deploys."""
    return plan.host_part("compose", {}, {"gpuops_members": team, "gpuops_gpu_topology": topology})["workspaces"]


def capped(problems: list[str]) -> list[str]:
    return [p for p in problems if "of every MPS cap" in p]


def test_the_defaults_are_the_gpuops_vars_roles() -> None:
    home = platform.COLLECTION_ROOT / "roles" / "_gpuops_vars" / "defaults" / "main.yml"
    defaults = yaml.safe_load(home.read_text())
    assert (DEFAULTS.reserve_mib, DEFAULTS.min_usable_mib) == (defaults[mps.RESERVE_VAR], defaults[mps.MIN_USABLE_VAR])


def test_the_default_reserve_is_what_the_h200_capture_lost_under_every_cap() -> None:
    lines = shared_path(*CAPTURE).read_text().splitlines()
    measured = [(int(m.group(1)) * 1024, int(m.group(2))) for m in map(CAPTURE_LINE.match, lines) if m]
    assert [cap for cap, _allocated in measured] == [1024, 2048, 8192], lines
    for cap, allocated in measured:
        assert cap - DEFAULTS.reserve_mib == allocated, (cap, allocated)


def test_exactly_the_smallest_cap_passes_and_one_mib_less_is_refused() -> None:
    rule = mps.Limits(576, 512)
    assert mps.cap_problem("member bob's MPS cap on GPU 1", 1088, rule, "raise it") is None
    problem = mps.cap_problem("member bob's MPS cap on GPU 1", 1087, rule, "raise it")
    assert problem == (
        "member bob's MPS cap on GPU 1 is 1087 MiB, but the client's CUDA context takes 576 MiB of every MPS cap "
        "(gpuops_mps_context_reserve), which leaves 511 MiB to allocate; expected at least 512 MiB left "
        "(gpuops_mps_min_usable), a cap of 1088 MiB or more; fix: raise it")
    assert "which leaves nothing to allocate" in mps.cap_problem("cap", 576, rule, "raise it")
    assert "which leaves nothing to allocate" in mps.cap_problem("cap", 300, rule, "raise it")


def test_a_higher_need_is_the_floor_and_a_lower_one_is_not() -> None:
    rule = mps.Limits(576, 512)
    assert mps.cap_problem("cap", 576 + 8192, rule, "fix", 8192, "pool.need") is None
    problem = mps.cap_problem("cap", 576 + 8191, rule, "fix", 8192, "pool.need")
    assert "expected at least 8192 MiB left (pool.need), a cap of 8768 MiB or more" in problem
    assert mps.cap_problem("cap", 1088, rule, "fix", 100, "pool.need") is None
    assert "(gpuops_mps_min_usable)" in mps.cap_problem("cap", 1087, rule, "fix", 100, "pool.need")


@pytest.mark.parametrize(("reserve", "usable", "wanted"), [
    ("576", None, "gpuops_mps_context_reserve is '576'; expected MiB as a whole number >= 0"),
    (None, -1, "gpuops_mps_min_usable is -1; expected MiB as a whole number >= 0"),
    (True, None, "gpuops_mps_context_reserve is True"),
])
def test_bad_settings_are_named(reserve, usable, wanted: str) -> None:
    with pytest.raises(ValueError, match=re.escape(wanted)):
        mps.limits(reserve, usable)
    assert team_problems_filter(TEAMS, members("2g"), reserve, usable)[0].startswith(wanted)
    pools = {"inference": {"mps_replicas": 4}}
    assert wanted in gpu_operator.problems({"chart_version": "v26.3.2", "pools": pools, "mps_context_reserve": reserve,
                                            "mps_min_usable": usable})[-1]


def test_compose_caps_at_the_edge_through_the_team_check() -> None:
    """The cap rule is the team's (the gpuops_* check's team part, team_problems); the plan's
    workspaces deploy the caps the team check passed."""
    smallest, below = f"{SMALLEST}m", f"{SMALLEST - 1}m"
    assert not capped(team_problems(TEAMS, members(smallest)))
    assert not capped(gpu_assignment_problems(members(smallest)))
    bob = workspace_plan(members(smallest), TOPOLOGY)["members"]["bob"]
    assert bob["mps"]["pinned_mem_limit"] == f"0={SMALLEST}M"
    for problems in (team_problems(TEAMS, members(below)), gpu_assignment_problems(members(below)),
                     team_problems_filter(TEAMS, members(below))):
        assert capped(problems) == [
            f"member bob's MPS cap on GPU 1 (gpuops_members[1].shared_gpus memory '{below}') is {SMALLEST - 1} MiB, "
            f"but the client's CUDA context takes {DEFAULTS.reserve_mib} MiB of every MPS cap "
            f"(gpuops_mps_context_reserve), which leaves {DEFAULTS.min_usable_mib - 1} MiB to allocate; expected at "
            f"least {DEFAULTS.min_usable_mib} MiB left (gpuops_mps_min_usable), a cap of {SMALLEST} MiB or more; fix: "
            f"raise bob's memory on GPU 1 to {SMALLEST}M or more, or give bob an exclusive GPU (gpus) instead"
        ], problems


def test_compose_caps_follow_the_inventory_settings() -> None:
    """A 300 MiB cap passes when the inventory measured no reserve; a 2 GiB cap is refused when it asks 2 GiB left."""
    assert not capped(team_problems_filter(TEAMS, members("300m"), 0, 300))
    assert capped(team_problems_filter(TEAMS, members("2g"), None, 2048))


def test_a_malformed_cap_is_named_once_by_the_shape_rule() -> None:
    problems = team_problems(TEAMS, members("300MB"))
    assert not capped(problems)
    assert any("shared_gpus lists" in p for p in problems), problems


def nodes(memory: int) -> list[dict]:
    return [{"name": "gpu-02", "pool": "inference", "gpu_model": "NVIDIA H200", "gpu_memory_mib": memory}]


def test_kubernetes_share_at_the_edge() -> None:
    """4 replicas of a GPU of 4 x the smallest cap: each share is exactly the smallest cap; 4 MiB less, one MiB less."""
    pool = {"mps_replicas": 4}
    assert gpu_sharing.sharing_problems("inference", pool, nodes(4 * SMALLEST)) == []
    problems = gpu_sharing.sharing_problems("inference", pool, nodes(4 * SMALLEST - 1))
    assert problems == [
        f"gpu_operator_pools.inference: each replica's MPS cap on node gpu-02's GPUs (NVIDIA H200, {4 * SMALLEST - 1} "
        f"MiB / mps_replicas 4: the MPS daemon's default pinned device memory limit) is {SMALLEST - 1} MiB, but the "
        f"client's CUDA context takes {DEFAULTS.reserve_mib} MiB of every MPS cap (gpuops_mps_context_reserve), "
        f"which leaves {DEFAULTS.min_usable_mib - 1} MiB to allocate; expected at least {DEFAULTS.min_usable_mib} MiB "
        f"left (gpuops_mps_min_usable), a cap of {SMALLEST} MiB or more; fix: lower mps_replicas to 3 or fewer"]


def test_kubernetes_share_the_capture_measured_is_refused_through_every_caller() -> None:
    """16384 MiB / 16 replicas is the capture's 1G cap, under which a client allocated 448 MiB: less than 512."""
    pools = {"inference": {"mps_replicas": 16}, "training": {}}
    config = {"chart_version": "v26.3.2", "pools": pools, "nodes": nodes(16384)}
    wanted = "is 1024 MiB, but the client's CUDA context takes 576 MiB of every MPS cap"
    found = gpu_operator.problems(config)
    assert len(found) == 1, found
    assert wanted in found[0]
    assert "fix: lower mps_replicas to 15 or fewer" in found[0]
    part = gpu_sharing.plan_part(pools, nodes(16384))
    assert part["inference"]["strategy"] is None
    assert wanted in part["inference"]["reason"]
    # the inventory's settings reach the plan and the role: no reserve measured, the share passes
    assert gpu_operator.problems({**config, "mps_context_reserve": 0}) == []
    assert gpu_sharing.plan_part(pools, nodes(16384), mps_limits=mps.limits(0))["inference"]["strategy"] == "mps"


def test_the_plan_reads_the_settings_from_the_inventory() -> None:
    hosts = {"gpu-02": {"kube_addons_gpu_operator": True, "gpuops_pool": "inference", "gpu_operator_gpu_memory_mib":
                        16384, "gpu_operator_pools": {"inference": {"mps_replicas": 16}, "training": {}}}}
    nodes = plan.nodes_part({"gpu-02": {}}, hosts)["gpu"]
    refused = plan.gpu_sharing_part("kubernetes", nodes, hosts["gpu-02"])
    assert refused["inference"]["strategy"] is None, refused
    hosts["gpu-02"][mps.RESERVE_VAR] = 0
    assert plan.gpu_sharing_part("kubernetes", nodes, hosts["gpu-02"])["inference"]["strategy"] == "mps"


def test_the_team_check_follows_the_inventory_settings() -> None:
    """The team check (the gpuops_* check's team_problems filter, given gpuops_mps_context_reserve and
    gpuops_mps_min_usable) judges a cap with the inventory's settings: a 300 MiB cap is refused by default and passes
    where the inventory measured no reserve. Preflight judges only the host's part (its GPUs), not the caps."""
    assert capped(team_problems_filter(TEAMS, members("300m")))
    assert not capped(team_problems_filter(TEAMS, members("300m"), 0, 300))
    assert preflight.gpu_assignment(members("300m"), 2)["ok"] is True
