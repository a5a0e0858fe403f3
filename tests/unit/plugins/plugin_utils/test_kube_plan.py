"""kube_plan: kubelet policy on every real topology capture, CIDR checks, version and cluster-shape refusals."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_plan, platform
from conftest import SHARED_DATA, shared_path

TOPO_DIR = ("nvidia-smi", "topo")
RESERVED_MIB = 4096  # the default system reserve plus eviction threshold
LABEL_MAX = 63  # Kubernetes label value limit
PROBLEMS_IN_PLAN = 5
BAD_CIDRS = 2

# capture -> (training policy, reservedSystemCPUs, nvlink-domains label, substring of the reason)
# Read from each capture by hand: the NVLink domains, each GPU's NUMA node and CPU affinity.
EXPECTED = {
    "a100x8_17nic_singleNUMA": ("single-numa-node", "0-1", "0-7", "GPU NUMA nodes 0"),
    "a10x4_pcie_sys_2nic": ("single-numa-node", "0-1", "0_1_2_3", "each NVLink domain sits in one NUMA node"),
    "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK": (
        "restricted",
        "0-1",
        "0-1",
        "NUMA node of GPU 0-1 is unknown",
    ),
    "azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK": (
        "restricted",
        "0-1",
        "0-1_2-3",
        "NUMA node of GPU 0-3 is unknown",
    ),
    "dgx-a100_8gpu_10nic_nps4-numa_dgx05": (
        "restricted",
        "16-17,48-49,80-81,112-113",
        "0-7",
        "GPUs 0-7 on NUMA nodes 1,3,5,7",
    ),
    "dgx2-class_v100x16_nv6_10nic_TRUNCATED_nccl-tests78": ("restricted", "0-1", "0-15", "GPU 0-15 is unknown"),
    "gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60": ("restricted", "0-1", "0_1_2_3_4_5_6_7", "GPU 4-7 is unknown"),
    "h100x4_vm_8nic_phb": ("single-numa-node", "0-1", "0-3", "GPU NUMA nodes 0"),
    "h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453": ("restricted", "0-1,80-81", "0-7", "GPUs 0-7 on NUMA nodes 0-1"),
    "h100x8_sxm_2numa_noNIC": ("restricted", "0-1,52-53", "0-7", "GPUs 0-7 on NUMA nodes 0-1"),
    "h800x8_nv8_4nic_TERMINAL-TRUNCATED": ("restricted", "2-3", "0-7", "GPUs 0-7 on NUMA nodes 0-1"),
    "pcie8_a5000_2socket_savio4_mlx5": ("single-numa-node", "0-1,16-17", "0_1_2_3_4_5_6_7", "GPU NUMA nodes 0-1"),
    "rtx3090x8_pcie_pix-phb-sys_2socket_LEGEND-TRUNCATED_nccl1439": (
        "single-numa-node",
        "0-1,14-15",
        "0_1_2_3_4_5_6_7",
        "GPU NUMA nodes 0-1",
    ),
}


def kubelet_policy(topology, pool, **given):
    """kubelet_policy with kube_node's defaults for the reservations not given, as the plan passes them."""
    defaults = {keyword: platform.role_defaults("kube_node")[name]
                for keyword, (name, _kind) in kube_plan.RESERVATIONS.items()}
    return kube_plan.kubelet_policy(topology, pool, **{**defaults, **given})


def _topology(name: str) -> dict:
    return parse_topology(shared_path(*TOPO_DIR, f"{name}.txt").read_text(encoding="utf-8"), 2)


