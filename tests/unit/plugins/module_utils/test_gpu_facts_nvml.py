"""gpuops.cluster.gpu_facts_nvml: the NVML backend, through a fake pynvml and the real nvidia-ml-py where installed.

NVML is exercised through tests/unit/fake_pynvml.py, a stand-in at the library boundary whose
names are checked against the real nvidia-ml-py below. Fixtures (``hgx_sysfs``, ``xml_capture``) are in
conftest.py; the stand-in host in tests/unit/gpu_facts_helpers.py.
"""

from __future__ import annotations

import importlib
import json

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ci_skips import skip_by_design
from fake_pynvml import (
    MIRRORED_NAMES,
    FakeGpu,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
    make_fake_pynvml,
)
from gpu_facts_helpers import Commands, gather, hgx_fake_gpus


def test_fake_pynvml_mirrors_real_pynvml():
    """Every name the fake offers exists in the installed nvidia-ml-py, with the same constant values."""
    real = pytest.importorskip("pynvml", reason="nvidia-ml-py not installed: cannot check the fake against it")
    fake = make_fake_pynvml([])
    missing = [name for name in MIRRORED_NAMES if not hasattr(real, name)]
    assert missing == []
    for name in MIRRORED_NAMES:
        if name.startswith("NVML_"):
            assert getattr(fake, name) == getattr(real, name), name
        if name.startswith("NVMLError_"):
            assert getattr(fake, name)().value == getattr(real, name)().value, name
    for struct in ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfoV_t"):
        assert [f[0] for f in getattr(fake, struct)._fields_] == [f[0] for f in getattr(real, struct)._fields_]


def test_nvml_hgx_h100(hgx_sysfs):
    nvml = make_fake_pynvml(hgx_fake_gpus())
    commands = Commands(
        {
            "systemctl is-active nvidia-fabricmanager": (0, "active\n", ""),
            "nv-fabricmanager --version": (0, "Fabric Manager version is : 565.57.01\n", ""),
        }
    )
    facts, warnings = gather(commands, nvml=nvml, sysfs=hgx_sysfs)
    assert warnings == []
    assert (facts["present"], facts["count"], facts["source"]) == (True, 8, "nvml")
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("565.57.01", "12.7")
    assert facts["driver_loaded"] is True
    first, last = facts["gpus"][0], facts["gpus"][7]
    assert first == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
        "pci_bus_id": "00000000:18:00.0",
        "memory_total_mib": 81559,
        "mig_mode": "Disabled",
        "mig_mode_pending": "Disabled",
        "persistence_mode": True,
        "numa_node": 0,
        "cpu_affinity": "0-51,104-155",
        "nvlink": 18,
        "fabric": {
            "state": "Completed",
            "status": "Success",
            "clique_id": 7,
            "cluster_uuid": "00010203-0405-0607-0809-0a0b0c0d0e0f",
        },
    }
    assert (last["pci_bus_id"], last["numa_node"]) == ("00000000:DB:00.0", 1)
    assert facts["fabric_manager"] == {
        "required": True,
        "nvswitch_count": 4,
        "state": "Completed",
        "service_state": "active",
        "version": "565.57.01",
    }
    assert "nvidia-smi -q -x" not in commands.ran  # NVML answered: no nvidia-smi on the hot path
    assert nvml.calls.count("nvmlInit") == 1
    assert nvml.calls.count("nvmlShutdown") == 1
    assert nvml.initialised == 0
    json.dumps(facts)  # facts must serialise as they are


def test_nvml_old_pynvml_bytes_and_missing_newer_calls():
    """nvidia-ml-py before 11.515 returned bytes; old releases lack the _v2 CUDA call and fabric info."""
    nvml = make_fake_pynvml(
        [FakeGpu(uuid="GPU-1", bus_id="00000000:3B:00.0")],
        driver_version="470.82.01",
        cuda_version=11040,
        bytes_strings=True,
        without=(
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlDeviceGetGpuFabricInfo",
            "nvmlDeviceGetGpuFabricInfoV",
            "c_nvmlGpuFabricInfoV_t",
        ),
    )
    facts, warnings = gather(nvml=nvml)
    assert warnings == []
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("470.82.01", "11.4")
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["uuid"], gpu["pci_bus_id"]) == ("NVIDIA H100 80GB HBM3", "GPU-1", "00000000:3B:00.0")
    assert gpu["fabric"] == {"state": None, "status": None, "clique_id": None, "cluster_uuid": None}
    assert facts["fabric_manager"]["required"] is False


def test_nvml_cuda_v2_function_not_found_falls_back_to_v1():
    nvml = make_fake_pynvml(
        [], cuda_version=12040, system_errors={"nvmlSystemGetCudaDriverVersion_v2": NVMLError_FunctionNotFound}
    )
    facts, warnings = gather(nvml=nvml)
    assert facts["cuda_driver_version"] == "12.4"
    assert warnings == []
    assert (facts["present"], facts["count"], facts["source"]) == (False, 0, "nvml")


