"""diagnose links: every link fed real or carefully recorded outputs (see diagnose_recorded.py), in each of
its outcomes, and the walk stopping at the first broken link."""

from __future__ import annotations

import json
import re

import diagnose_recorded as R
import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import diagnose as D
from conftest import shared_path


def pod(phase, conditions=(), waiting=None, name="train-0", node=None, ready=True):
    statuses = [{"name": "main", "ready": ready, "restartCount": 0,
                 "state": {"waiting": waiting} if waiting else {"running": {}}}]
    return json.dumps({"metadata": {"name": name, "namespace": "gpu-operator"},
                       "spec": {"nodeName": node} if node else {},
                       "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": statuses}})


def events(*messages, reason="FailedScheduling"):
    return json.dumps({"items": [{"type": "Warning", "reason": reason, "message": m} for m in messages]})


# ---- pod ----
def test_pod_running_is_ok():
    assert D.pod_phase(pod("Running"))["status"] == D.OK


def test_pod_pending_goes_on_with_its_condition_as_evidence():
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": R.SCHED_TAINT_AND_GPU}
    out = D.pod_phase(pod("Pending", [cond]))
    assert out["status"] == D.UNKNOWN
    assert "Pending" in out["evidence"]
    assert "Insufficient nvidia.com/gpu" in out["evidence"]


def test_pod_absent_is_unknown():
    assert D.pod_phase("")["status"] == D.UNKNOWN


# ---- scheduler ----
def test_untolerated_taint_is_broken_with_the_toleration_as_fix():
    out = D.scheduling(events(R.SCHED_UNTOLERATED))
    assert out["status"] == D.BROKEN
    assert "toleration" in out["fix"]
    assert "nvidia.com/gpu" in out["fix"]


def test_insufficient_gpu_goes_further_down():
    for message in (R.SCHED_INSUFFICIENT, R.SCHED_TAINT_AND_GPU):
        out = D.scheduling(events(message))
        assert out["status"] == D.UNKNOWN, message
        assert "Insufficient nvidia.com/gpu" in out["evidence"]


def test_quota_is_broken_with_the_numbers():
    out = D.scheduling(events(R.QUOTA_FAILED_CREATE, reason="FailedCreate"))
    assert out["status"] == D.BROKEN
    assert "team-vision" in out["evidence"]
    assert "requests.nvidia.com/gpu=8" in out["evidence"]
    assert "gpu_quota" in out["fix"]


def test_no_warnings_is_ok():
    assert D.scheduling(json.dumps({"items": []}))["status"] == D.OK


# ---- device plugin ----
def plugin_pods(**kw):
    return json.dumps({"items": [json.loads(pod("Running", name="nvidia-device-plugin-daemonset-sbqjz",
                                                node="gpu-01", **kw))]})


def test_device_plugin_nvml_error_names_the_runtime():
    out = D.device_plugin(plugin_pods(), "gpu-01", R.DEVICE_PLUGIN_NO_NVML)
    assert out["status"] == D.BROKEN
    assert "could not load NVML library" in out["evidence"]
    assert "runtime" in out["fix"]


def test_device_plugin_missing_on_the_node():
    out = D.device_plugin(plugin_pods(), "gpu-02", "")
    assert out["status"] == D.BROKEN
    assert "no nvidia-device-plugin pod on node gpu-02" in out["evidence"]


def test_device_plugin_not_ready():
    out = D.device_plugin(plugin_pods(ready=False), "gpu-01", "")
    assert out["status"] == D.BROKEN
    assert "not ready" in out["evidence"]


def test_device_plugin_registered_is_ok():
    assert D.device_plugin(plugin_pods(), "gpu-01", R.DEVICE_PLUGIN_HEALTHY)["status"] == D.OK
    assert D.device_plugin(None, "gpu-01")["status"] == D.UNKNOWN


# ---- allocatable ----
def node(gpus):
    alloc = {"cpu": "96", "memory": "1056Gi"} | ({"nvidia.com/gpu": gpus} if gpus is not None else {})
    return json.dumps({"metadata": {"name": "gpu-01"}, "status": {"allocatable": alloc}})