def test_every_real_capture_has_an_expectation():
    folder = SHARED_DATA.joinpath(*TOPO_DIR)
    if not folder.is_dir():
        pytest.skip(f"real third-party data not present: {folder}")
    assert sorted(path.stem for path in folder.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_training_policy_on_real_capture(name):
    policy, cpus, label, reason = EXPECTED[name]
    result = kubelet_policy(_topology(name), "training")
    assert result["topology_manager_policy"] == policy, result["reason"]
    assert result["reserved_system_cpus"] == cpus
    assert result["nvlink_domains_label"] == label
    assert reason in result["reason"]
    assert result["topology_manager_scope"] == "pod"
    assert result["cpu_manager_policy"] == "static"
    if policy == "single-numa-node":
        assert result["memory_manager_policy"] == "Static"
        total = sum(int(entry["limits"]["memory"].removesuffix("Mi")) for entry in result["reserved_memory"])
        assert total == RESERVED_MIB  # system reserve + eviction threshold, as the kubelet requires
    else:
        assert result["memory_manager_policy"] == "None"
        assert result["reserved_memory"] == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_inference_is_best_effort_on_real_capture(name):
    result = kubelet_policy(_topology(name), "inference")
    assert result["topology_manager_policy"] == "best-effort"
    assert result["memory_manager_policy"] == "None"


def test_reserved_memory_split_over_gpu_numa_nodes_sums_exactly():
    topology = {"nvlink_domains": [[0], [1], [2]], "numa_groups": [{"numa_node": n, "gpus": [n]} for n in range(3)]}
    result = kubelet_policy(topology, "training", reserved_memory_mib=1000, eviction_memory_mib=100)
    assert result["reserved_memory"] == [
        {"numaNode": 0, "limits": {"memory": "334Mi"}},
        {"numaNode": 1, "limits": {"memory": "333Mi"}},
        {"numaNode": 2, "limits": {"memory": "333Mi"}},
    ]
    assert result["system_reserved_memory"] == "900Mi"


def test_declared_topology_with_numa_cpus_and_explicit_cpus():
    declared = {
        "nvlink_domains": [[0, 1, 2, 3]],
        "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3], "cpus": "0-31"}],
    }
    derived = kubelet_policy(declared, "training", reserved_cpus_per_numa=4)
    assert derived["reserved_system_cpus"] == "0-3"
    explicit = kubelet_policy(declared, "training", reserved_system_cpus="0,16")
    assert explicit["reserved_system_cpus"] == "0,16"
    assert "set in the inventory" in explicit["reason"]


def test_no_topology_is_restricted_with_a_reason():
    result = kubelet_policy(None, "training")
    assert result["topology_manager_policy"] == "restricted"
    assert "no GPU topology" in result["reason"]
    assert result["nvlink_domains_label"] == "none"


def test_bad_pool_raises():
    """The reservations are taken as given: kube_node's inputs refuse reserved memory at or below the eviction
    threshold, for every node (tests/unit/roles/test_kube_node_inputs.py)."""
    with pytest.raises(ValueError, match="expected one of training, inference"):
        kubelet_policy({}, "batch")


def test_long_domain_label_stays_a_valid_label_value():
    domains = [[gpu, gpu + 100] for gpu in range(40)]
    label = kube_plan.nvlink_domains_label(domains)
    assert len(label) <= LABEL_MAX
    assert label == "40-domains"


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        ("1.34.2", None),
        ("1.31.0", None),
        ("1.37.1", None),
        ("v1.34.2", "no 'v'"),
        ("1.34", "exact release"),
        ("latest", "exact release"),
        ("1.34.x", "exact release"),
        ("1.30.9", "supported are 1.31.x to 1.37.x"),
        ("2.0.0", "supported are"),
        (1.34, "expected a quoted string"),
    ],
)
def test_kube_version(version, problem):
    found = kube_plan.kube_version_problem(version)
    if problem is None:
        assert found is None
    else:
        assert problem in found
        assert str(version) in found
        assert "pin an exact release" in found


CALICO = ("kube_cni", "kube_cni_calico_version")  # Calico's tag, in the manifest URL: its 'v' is part of the name
CHART = ("kube_monitoring", "kube_monitoring_chart_version")  # kube-prometheus-stack's chart has none
GPU_OPERATOR = ("gpu_operator", "gpu_operator_chart_version")


@pytest.mark.parametrize(
    ("owner", "value", "pinned"),
    [
        (CALICO, "v3.30.3", True),
        (CALICO, "3.30.3", False),
        (CHART, "79.5.0", True),
        (CHART, "v79.5.0", False),
        (CHART, ">=79", False),
        (GPU_OPERATOR, "v26.3.2-rc.1", False),  # a prerelease: the collection is tested on releases only
        (GPU_OPERATOR, "v26.3", False),
        (GPU_OPERATOR, "latest", False),
        (GPU_OPERATOR, "", False),
        (GPU_OPERATOR, None, False),
        (GPU_OPERATOR, 26.3, False),
        (GPU_OPERATOR, "v27.1.0", True),
    ],
)
def test_one_pin_rule_for_the_add_on_releases(owner, value, pinned):
    """kube_cni, kube_monitoring and training_stack (filter unpinned_releases) and gpu_operator's plan judge their
    releases by this one rule, spelt as the variable's default in its role is."""
    role, variable = owner
    found = kube_plan.release_problem(variable, value, role)
    assert (found is None) == pinned, found
    if found:
        like = platform.role_defaults(role)[variable]
        assert found.startswith(f"{variable} is {value!r}: expected one exact release spelt as {like!r} is")