def test_nvml_fabric_v_function_not_found_uses_legacy_call():
    gpu = FakeGpu(fabric=(2, 0, 0, bytes(16)), errors={"nvmlDeviceGetGpuFabricInfoV": NVMLError_FunctionNotFound})
    nvml = make_fake_pynvml([gpu])
    facts, _warnings = gather(nvml=nvml)
    assert facts["gpus"][0]["fabric"]["state"] == "In Progress"
    assert "nvmlDeviceGetGpuFabricInfo" in nvml.calls
    # a GPU in a fabric means Fabric Manager is needed, even with no NVSwitch visible on PCI
    assert facts["fabric_manager"]["required"] is True
    assert facts["fabric_manager"]["state"] == "In Progress"


def test_nvml_not_supported_degrades_each_field_to_null():
    """A consumer/PCIe GPU: NotSupported per call is null for that field (MIG: N/A), not a failure."""
    gpu = FakeGpu(
        name="NVIDIA GeForce RTX 3090",
        uuid="GPU-3090",
        bus_id="00000000:01:00.0",
        fabric=None,
        errors={
            "nvmlDeviceGetMigMode": NVMLError_NotSupported,
            "nvmlDeviceGetPersistenceMode": NVMLError_NotSupported,
            "nvmlDeviceGetMemoryInfo": NVMLError_NotSupported,
        },
    )
    facts, warnings = gather(nvml=make_fake_pynvml([gpu]))
    assert warnings == []
    record = facts["gpus"][0]
    assert (record["name"], record["uuid"]) == ("NVIDIA GeForce RTX 3090", "GPU-3090")
    assert (record["mig_mode"], record["mig_mode_pending"]) == ("N/A", "N/A")
    assert record["persistence_mode"] is None
    assert record["memory_total_mib"] is None
    assert record["nvlink"] is None  # every link said NotSupported: nothing answered
    assert record["fabric"]["state"] == "Not Supported"
    assert facts["fabric_manager"]["required"] is False


def test_nvml_real_error_on_one_field_is_a_warning_and_null():
    gpus = [FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b", errors={"nvmlDeviceGetUUID": NVMLError_GpuIsLost})]
    facts, warnings = gather(nvml=make_fake_pynvml(gpus))
    assert [gpu["uuid"] for gpu in facts["gpus"]] == ["GPU-a", None]
    assert warnings == ["NVML nvmlDeviceGetUUID for GPU 1 failed: GPU is lost; the field is reported as null"]


def test_nvml_mig_enabled_and_pending():
    gpu = FakeGpu(mig=(1, 0), nvlink_states=[1, 0, 1])
    facts, _warnings = gather(nvml=make_fake_pynvml([gpu]))
    record = facts["gpus"][0]
    assert (record["mig_mode"], record["mig_mode_pending"], record["nvlink"]) == ("Enabled", "Disabled", 2)


def test_nvml_mig_mode_from_a_driver_without_it_is_na_and_a_real_error_is_null_with_a_warning():
    errors = (NVMLError_FunctionNotFound, NVMLError_GpuIsLost)
    gpus = [FakeGpu(errors={"nvmlDeviceGetMigMode": error}) for error in errors]
    facts, warnings = gather(nvml=make_fake_pynvml(gpus))
    assert [(gpu["mig_mode"], gpu["mig_mode_pending"]) for gpu in facts["gpus"]] == [("N/A", "N/A"), (None, None)]
    assert warnings == ["NVML nvmlDeviceGetMigMode for GPU 1 failed: GPU is lost; the field is reported as null"]


def test_nvml_shutdown_runs_when_a_call_raises_something_unexpected():
    class Boom(RuntimeError):
        pass

    nvml = make_fake_pynvml([FakeGpu(errors={"nvmlDeviceGetName": Boom})])
    with pytest.raises(Boom):
        gather(nvml=nvml)
    assert nvml.calls.count("nvmlShutdown") == 1
    assert nvml.initialised == 0


def test_nvml_api_mismatch_warns_and_falls_back(xml_capture):
    """A pynvml whose API differs (a TypeError from a changed signature) does not fail the host."""
    mismatch = TypeError("nvmlDeviceGetPciInfo() missing 1 required positional argument: 'c_info'")
    nvml = make_fake_pynvml([FakeGpu(errors={"nvmlDeviceGetPciInfo": mismatch})])
    commands = Commands({"nvidia-smi -q -x": (0, xml_capture, ""), "nvidia-smi nvlink -s": (0, "", "")})
    facts, warnings = gather(commands, nvml=nvml)
    assert facts["source"] == "nvidia-smi"
    assert warnings == [f"the NVML backend raised TypeError: {mismatch}; falling back to nvidia-smi"]
    assert nvml.initialised == 0


def test_real_pynvml_without_libnvidia_ml_falls_back(tmp_path):
    """The real nvidia-ml-py on a host without libnvidia-ml.so.1 raises what the backend expects."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        skip_by_design("libnvidia-ml is loadable here: tests/gpu covers the real library")
    facts, warnings = gf.gather_gpu_facts(
        run=None,
        nvml_loader=lambda: importlib.import_module("pynvml"),
        which=lambda name: None,
        sysfs_root=str(tmp_path),
        proc_root=str(tmp_path),
    )
    assert (facts["source"], facts["present"], warnings) == ("none", False, [])
    assert facts["notes"][0] == "nvml: nvmlInit failed: NVML Shared Library Not Found"