@pytest.mark.parametrize(("gpus", "expected", "status"), [
    ("8", 8, D.OK), ("32", 32, D.OK), ("7", 8, D.BROKEN), (None, 8, D.BROKEN), ("0", 8, D.BROKEN)])
def test_allocatable(gpus, expected, status):
    assert D.allocatable(node(gpus), expected)["status"] == status
    assert D.allocatable("", 8)["status"] == D.UNKNOWN


# a MIG pool (mig.strategy single): the device plugin advertises each GPU's MIG devices, as many as the profile makes
# on that GPU, so the link asks for at least one per GPU
@pytest.mark.parametrize(("gpus", "status"), [("8", D.OK), ("7", D.BROKEN), ("0", D.BROKEN), (None, D.BROKEN)])
def test_allocatable_of_a_mig_pool_is_at_least_one_device_per_gpu(gpus, status):
    out = D.allocatable(node(gpus), 8, mig=True)
    assert out["status"] == status, out
    if gpus == "7":
        assert "expected at least 8 (MIG: one device or more per GPU)" in out["evidence"]


def test_allocatable_of_a_mig_pool_counts_every_mig_device():
    """The GPU Operator docs' H100 80GB with all-1g.10gb lists several MIG devices per GPU (its nvidia-smi -L,
    ../shared/data/nvidia-smi/mig): 8 such GPUs advertise that many x 8, ok for a MIG pool, not for whole GPUs."""
    listed = shared_path("nvidia-smi", "mig", "h100-80gb_mig-all-1g.10gb_nvidia-smi-L.txt").read_text()
    per_gpu = listed.count("MIG 1g.10gb")
    assert per_gpu > 1, listed
    assert D.allocatable(node(str(per_gpu * 8)), 8, mig=True)["status"] == D.OK
    assert D.allocatable(node(str(per_gpu * 8)), 8)["status"] == D.BROKEN, "not a MIG pool: exactly 8"


# ---- containerd ----
@pytest.mark.parametrize(("dump", "status"), [
    (R.CONTAINERD_V2_NVIDIA, D.OK), (R.CONTAINERD_V3_NVIDIA, D.OK), (R.CONTAINERD_NO_NVIDIA, D.BROKEN),
    (R.CONTAINERD_NVIDIA_NO_BINARY, D.BROKEN), ("", D.UNKNOWN)])
def test_containerd_runtime(dump, status):
    out = D.containerd_runtime(dump)
    assert out["status"] == status
    if status == D.BROKEN:
        assert "nvidia_container_toolkit" in out["fix"]


# ---- nvidia-smi ----
def test_nvidia_smi_real_listing_is_ok():
    text = shared_path("nvidia-smi", "mig", "h100-80gb_mig-all-1g.10gb_nvidia-smi-L.txt").read_text()
    out = D.nvidia_smi(0, text)
    assert out["status"] == D.OK
    assert out["evidence"].startswith(f"{len(re.findall(r'^GPU ', text, re.M))} GPU(s): GPU 0: NVIDIA H100")


@pytest.mark.parametrize(("rc", "text", "fix_word"), [
    (9, R.NVIDIA_SMI_NO_DRIVER, "not loaded"),
    (18, R.NVIDIA_SMI_MISMATCH, "reboot"),
    (6, R.NVIDIA_SMI_NO_DEVICES, "dmesg"),
    (127, "bash: nvidia-smi: command not found", "nvidia_driver"),
])
def test_nvidia_smi_failures(rc, text, fix_word):
    out = D.nvidia_smi(rc, text)
    assert out["status"] == D.BROKEN
    assert fix_word in out["fix"]
    assert D.nvidia_smi(None, "")["status"] == D.UNKNOWN


# ---- driver ----
def test_driver_loaded_equals_installed_and_pin():
    out = D.driver_versions(R.PROC_VERSION_PROPRIETARY, R.DPKG_535_261, "535.261.03")
    assert out["status"] == D.OK
    assert D.driver_versions(R.PROC_VERSION_OPEN, R.DPKG_CUDA_REPO_565, "565.57.01")["status"] == D.OK


def test_driver_upgraded_but_not_rebooted_says_reboot_required():
    out = D.driver_versions(R.PROC_VERSION_PROPRIETARY, R.DPKG_535_309, "535.309.01")
    assert out["status"] == D.BROKEN
    assert out["evidence"].startswith("reboot required: loaded module 535.261.03, installed packages 535.309.01")