@pytest.mark.parametrize(
    ("count", "endpoint", "problem"),
    [
        (1, "", None),
        (3, "cp.lan:6443", None),
        (3, "", "need a stable"),
        (2, "cp:6443", "expected 1, or 3"),
        (0, "", "0 hosts"),
    ],
)
def test_control_plane_shape(count, endpoint, problem):
    found = kube_plan.control_plane_problem(count, endpoint)
    assert (found is None) if problem is None else (problem in found)


def test_cidr_checks():
    assert kube_plan.cidr_problems("10.244.0.0/16", "10.96.0.0/12", {"n1": "192.168.1.10", "n2": "node.lan"}) == []
    overlap = kube_plan.cidr_problems("10.96.0.0/16", "10.96.0.0/12", {})
    assert len(overlap) == 1
    assert "overlaps kube_service_cidr" in overlap[0]
    node = kube_plan.cidr_problems("192.168.0.0/16", "10.96.0.0/12", {"gpu-01": "192.168.1.10"})
    assert len(node) == 1
    assert "gpu-01" in node[0]
    assert "192.168.1.10" in node[0]
    bad = kube_plan.cidr_problems("10.244.0.1/16", "nonsense", {})
    assert len(bad) == BAD_CIDRS
    assert "kube_pod_cidr is '10.244.0.1/16'" in bad[0]


def test_cluster_problems_lists_everything_at_once():
    plan = {
        "kube_version": "1.34",
        "control_planes": ["cp1", "cp2"],
        "endpoint": "",
        "pools": {"gpu1": None, "cp1": "training"},
        "schedulable": {"cp1": False},
        "pod_cidr": "10.96.0.0/16",
        "service_cidr": "10.96.0.0/12",
        "addresses": {},
    }
    problems = kube_plan.cluster_problems(plan)
    assert len(problems) == PROBLEMS_IN_PLAN
    joined = "\n".join(problems)
    for text in (
        "kube_version is '1.34'",
        "2 hosts",
        "gpuops_pool of gpu1 is null: expected training or inference; set gpuops_pool for this GPU node",
        "kube_control_plane_schedulable is False",
        "overlaps",
    ):
        assert text in joined
    good = dict(
        plan, kube_version="1.34.2", control_planes=["cp1"], pools={"gpu1": "inference"}, pod_cidr="10.244.0.0/16"
    )
    assert kube_plan.cluster_problems(good) == []


def test_a_registration_planned_before_kube_control_plane_schedulable_changed_is_refused():
    """The plan's registrations (nodes.registration) carry the control-plane taint as kube_control_plane_schedulable
    was when the plan was made; a plan.json read back after it changed would register the node the old way."""
    tainted = kube_plan.node_registration(None, "", control_plane=True)
    plan = {"kube_version": "1.34.2", "control_planes": ["cp1"], "endpoint": "", "pools": {},
            "pod_cidr": "10.244.0.0/16", "service_cidr": "10.96.0.0/12", "addresses": {},
            "schedulable": {"cp1": False, "cpu1": None}, "registrations": {"cp1": tainted, "cpu1": {"taints": []}}}
    assert kube_plan.cluster_problems(plan) == []
    stale = kube_plan.cluster_problems({**plan, "schedulable": {"cp1": True}})
    assert stale == ["gpuops_plan.nodes.registration.cp1 has the control-plane taint, but "
                     f"kube_control_plane_schedulable is True now: {kube_plan.STALE_PLAN}"]
    lacks = kube_plan.cluster_problems({**plan, "registrations": {"cp1": {"taints": []}}})
    assert [p.split(",")[0] for p in lacks] == ["gpuops_plan.nodes.registration.cp1 lacks the control-plane taint"]


def test_a_registration_is_judged_by_the_rule_that_planned_it():
    """-e kube_control_plane_schedulable=true gives the string 'true': preflight planned the control plane
    schedulable (plan.nodes_part reads the value with bool), so that same plan is not stale - else its fix, run
    preflight again, could never clear the refusal."""
    planned = kube_plan.node_registration(None, "", control_plane=True, schedulable=bool("true"))
    plan = {"kube_version": "1.34.2", "control_planes": ["cp1"], "endpoint": "", "pools": {},
            "pod_cidr": "10.244.0.0/16", "service_cidr": "10.96.0.0/12", "addresses": {},
            "schedulable": {"cp1": "true"}, "registrations": {"cp1": planned}}
    assert kube_plan.cluster_problems(plan) == []
