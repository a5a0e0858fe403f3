"""gpuops_plan (plugins/plugin_utils/plan.py): built from real `nvidia-smi topo -m` captures in ../shared/data
(parsed by the collection's own parser), validated against plan.SCHEMA, written as plan.json."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan, preflight_report
from fleet_fixture import shared_path

REPO = Path(__file__).resolve().parents[4]
PIN = "550.90.07"
# The toolkit pin where the inventory sets none: nvidia_container_toolkit's default, which the plan carries.
TOOLKIT = yaml.safe_load((REPO / "roles/nvidia_container_toolkit/defaults/main.yml").read_text(encoding="utf-8"))[
    "nvidia_container_toolkit_version"]


def _topology(name: str) -> dict:
    return parse_topology(shared_path("nvidia-smi", "topo", name).read_text())


def _valid(built: dict) -> dict:
    jsonschema.Draft202012Validator(plan.SCHEMA).validate(json.loads(json.dumps(built)))
    return built


@pytest.fixture(name="kube_plan")
def _kube_plan() -> dict:
    fleet = {"ok": True, "platform": "kubernetes", "source": "auto", "reason": "16 GPUs, team of 14", "gpu_count": 16}
    records = {
        # HGX H100: one NVLink domain of 8 GPUs over 2 NUMA nodes, no NIC (real capture h100x8_sxm_2numa_noNIC)
        "hgx-01": {"gpu": {"count": 8, "source": "nvml", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8,
                           "fabric_manager": {"required": True}, "topology": _topology("h100x8_sxm_2numa_noNIC.txt")},
                   "result": {"ok": True}},
        # DGX A100: 10 NICs, 8 of them nearest to a GPU (real capture dgx-a100_8gpu_10nic_nps4-numa_dgx05)
        "dgx-05": {"gpu": {"count": 8, "source": "nvml", "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}] * 8,
                           "fabric_manager": {"required": True},
                           "topology": _topology("dgx-a100_8gpu_10nic_nps4-numa_dgx05.txt")},
                   "result": {"ok": True}},
    }
    for record in records.values():  # the arguments preflight judged each host with
        record["plan"] = {"driver_version": PIN, "cuda_version": "12.4"}
    team = {"gpuops_members": [{"name": "alice", "team": "vision", "gpus": [0, 1]}, {"name": "bob", "team": "nlp"}],
            "gpuops_teams": [{"name": "vision", "namespace": "cv"}, {"name": "nlp"}]}
    hostvars = {
        "hgx-01": {**team, "gpuops_pool": "training"},
        "dgx-05": {**team, "gpuops_pool": "training", "kube_node_reserved_system_cpus": "0-3"},
    }
    return _valid(plan.build_plan(fleet, records, hostvars, "2026-12-02T00:00:00+00:00",
                                  "/r/20261202T000000Z"))


def test_fleet_part_platform_team_and_pins(kube_plan):
    assert kube_plan["source"] == "preflight"
    assert kube_plan["schema_version"] == plan.SCHEMA_VERSION
    assert kube_plan["platform"] == {"name": "kubernetes", "source": "auto", "reason": "16 GPUs, team of 14",
                                     "ok": True, "gpu_count": 16}
    assert kube_plan["team"]["members"] == {"alice": {"team": "vision", "gpus": [0, 1]},
                                            "bob": {"team": "nlp", "gpus": []}}
    assert kube_plan["team"]["namespaces"] == {"vision": "cv", "nlp": "team-nlp"}
    assert kube_plan["pins"]["driver"] == PIN
    assert kube_plan["pins"]["cuda"] == "12.4"


def test_host_part_from_the_hgx_capture(kube_plan):
    hgx = kube_plan["hosts"]["hgx-01"]
    assert hgx["packages"] == {"driver": PIN, "fabric_manager_needed": True,
                               "fabric_manager_reason": "? NVSwitch device(s) found", "container_toolkit": TOOLKIT,
                               "dcgm_cuda_major": 12}, (
        "NVSwitch host: Fabric Manager needed (at the pin); no toolkit pin in this inventory: the role's default; "
        "DCGM for CUDA 12, which the 550 pin runs natively")
    assert hgx["topology_source"] == "preflight"
    # the NVLink domain spans both NUMA nodes: single-numa-node cannot hold it
    assert hgx["kubelet_policy"]["topology_manager_policy"] == "restricted"
    assert "spans NUMA nodes" in hgx["kubelet_policy"]["reason"]
    assert hgx["nccl"]["env"] == {"NCCL_IB_DISABLE": "1"}, "no NIC: NCCL over TCP sockets"


def test_host_part_from_the_dgx_capture_and_the_inventorys_reservation(kube_plan):
    dgx = kube_plan["hosts"]["dgx-05"]
    assert dgx["nccl"]["env"]["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert "mlx5_8, mlx5_9" in dgx["nccl"]["notes"][0], "storage NICs nearest to no GPU are left out"
    assert dgx["kubelet_policy"]["reserved_system_cpus"] == "0-3", "kube_node_reserved_system_cpus reaches the plan"
    hgx = kube_plan["hosts"]["hgx-01"]
    assert hgx["kubelet_policy"]["reserved_system_cpus"] != "0-3"


def test_no_kubelet_policy_on_compose_or_without_a_pool():
    gpu = {"count": 4, "topology": _topology("a10x4_pcie_sys_2nic.txt")}
    assert plan.host_part("compose", gpu, {"gpuops_pool": "training"})["kubelet_policy"] is None
    assert plan.host_part("kubernetes", gpu, {})["kubelet_policy"] is None
    assert plan.host_part("kubernetes", gpu, {"gpuops_pool": "training"})["packages"] == {
        "driver": None, "fabric_manager_needed": None,
        "fabric_manager_reason": "the GPU facts were not read, so NVSwitches were not looked for",
        "container_toolkit": TOOLKIT, "dcgm_cuda_major": None}


# nvidia_driver installs Fabric Manager where the plan says so (packages.fabric_manager_needed): the inventory's
# nvidia_driver_fabric_manager true or false, else (auto) the NVSwitches the GPU facts found.
@pytest.mark.parametrize(("setting", "found", "needed", "reason"), [
    ("auto", {"required": True, "nvswitch_count": 4}, True, "4 NVSwitch device(s) found"),
    ("auto", {"required": False, "nvswitch_count": 0}, False, "no NVSwitch found"),
    (None, {"required": True, "nvswitch_count": 6}, True, "6 NVSwitch device(s) found"),
    ("auto", None, None, "the GPU facts were not read, so NVSwitches were not looked for"),
    (True, {"required": False, "nvswitch_count": 0}, True, "nvidia_driver_fabric_manager: true"),
    (False, {"required": True, "nvswitch_count": 4}, False, "nvidia_driver_fabric_manager: false"),
])
def test_fabric_manager_is_decided_in_the_plan(setting, found, needed, reason):
    gpu = {"count": 8, "present": True, **({"fabric_manager": found} if found is not None else {})}
    hostvars = {"nvidia_driver_version": PIN}
    if setting is not None:
        hostvars["nvidia_driver_fabric_manager"] = setting
    packages = plan.host_part("compose", gpu, hostvars)["packages"]
    assert (packages["fabric_manager_needed"], packages["fabric_manager_reason"]) == (needed, reason)


@pytest.mark.parametrize(("pin", "running", "major"), [
    ("535.261.03", None, 12), ("580.65.06", None, 13), ("470.82.01", None, 11), ("418.39", None, 10),
    (None, "580.95.05", 13), ("575.57.08", "580.95.05", 12), (None, None, None), ("550", None, 12), ("abc", None, None),
])
def test_dcgm_packages_follow_the_cuda_major_of_the_driver(pin, running, major):
    """gpu_health installs datacenter-gpu-manager-4-cuda<N> for the plan's N: the newest CUDA major the driver runs
    natively (the pin, else the running driver preflight judged); none where no driver is known, or no version."""
    hostvars = {"nvidia_driver_version": pin} if pin else {}
    judged = {"version": pin or running, "source": "pin" if pin else "running"} if pin or running else None
    part = plan.host_part("compose", {"count": 8, "present": True}, hostvars, driver_judged=judged)
    assert part["packages"]["dcgm_cuda_major"] == major


def test_gpu_presence_and_package_pins_are_in_the_plan():
    hostvars = {"nvidia_container_toolkit_version": "1.18.0"}
    part = plan.host_part("compose", {"count": 0, "present": False, "source": "pci"}, hostvars)
    assert part["gpus_present"] is False, "playbooks/host.yml skips this host"
    assert part["packages"]["container_toolkit"] == "1.18.0", "nvidia_container_toolkit installs the inventory's pin"
    assert TOOLKIT != "1.18.0", "the default differs, so the line above tells the two apart"
    assert plan.host_part("compose", {"count": 8, "present": True}, {})["gpus_present"] is True
    assert plan.host_part("compose", {}, {})["gpus_present"] is None, "not read: not known"


def test_inventory_topology_when_preflight_read_none():
    declared = {"nvlink_domains": [[0, 1]], "numa_groups": [{"numa_node": 0, "gpus": [0, 1], "cpus": "0-15"}]}
    part = plan.host_part("kubernetes", {"count": 2},
                          {"gpuops_pool": "training", "gpuops_gpu_topology": declared})
    assert part["topology_source"] == "inventory (gpuops_gpu_topology)"
    assert part["kubelet_policy"]["topology_manager_policy"] == "single-numa-node"


def test_inventory_plan_decides_by_the_same_rule():
    base = {"gpuops_team_size": 3, "gpuops_multi_node_training": False}
    four = {**base, "gpuops_gpu_count": 4}
    decided = _valid(plan.inventory_plan(["a", "b"], {"a": four, "b": four}))
    assert decided["source"] == "inventory"
    assert (decided["platform"]["name"], decided["platform"]["source"]) == ("compose", "auto")
    forced = plan.inventory_plan(["a"], {"a": {**base, "gpuops_platform": "kubernetes"}})
    assert (forced["platform"]["name"], forced["platform"]["source"]) == ("kubernetes", "override")
    # GPUs counted by gpu_facts in this play (ansible_facts.gpu) decide when gpuops_gpu_count is unset
    many = 24
    counted = plan.inventory_plan(["a"], {"a": {**base, "ansible_facts": {"gpu": {"count": many}}}})
    assert counted["platform"]["name"] == "kubernetes"
    assert counted["platform"]["gpu_count"] == many


def test_inventory_plan_that_cannot_decide_says_why():
    undecided = _valid(plan.inventory_plan(["a"], {"a": {"gpuops_team_size": 6}}))
    assert undecided["platform"]["ok"] is False
    assert undecided["platform"]["name"] is None
    assert "gpuops_gpu_count" in undecided["platform"]["reason"]
    assert plan.inventory_plan([], {})["platform"]["reason"] == "no host in gpu_nodes"


def test_write_plan_is_0640_in_each_folder(kube_plan, tmp_path):
    paths = preflight_report.write_plan(kube_plan, str(tmp_path / "run"), str(tmp_path))
    assert paths == [str(tmp_path / "run" / "plan.json"), str(tmp_path / "plan.json")]
    for path in paths:
        assert stat.S_IMODE(Path(path).stat().st_mode) == preflight_report.FILE_MODE
        assert json.loads(Path(path).read_text()) == json.loads(json.dumps(kube_plan))


def test_no_play_resolves_the_platform_itself():
    """Every play reads gpuops_plan (playbooks/tasks/plan.yml); no copy of the old fallback chain is left."""
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("playbooks", "roles", "plugins")
        for path in sorted((REPO / folder).rglob("*"))
        if path.suffix in (".yml", ".yaml", ".py", ".j2") and path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bpreflight_platform\b|preflight_platform \| default", line)
    ]
    assert offenders == []


HOST_SCHEMA = plan.SCHEMA["properties"]["hosts"]["additionalProperties"]


@pytest.mark.parametrize(
    ("platform", "hostvars", "form", "why"),
    [
        ("kubernetes", {}, "daemonset", "kubernetes: kube_monitoring's DaemonSet"),
        ("kubernetes", {"gpu_health_sweep_timer_enabled": True}, "daemonset", "not used (one sweep per node)"),
        # the defect of issue 38: the DaemonSet off left a Kubernetes GPU node with no sweep at all
        ("kubernetes", {"kube_monitoring_gpu_health_sweep": False}, "timer",
         "kubernetes with kube_monitoring_gpu_health_sweep: false: gpu_health's systemd timer"),
        ("kubernetes", {"kube_monitoring_gpu_health_sweep": False, "gpu_health_sweep_timer_enabled": False}, "none",
         "gpu_health_sweep_timer_enabled: false: no scheduled sweep"),
        ("compose", {}, "timer", "compose: gpu_health's systemd timer"),
        ("compose", {"kube_monitoring_gpu_health_sweep": True}, "timer", "compose: gpu_health's systemd timer"),
        ("compose", {"gpu_health_sweep_timer_enabled": False}, "none", "compose, and gpu_health_sweep_timer_enabled"),
        # an extra var given as key=value is a string
        ("kubernetes", {"kube_monitoring_gpu_health_sweep": "false"}, "timer", "gpu_health_sweep: false"),
        (None, {}, "timer", "no platform decided: gpu_health's systemd timer"),
    ],
)
def test_the_plan_decides_each_hosts_one_sweep_form_and_why(platform, hostvars, form, why):
    part = plan.host_part(platform, {"count": 8}, hostvars)
    assert part["health_sweep"]["form"] == form
    assert why in part["health_sweep"]["reason"]
    jsonschema.validate(part, HOST_SCHEMA)
    assert set(plan.HEALTH_SWEEP_FORMS) == set(HOST_SCHEMA["properties"]["health_sweep"]["properties"]["form"]["enum"])