def test_driver_not_loaded_and_off_pin():
    assert "modprobe" in D.driver_versions("", R.DPKG_535_261)["fix"]
    assert "install" in D.driver_versions("", "")["fix"]
    off_pin = D.driver_versions(R.PROC_VERSION_PROPRIETARY, R.DPKG_535_261, "535.309.01")
    assert off_pin["status"] == D.BROKEN
    assert "upgrade_driver.yml" in off_pin["fix"]


def test_driver_versions_from_rpm_output():
    out = D.driver_versions(R.PROC_VERSION_PROPRIETARY, R.RPM_RHEL9_550, "550.90.07")
    assert out["status"] == D.BROKEN
    assert out["evidence"] == "reboot required: loaded module 535.261.03, installed packages 550.90.07"
    loaded = R.PROC_VERSION_PROPRIETARY.replace("535.261.03", "550.90.07")
    assert D.driver_versions(loaded, R.RPM_RHEL9_550, "550.90.07")["status"] == D.OK


# ---- fabric manager ----
def fabric_state(name):
    text = shared_path("nvidia-smi", "query", name).read_text()
    return re.search(r"Fabric\s*\n\s*State\s*:\s*(.+)", text).group(1).strip()


def test_fabric_manager_real_completed_state_is_ok():
    state = fabric_state("h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt")
    out = D.fabric_manager(True, "active\n", "565.57.01-1", "565.57.01", state)
    assert out["status"] == D.OK, out


def test_fabric_manager_failures():
    assert D.fabric_manager(True, "inactive")["status"] == D.BROKEN
    mismatch = D.fabric_manager(True, "active", "565.57.01-1", "570.86.15", "Completed")
    assert mismatch["status"] == D.BROKEN
    assert "must be equal" in mismatch["evidence"]
    assert D.fabric_manager(True, "active", "", "", "In Progress")["status"] == D.BROKEN
    assert D.fabric_manager(False, "inactive")["status"] == D.OK
    # RHEL: rpm's version with its epoch (0 when the package has none)
    assert D.fabric_manager(True, "active", R.RPM_RHEL9_FM_550, "550.90.07", "Completed")["status"] == D.OK
    assert "does not match" in D.fabric_manager(True, "active", R.RPM_RHEL9_FM_550, "550.54.15")["evidence"]
    # A100 x4 HGX reports N/A: no NVSwitch, so the link is ok whatever the service says.
    assert fabric_state("a100-sxm4-80gb-x4_nvidia-smi-q.txt") == "N/A"


# ---- compose ----
def test_workspace_gpus():
    uuids = ["GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", "GPU-0f709664-740c-52b0-ae79-3e4c9ede6d3b"]
    assert D.workspace_gpus(0, "\n".join(uuids) + "\n", uuids)["status"] == D.OK
    wrong = D.workspace_gpus(0, uuids[0] + "\n", [uuids[1]])
    assert wrong["status"] == D.BROKEN
    assert "gpuops_members" in wrong["fix"]
    assert D.workspace_gpus(9, R.NVIDIA_SMI_NO_DRIVER, uuids)["status"] == D.UNKNOWN
    assert D.workspace_gpus(0, "", uuids)["status"] == D.UNKNOWN
    assert D.workspace_gpus(None, "", uuids)["status"] == D.UNKNOWN
    # Driver 580 wraps some nvidia-smi text in terminal codes even into a pipe (h200-driver580/SOURCES.md); the
    # same answer with codes and CR LF line ends is read as the plain one.
    wrapped = "".join(f"\x1b[4m{uuid}\x1b[0m\r\n" for uuid in uuids)
    assert D.workspace_gpus(0, wrapped, uuids)["status"] == D.OK


def test_docker_runtime():
    assert D.docker_runtime(R.DOCKER_RUNTIMES_NVIDIA)["status"] == D.OK
    out = D.docker_runtime(R.DOCKER_RUNTIMES_PLAIN, R.DAEMON_JSON_PLAIN)
    assert out["status"] == D.BROKEN
    assert "daemon.json runtimes: none" in out["evidence"]
    assert D.docker_runtime("")["status"] == D.UNKNOWN


