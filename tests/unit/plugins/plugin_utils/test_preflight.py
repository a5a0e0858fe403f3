"""preflight_check's rules, on hand-made facts and on facts parsed from real captures."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import evaluate
from conftest import shared_path
from gpu.nvidia_smi_q import parse_nvidia_smi_q

DEBIAN12 = {"distribution": "Debian", "version": "12.7"}
NO_GPU = {"present": False, "count": 0, "gpus": [], "source": "pci", "fabric_manager": {"required": False}}


def checks(result: dict) -> dict:
    return {c["name"]: c for c in result["checks"]}


def plan(**overrides) -> dict:
    base = {"driver_version": "535.261.03", "cuda_version": "12.2", "team_size": 3, "platform": "auto"}
    base.update(overrides)
    return base


def test_fresh_server_without_gpu_passes_and_decides_compose():
    result = evaluate(plan(), {"os": DEBIAN12, "gpu": NO_GPU})
    assert result["ok"] is True
    assert result["failed_checks"] == []
    assert result["platform"]["platform"] == "compose"
    assert result["platform"]["source"] == "auto"
    c = checks(result)
    assert c["fabric_manager"]["status"] == "skipped"
    assert c["gpu_assignment"]["status"] == "skipped"
    assert result["compat"]["mode"] == "native"


@pytest.mark.parametrize(
    ("os_facts", "ok"),
    [
        ({"distribution": "Debian", "version": "13"}, True),
        ({"distribution": "Ubuntu", "version": "24.04"}, True),
        ({"distribution": "Ubuntu", "version": "20.04"}, False),
        # nvidia_driver takes Rocky 9; this plan decides compose, whose docker_engine does not (test_preflight_predicts)
        ({"distribution": "Rocky", "version": "9.4"}, False),
        ({"distribution": "Rocky", "version": "8.9"}, False),
        ({"distribution": "Debian", "version": "120"}, False),
        ({"distribution": "Fedora", "version": "40"}, False),
    ],
)
def test_os_support(os_facts, ok):
    c = checks(evaluate(plan(), {"os": os_facts, "gpu": NO_GPU}))["os_supported"]
    assert c["ok"] is ok
    if not ok:
        assert "supported by every role this host runs: Debian 12/13" in c["msg"]


def test_incompatible_cuda_is_refused_with_the_fix():
    result = evaluate(plan(driver_version="470.82.01", cuda_version="12.4"), {"os": DEBIAN12, "gpu": NO_GPU})
    assert result["ok"] is False
    assert result["failed_checks"] == ["driver_cuda_compat"]
    msg = checks(result)["driver_cuda_compat"]["msg"]
    assert "CUDA 12.4 cannot run on the pinned driver 470.82.01" in msg
    assert "upgrade the driver" in msg


def test_branch_instead_of_version_is_refused():
    c = checks(evaluate(plan(driver_version="550"), {"os": DEBIAN12, "gpu": NO_GPU}))["driver_cuda_compat"]
    assert c["ok"] is False
    assert "'550' is a branch, not a version" in c["msg"]


def test_missing_pin_is_skipped_not_failed():
    result = evaluate(plan(driver_version=""), {"os": DEBIAN12, "gpu": NO_GPU})
    c = checks(result)["driver_cuda_compat"]
    assert c["ok"] is None
    assert "no driver pin (nvidia_driver_version) and no running driver found" in c["msg"]
    assert result["driver_judged"] is None


def test_gpu_out_of_range_is_the_host_part_of_the_team_rule():
    """Preflight judges only what depends on the host; a GPU given twice or a malformed index is the team rule's,
    run once on the whole team by the gpuops_* check before preflight (test_team)."""
    gpu = {"present": True, "count": 2, "gpus": [{"index": 0}, {"index": 1}], "fabric_manager": {}}
    members = [{"name": "alice", "gpus": [0, 1]}, {"name": "bob", "gpus": [1, 2]}, {"name": "carol", "gpus": ["0"]}]
    c = checks(evaluate(plan(gpu_assignments=members), {"os": DEBIAN12, "gpu": gpu}))["gpu_assignment"]
    assert c["ok"] is False
    assert c["msg"] == ("member bob is given GPU 2, but this host has GPUs 0, 1 (gpuops_members[1].gpus); expected "
                        "indexes as nvidia-smi -L numbers them. Fix: give bob one of GPUs 0, 1.")


def test_disjoint_assignments_pass():
    members = [{"name": "alice", "gpus": [0, 1]}, {"name": "bob", "gpus": [2, 3]}]
    c = checks(evaluate(plan(gpu_assignments=members), {"os": DEBIAN12, "gpu": NO_GPU}))["gpu_assignment"]
    assert c["ok"] is True


def test_platform_override_and_bad_team_size():
    assert evaluate(plan(platform="kubernetes"), {"os": DEBIAN12, "gpu": NO_GPU})["platform"] == {
        "platform": "kubernetes",
        "source": "override",
        "reason": "gpuops_platform is set to kubernetes",
    }
    result = evaluate(plan(team_size=-1), {"os": DEBIAN12, "gpu": NO_GPU})
    assert result["ok"] is False
    assert "platform" in result["failed_checks"]


def test_platform_counts_host_gpus_when_no_total_given():
    gpu = {"present": True, "count": 8, "gpus": [{"index": i} for i in range(8)], "fabric_manager": {}}
    result = evaluate(plan(team_size=6, multi_node_training=True), {"os": DEBIAN12, "gpu": gpu})
    assert result["platform"]["platform"] == "kubernetes"


# --- real captures -------------------------------------------------------------------------------


def h100_hgx_facts() -> dict:
    text = shared_path("nvidia-smi", "query", "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt").read_text()
    parsed = parse_nvidia_smi_q(text)
    return {
        "present": True,
        "count": len(parsed["gpus"]),
        "gpus": parsed["gpus"],
        "source": "nvidia-smi",
        "driver_version": parsed["driver_version"],
        "fabric_manager": {"required": True, "version": parsed["driver_version"]},
    }


def h100_topology() -> dict:
    return parse_topology(shared_path("nvidia-smi", "topo", "h100x8_sxm_2numa_noNIC.txt").read_text())


def test_h100_hgx_mig_enabled_on_an_nvlinked_node_is_refused():
    gpu = h100_hgx_facts()
    gpu["gpus"][0]["mig_mode"] = "Enabled"  # the capture, with MIG turned on for GPU 0
    gpu["topology"] = h100_topology()
    result = evaluate(plan(driver_version=gpu["driver_version"], cuda_version=""), {"os": DEBIAN12, "gpu": gpu})
    c = checks(result)["mig"]
    assert c["ok"] is False
    assert "MIG disables NVLink" in c["msg"]
    # the topology, not an assumption, proved NVLink here
    assert "NVLink domains [[0, 1, 2, 3, 4, 5, 6, 7]]" in c["msg"]


def test_h100_hgx_fabric_manager_must_match_driver_exactly():
    gpu = h100_hgx_facts()
    driver = gpu["driver_version"]
    assert checks(evaluate(plan(driver_version=driver), {"os": DEBIAN12, "gpu": gpu}))["fabric_manager"]["ok"] is True
    gpu["fabric_manager"]["version"] = "530.30.02"
    c = checks(evaluate(plan(driver_version="530.41.03"), {"os": DEBIAN12, "gpu": gpu}))["fabric_manager"]
    assert c["ok"] is False
    assert "Fabric Manager 530.30.02 is installed but the driver pin is 530.41.03" in c["msg"]


def test_mig_already_enabled_on_an_nvlink_training_node_is_refused():
    gpu = {
        "present": True,
        "count": 2,
        "fabric_manager": {},
        "gpus": [{"index": 0, "mig_mode": "Enabled", "nvlink": 12}, {"index": 1, "mig_mode": "Disabled", "nvlink": 12}],
    }
    c = checks(evaluate(plan(), {"os": DEBIAN12, "gpu": gpu}))["mig"]
    assert c["ok"] is False
    assert "MIG is enabled on GPUs [0]" in c["msg"]


def test_mig_on_pcie_node_without_multi_node_training_is_allowed():
    gpu = {
        "present": True,
        "count": 2,
        "fabric_manager": {},
        "gpus": [{"index": 0, "mig_mode": "Enabled", "nvlink": 0}, {"index": 1, "mig_mode": "Disabled", "nvlink": 0}],
    }
    assert checks(evaluate(plan(), {"os": DEBIAN12, "gpu": gpu}))["mig"]["ok"] is True
    refused = checks(evaluate(plan(multi_node_training=True), {"os": DEBIAN12, "gpu": gpu}))["mig"]
    assert refused["ok"] is False
    assert "gpuops_multi_node_training" in refused["msg"]