def test_toolkit_and_cdi():
    assert D.toolkit_cdi(R.CTK_VERSION, R.CDI_LIST_2, 2)["status"] == D.OK
    stale = D.toolkit_cdi(R.CTK_VERSION, R.CDI_LIST_2, 8)
    assert stale["status"] == D.BROKEN
    assert "cdi generate" in stale["fix"]
    assert D.toolkit_cdi("bash: nvidia-ctk: command not found", "", 2)["status"] == D.BROKEN


# ---- the walk ----
def test_walk_stops_at_the_first_broken_link():
    chain = [
        D.pod_phase(pod("Pending")),
        D.scheduling(events(R.SCHED_INSUFFICIENT)),
        D.device_plugin(plugin_pods(), "gpu-01", R.DEVICE_PLUGIN_HEALTHY),
        D.allocatable(node("8"), 8),
        D.containerd_runtime(R.CONTAINERD_V2_NVIDIA),
        D.nvidia_smi(18, R.NVIDIA_SMI_MISMATCH),
        D.driver_versions(R.PROC_VERSION_PROPRIETARY, R.DPKG_535_309),
    ]
    out = D.walk(chain)
    assert out["broken"]["link"] == "nvidia-smi"
    assert [w["link"] for w in out["walked"]][-1] == "nvidia-smi"
    assert len(out["walked"]) == len(chain) - 1, "the driver link after the broken one is not walked"
    # the driver below it is read too, and is broken as well (upgraded, not rebooted): shown, not the first
    assert [(w["link"], w["status"]) for w in out["below"]] == [("driver", D.BROKEN)]
    assert D.walk([D.pod_phase(pod("Running"))])["broken"] is None


def test_compose_chain_from_gathered_outputs_stops_at_docker_runtime():
    outputs = {
        "workspace": {"rc": 1, "out": 'Error response from daemon: container abc is not running'},
        "docker_runtimes": {"rc": 0, "out": R.DOCKER_RUNTIMES_PLAIN},
        "daemon_json": {"rc": 0, "out": R.DAEMON_JSON_PLAIN},
        "nvidia_smi": {"rc": 0, "out": "GPU 0: NVIDIA H100 NVL (UUID: GPU-1)\n"},
        "gpu_facts": {"count": 1, "fabric_manager": {"required": False}},
    }
    out = D.chain(outputs, "compose", ["GPU-1"])
    assert out["broken"]["link"] == "docker runtime"
    assert [w["status"] for w in out["walked"]] == [D.UNKNOWN, D.BROKEN]


def test_kubernetes_chain_reaches_reboot_required():
    plugin = json.loads(plugin_pods())
    outputs = {
        "pod": {"rc": 0, "out": pod("Pending")},
        "events": {"rc": 0, "out": events(R.SCHED_INSUFFICIENT)},
        "plugin_pods": {"rc": 0, "out": json.dumps(plugin)},
        "plugin_logs": {"rc": 0, "out": R.DEVICE_PLUGIN_HEALTHY},
        "node": {"rc": 0, "out": node("8")},
        "containerd": {"rc": 0, "out": R.CONTAINERD_V2_NVIDIA},
        "nvidia_smi": {"rc": 0, "out": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"},
        "proc_version": {"rc": 0, "out": R.PROC_VERSION_PROPRIETARY},
        "packages": {"rc": 0, "out": R.DPKG_535_309},
    }
    out = D.chain(outputs, "kubernetes", 8, "gpu-01")
    assert out["broken"]["link"] == "driver"
    assert out["broken"]["evidence"].startswith("reboot required")
    healthy = dict(outputs, packages={"rc": 0, "out": R.DPKG_535_261},
                   gpu_facts={"fabric_manager": {"required": False}})
    assert D.chain(healthy, "kubernetes", 8, "gpu-01")["broken"] is None
    # An NVSwitch host: Fabric Manager as gpu_facts read it (service state, nv-fabricmanager --version).
    fm = {"required": True, "service_state": "active", "version": "535.261.03", "state": "Completed"}
    assert D.chain(dict(healthy, gpu_facts={"fabric_manager": fm}), "kubernetes", 8, "gpu-01")["broken"] is None
    older = D.chain(dict(healthy, gpu_facts={"fabric_manager": {**fm, "version": "535.247.01"}}), "kubernetes", 8,
                    "gpu-01")["broken"]
    assert (older["link"], older["evidence"]) == (
        "fabric manager", "Fabric Manager 535.247.01 does not match the driver 535.261.03 (they must be equal)")
    stopped = D.chain(dict(healthy, gpu_facts={"fabric_manager": {**fm, "service_state": None}}), "kubernetes", 8,
                      "gpu-01")["broken"]
    assert stopped["evidence"] == "nvidia-fabricmanager is unknown on an NVSwitch host"


# ---- a GPU node where gpu_facts sees no GPU ----
# Registered by diagnose.yml's node commands (/bin/bash, LC_ALL=C) on this project's test machine: Debian 12, no
# GPU, no NVIDIA driver; recorded 2026-12-04. gpu_facts' notes are that machine's too.
NO_GPU_MACHINE = {
    "nvidia_smi": {"rc": 127, "stdout": "", "stderr": "/bin/bash: line 1: nvidia-smi: command not found"},
    "proc_version": {"rc": 1, "stdout": "", "stderr": "cat: /proc/driver/nvidia/version: No such file or directory"},
    "packages": {"rc": 1, "stdout": "libgldispatch0-nvidia ",
                 "stderr": "dpkg-query: no packages found matching cuda-drivers*"},
    "gpu_facts": {"count": 0, "fabric_manager": {"required": False},
                  "notes": ["nvml: nvmlInit failed: NVML Shared Library Not Found",
                            "nvidia-smi: nvidia-smi is not in PATH"]},
}


@pytest.mark.parametrize("platform", ["compose", "kubernetes"])
def test_no_gpu_seen_walks_the_node_links_and_names_nvidia_smi(platform):
    # Outputs of the links above nvidia-smi that would break first if they were walked: they must not be.
    above = {"docker_runtimes": {"rc": 0, "out": R.DOCKER_RUNTIMES_PLAIN}, "node": {"rc": 0, "out": node("0")}}
    outputs = {**NO_GPU_MACHINE, **above}
    out = D.chain(outputs, platform, [] if platform == "compose" else 0, "gpu-01")
    assert [w["link"] for w in out["walked"]] == ["nvidia-smi"]
    assert out["broken"]["evidence"] == "nvidia-smi is not installed"
    assert "nvidia_driver role" in out["broken"]["fix"]


def test_no_gpu_seen_names_the_driver_when_nvidia_smi_answers_without_one():
    # nvidia-smi's fixed message when no kernel module answers (installed libraries, module not loaded).
    smi = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
           "NVIDIA driver is installed and running.\n")
    out = D.chain({**NO_GPU_MACHINE, "nvidia_smi": {"rc": 9, "out": smi}}, "compose", [])
    assert out["broken"]["link"] == "nvidia-smi"
    assert "the nvidia kernel module is not loaded" in out["broken"]["fix"]
    # nvidia-smi and the loaded module are fine (the real H200 capture's -L and /proc version), yet gpu_facts read no
    # GPU: the last link says so, with gpu_facts' notes.
    h200 = shared_path("nvidia-smi", "h200-driver580")
    fine = {**NO_GPU_MACHINE, "nvidia_smi": {"rc": 0, "out": (h200 / "L.txt").read_text()},
            "proc_version": {"rc": 0, "out": (h200 / "proc-version.txt").read_text()}}
    out = D.chain(fine, "kubernetes", 0, "gpu-01")
    walked = [(w["link"], w["status"]) for w in out["walked"]]
    assert walked == [("nvidia-smi", D.OK), ("driver", D.OK), ("GPUs", D.BROKEN)]
    assert "nvidia-smi is not in PATH" in out["broken"]["evidence"]


def test_gpu_facts_without_a_count_is_not_taken_for_no_gpu():
    assert not D.sees_no_gpu({"gpu_facts": {"fabric_manager": {"required": False}}})
    assert not D.sees_no_gpu({})
    assert D.sees_no_gpu(NO_GPU_MACHINE)
