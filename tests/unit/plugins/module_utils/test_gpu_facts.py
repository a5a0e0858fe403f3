"""gpuops.cluster.gpu_facts: parsers on every real capture, the three backends, and their order.

Capture cases are named after their file in ../shared/data/nvidia-smi/{query,mig}; the expected
values were read off each file by hand (see ../shared/data/nvidia-smi/*/SOURCES.md).
NVML is exercised through tests/unit/fake_pynvml.py, a stand-in at the library boundary whose
names are checked against the real nvidia-ml-py below.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_common as common
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_smi as smi
from fake_pynvml import (
    MIRRORED_NAMES,
    FakeGpu,
    NVMLError_DriverNotLoaded,
    NVMLError_FunctionNotFound,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_LibRmVersionMismatch,
    NVMLError_NotSupported,
    make_fake_pynvml,
)

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
NO_FABRIC = {"state": "Not Supported", "status": None, "clique_id": None, "cluster_uuid": None}
HGX_FABRIC = {"state": "Completed", "status": "Success", "clique_id": 0, "cluster_uuid": ZERO_UUID}

# --------------------------------------------------------------------------- nvidia-smi -q / -q -x captures

QUERY_CASES = {
    "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt": {
        "driver_version": "565.57.01",
        "cuda_driver_version": "12.7",
        "attached_gpus": 8,
        "name": "NVIDIA H100 80GB HBM3",
        "bus_ids": [
            "00000000:18:00.0",
            "00000000:2A:00.0",
            "00000000:3A:00.0",
            "00000000:5D:00.0",
            "00000000:9A:00.0",
            "00000000:AB:00.0",
            "00000000:BA:00.0",
            "00000000:DB:00.0",
        ],
        "uuids": [
            "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
            "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd",
            "GPU-2d50cdf6-dd67-9f2e-855e-0d4d6d395a2f",
            "GPU-d1838e76-90e6-4408-711d-aeeaa2e1fd14",
            "GPU-72be6e5d-3c1b-0d37-98ac-d3ef159f2589",
            "GPU-52378fbc-3124-3895-13b6-1dd179563e0f",
            "GPU-83a5aebb-b71c-c570-aa83-185e1233fe97",
            "GPU-33135771-a848-ece1-b61e-489e221d663c",
        ],
        "memory_total_mib": 81559,
        "mig_mode": "Disabled",
        "persistence_mode": True,
        "fabric": HGX_FABRIC,
    },
    "a100-sxm4-80gb-x4_nvidia-smi-q.txt": {
        "driver_version": "555.42.02",
        "cuda_driver_version": "12.5",
        "attached_gpus": 4,
        "name": "NVIDIA A100-SXM4-80GB",
        "bus_ids": ["00000000:68:00.0", "00000000:9E:00.0", "00000000:C2:00.0", "00000000:D4:00.0"],
        "uuids": [
            "GPU-31515c3d-1414-7c2c-004a-f86a898946ac",
            "GPU-72d87681-01db-370e-567d-41afcf20fad0",
            "GPU-62989189-9e1e-ac75-4676-114f14998542",
            "GPU-011b2cfe-2b8e-1cb0-19e1-1b764e854dfc",
        ],
        "memory_total_mib": 81920,
        "mig_mode": "Disabled",
        "persistence_mode": True,
        "fabric": NO_FABRIC,
    },
    "h100-nvl-x2_nvidia-smi-q.txt": {
        "driver_version": "550.54.14",
        "cuda_driver_version": "12.4",
        "attached_gpus": 2,
        "name": "NVIDIA H100 NVL",
        "bus_ids": ["00000000:AD:00.0", "00000000:AE:00.0"],
        "uuids": ["GPU-806f8ea2-6428-1096-a076-bb687fb45fb0", "GPU-db6d02a2-1413-eccf-8a17-d99eac29d365"],
        "memory_total_mib": 95830,
        "mig_mode": "Disabled",
        "persistence_mode": True,
        "fabric": NO_FABRIC,
    },
    # `nvidia-smi -q -i 0`: one GPU listed out of 8 attached; R525 has no CliqueId/ClusterUUID lines
    "h800-sxm_x8_nvidia-smi-q-i0_fabric-completed.txt": {
        "driver_version": "525.105.17",
        "cuda_driver_version": "12.0",
        "attached_gpus": 8,
        "name": "NVIDIA H800",
        "bus_ids": ["00000000:18:00.0"],
        "uuids": ["GPU-34bf77d1-c686-6821-79a8-32d326c5039c"],
        "memory_total_mib": 81559,
        "mig_mode": "Disabled",
        "persistence_mode": True,
        "fabric": {"state": "Completed", "status": "Success", "clique_id": None, "cluster_uuid": None},
    },
    # `-q -x`, trimmed upstream to 1 of 4 GPUs; MIG on, persistence off
    "a100-sxm4-80gb_mig-enabled_1of4gpus.xml": {
        "driver_version": "535.54.03",
        "cuda_driver_version": "12.2",
        "attached_gpus": 4,
        "name": "NVIDIA A100-SXM4-80GB",
        "bus_ids": ["00000000:01:00.0"],
        "uuids": ["GPU-513536b6-7d19-9063-b049-1e69664bb298"],
        "memory_total_mib": 81920,
        "mig_mode": "Enabled",
        "persistence_mode": False,
        "fabric": NO_FABRIC,
    },
}

MIG_CASES = {
    "h100-80gb_mig-all-1g.10gb_nvidia-smi-L.txt": [
        ("1g.10gb", "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902"),
        ("1g.10gb", "MIG-35f93699-4b53-5a19-8289-80b8418eec60"),
        ("1g.10gb", "MIG-9d14fb21-4ae1-546f-a636-011582899c39"),
        ("1g.10gb", "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b"),
        ("1g.10gb", "MIG-5d23f73a-d378-50ac-a6f5-3bf5184773bb"),
        ("1g.10gb", "MIG-6cea15c7-8a56-578c-b965-0e73cb6dfc10"),
        ("1g.10gb", "MIG-981c86e9-3607-57d7-9426-295347e4b925"),
    ],
    "h100-80gb_mig-all-balanced_nvidia-smi-L.txt": [
        ("3g.40gb", "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde"),
        ("2g.20gb", "MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0"),
        ("1g.10gb", "MIG-9d14fb21-4ae1-546f-a636-011582899c39"),
        ("1g.10gb", "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b"),
    ],
}


@pytest.fixture
def capture(shared_data):
    """``capture(folder, name)``: a file of ../shared/data/nvidia-smi, the test skipped when it is absent."""

    def find(folder: str, name: str) -> Path:
        path = shared_data / "nvidia-smi" / folder / name
        if not path.exists():
            pytest.skip(f"real third-party data not present: {path} (see ../shared/data/README.md)")
        return path

    return find


def _parse_capture(path: Path) -> dict:
    text = path.read_text()
    return gf.parse_nvidia_smi_xml(text) if path.suffix == ".xml" else gf.parse_nvidia_smi_q(text)


@pytest.mark.parametrize(("folder", "cases"), [("query", QUERY_CASES), ("mig", MIG_CASES)])
def test_every_capture_has_a_case(folder, cases, shared_data):
    directory = shared_data / "nvidia-smi" / folder
    on_disk = sorted(path.name for path in directory.iterdir() if path.name != "SOURCES.md")
    assert on_disk == sorted(cases), "a capture without a hand-written case, or a case without its capture"


@pytest.mark.parametrize("name", sorted(QUERY_CASES), ids=lambda name: name.rsplit(".", 1)[0])
def test_query_capture(name, capture):
    want = QUERY_CASES[name]
    parsed = _parse_capture(capture("query", name))
    assert parsed["driver_version"] == want["driver_version"]
    assert parsed["cuda_driver_version"] == want["cuda_driver_version"]
    assert parsed["attached_gpus"] == want["attached_gpus"]
    gpus = parsed["gpus"]
    assert [gpu["index"] for gpu in gpus] == list(range(len(want["bus_ids"])))
    assert [gpu["pci_bus_id"] for gpu in gpus] == want["bus_ids"]
    assert [gpu["uuid"] for gpu in gpus] == want["uuids"]
    for gpu in gpus:
        assert gpu["name"] == want["name"]
        assert gpu["memory_total_mib"] == want["memory_total_mib"]
        assert gpu["mig_mode"] == want["mig_mode"]
        assert gpu["mig_mode_pending"] == want["mig_mode"]
        assert gpu["persistence_mode"] is want["persistence_mode"]
        assert gpu["fabric"] == want["fabric"]
        assert gpu["numa_node"] is None  # neither form carries it: sysfs answers
        assert gpu["nvlink"] is None


def test_a100_sxm4_80gb_mig_enabled_1of4gpus_mig_devices(capture):
    parsed = _parse_capture(capture("query", "a100-sxm4-80gb_mig-enabled_1of4gpus.xml"))
    devices = parsed["gpus"][0]["mig_devices"]
    assert [(d["index"], d["gpu_instance_id"], d["compute_instance_id"]) for d in devices] == [
        (0, 3, 0),
        (1, 4, 0),
        (2, 5, 0),
        (3, 6, 0),
    ]
    assert {d["memory_total_mib"] for d in devices} == {19968}
    assert {d["multiprocessor_count"] for d in devices} == {14}


@pytest.mark.parametrize("name", sorted(MIG_CASES), ids=lambda name: name.rsplit(".", 1)[0])
def test_mig_list_capture(name, capture):
    gpus = gf.parse_nvidia_smi_list(capture("mig", name).read_text())
    assert len(gpus) == 1
    gpu = gpus[0]
    assert (gpu["index"], gpu["name"], gpu["uuid"]) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
    )
    assert [(d["profile"], d["uuid"]) for d in gpu["mig_devices"]] == MIG_CASES[name]
    assert [d["index"] for d in gpu["mig_devices"]] == list(range(len(MIG_CASES[name])))


def test_h100_sxm_80gb_x8_hgx_text_and_xml_forms_agree_on_shape(capture):
    """The text parser returns the same keys as the XML parser, so callers can use either."""
    text = _parse_capture(capture("query", "h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt"))
    xml = _parse_capture(capture("query", "a100-sxm4-80gb_mig-enabled_1of4gpus.xml"))
    assert set(text) == set(xml)
    assert set(text["gpus"][0]) == set(xml["gpus"][0])


# --------------------------------------------------------------------------- parser edge cases (synthetic)


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("<nvidia_smi_log><gpu>", "not well-formed XML"),
        ("<other/>", "not <nvidia_smi_log>"),
    ],
)
def test_xml_parse_error_carries_raw_output(raw, detail):
    with pytest.raises(gf.GpuFactsParseError) as err:
        gf.parse_nvidia_smi_xml(raw)
    assert detail in str(err.value)
    assert raw in str(err.value)


def test_text_parse_error_on_unrelated_output():
    with pytest.raises(gf.GpuFactsParseError, match="Raw output:\nbash: nvidia-smi: command not found"):
        gf.parse_nvidia_smi_q("bash: nvidia-smi: command not found\n")


def test_list_parse_error_names_the_line():
    with pytest.raises(gf.GpuFactsParseError, match="unrecognised line 'Failed to initialize NVML"):
        gf.parse_nvidia_smi_list("Failed to initialize NVML: Driver/library version mismatch\n")


def test_list_no_devices_is_empty():
    assert gf.parse_nvidia_smi_list("No devices found.\n") == []


# format of `nvidia-smi nvlink -s` as shown in public tools' fixtures: no capture in ../shared/data yet
NVLINK_STATUS = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)
\t Link 0: <inactive>
GPU 2: Quadro RTX 5000 (UUID: GPU-cccc) NVML: Unable to retrieve Nvlink information as all links are inActive
GPU 3: NVIDIA L4 (UUID: GPU-dddd)
"""


def test_nvlink_status_counts_links_with_bandwidth():
    assert smi.parse_nvidia_smi_nvlink_status(NVLINK_STATUS) == [
        {"index": 0, "uuid": "GPU-aaaa", "active_links": 2},
        {"index": 1, "uuid": "GPU-bbbb", "active_links": 0},
        {"index": 2, "uuid": "GPU-cccc", "active_links": 0},
        {"index": 3, "uuid": "GPU-dddd", "active_links": None},
    ]


@pytest.mark.parametrize(
    ("value", "want"),
    [(12040, "12.4"), (12070, "12.7"), (11080, "11.8"), (13000, "13.0"), (12020, "12.2"), (0, None), (None, None)],
)
def test_cuda_version_from_int(value, want):
    assert common.cuda_version_from_int(value) == want


@pytest.mark.parametrize(
    ("value", "canonical", "sysfs"),
    [
        ("00000000:18:00.0", "00000000:18:00.0", "0000:18:00.0"),
        ("0000:ab:00.0", "00000000:AB:00.0", "0000:ab:00.0"),
        ("00000001:c1:00.1", "00000001:C1:00.1", "0001:c1:00.1"),
        ("not-a-bus-id", None, None),
    ],
)
def test_bus_id_forms(value, canonical, sysfs):
    assert common.canonical_bus_id(value) == canonical
    assert common.sysfs_bus_id(value) == sysfs


@pytest.mark.parametrize(
    ("states", "want"),
    [
        (["Completed", "Completed"], "Completed"),
        (["Completed", "In Progress", "Completed"], "In Progress"),
        (["In Progress", "Not Started"], "Not Started"),
        (["Not Supported", "Not Supported"], "Not Supported"),
        (["Completed", "Degraded"], "Degraded"),  # an unknown string is shown, not hidden
        ([None, None], None),
        ([], None),
    ],
)
def test_aggregate_fabric_state(states, want):
    assert common.aggregate_fabric_state(states) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n", "535.129.03"),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  555.42.06  Release Build  (abuild@host)\n",
            "555.42.06",
        ),
        ("garbage", None),
    ],
)
def test_parse_proc_driver_version(text, want):
    assert gf.parse_proc_driver_version(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [("Fabric Manager version is : 450.102.04\n", "450.102.04"), ("", None)],
)
def test_parse_fabricmanager_version(text, want):
    assert gf.parse_fabricmanager_version(text) == want


# --------------------------------------------------------------------------- fixture trees


def make_pci(sysfs: Path, bdf: str, vendor: str, cls: str, device: str = "0x2330", numa: str = "0") -> None:
    path = sysfs / "bus" / "pci" / "devices" / bdf
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(cls + "\n")
    (path / "device").write_text(device + "\n")
    (path / "numa_node").write_text(numa + "\n")


HGX_BDFS = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]


@pytest.fixture
def hgx_sysfs(tmp_path) -> Path:
    """8 H100 SXM (3D controllers) on two sockets, 4 NVSwitches, plus devices that must be ignored."""
    sysfs = tmp_path / "sys"
    for number, bdf in enumerate(HGX_BDFS):
        make_pci(sysfs, bdf, "0x10de", "0x030200", numa=str(number // 4))
    for bdf in ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"):
        make_pci(sysfs, bdf, "0x10de", "0x068000", device="0x22a3")
    make_pci(sysfs, "0000:18:00.1", "0x10de", "0x040300", device="0x22ba")  # HD audio function
    make_pci(sysfs, "0000:00:00.0", "0x8086", "0x060000", device="0x09a2")  # host bridge
    make_pci(sysfs, "0000:31:00.0", "0x15b3", "0x020700", device="0x1021")  # ConnectX-7
    return sysfs


class Commands:
    """Injected ``run``/``which``: canned outputs per command, and a log of what was run."""

    def __init__(self, outputs=None, binaries=("nvidia-smi", "systemctl", "nv-fabricmanager")):
        self.outputs = outputs or {}
        self.binaries = set(binaries)
        self.ran = []

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.binaries else None

    def run(self, argv):
        key = " ".join([Path(argv[0]).name, *argv[1:]])
        self.ran.append(key)
        return self.outputs.get(key, (127, "", f"{key}: not expected by this test"))


def _no_pynvml():
    raise ImportError("No module named 'pynvml'")


def gather(commands=None, nvml=None, sysfs="/nonexistent/sys", proc="/nonexistent/proc", backend="auto"):
    commands = commands or Commands(binaries=())
    loader = (lambda: nvml) if nvml is not None else _no_pynvml
    return gf.gather_gpu_facts(
        backend=backend,
        nvml_loader=loader,
        run=commands.run,
        which=commands.which,
        sysfs_root=str(sysfs),
        proc_root=str(proc),
    )


# --------------------------------------------------------------------------- NVML backend (fake pynvml)


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


def hgx_fake_gpus() -> list:
    return [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
            bus_id="0000" + bdf.upper(),
            nvlink_states=[1] * 18,
            fabric=(3, 0, 7, bytes(range(16))),
        )
        for index, bdf in enumerate(HGX_BDFS)
    ]


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


# --------------------------------------------------------------------------- nvidia-smi backend


@pytest.fixture
def xml_capture(capture) -> str:
    return capture("query", "a100-sxm4-80gb_mig-enabled_1of4gpus.xml").read_text()


def test_nvidia_smi_backend_on_a100_sxm4_80gb_mig_enabled_1of4gpus(tmp_path, xml_capture):
    sysfs = tmp_path / "sys"
    make_pci(sysfs, "0000:01:00.0", "0x10de", "0x030200", device="0x20b2", numa="1")
    nvlink = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)\n\t Link 0: <inactive>\n"
    commands = Commands({"nvidia-smi -q -x": (0, xml_capture, ""), "nvidia-smi nvlink -s": (0, nvlink, "")})
    facts, warnings = gather(commands, sysfs=sysfs)
    assert warnings == []
    assert (facts["source"], facts["count"], facts["driver_version"], facts["cuda_driver_version"]) == (
        "nvidia-smi",
        1,
        "535.54.03",
        "12.2",
    )
    gpu = facts["gpus"][0]
    assert gpu == {
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
        "pci_bus_id": "00000000:01:00.0",
        "memory_total_mib": 81920,
        "mig_mode": "Enabled",
        "mig_mode_pending": "Enabled",
        "persistence_mode": False,
        "numa_node": 1,
        "nvlink": 0,
        "fabric": NO_FABRIC,
    }
    assert commands.ran == ["nvidia-smi -q -x", "nvidia-smi nvlink -s"]  # once for all GPUs, never per GPU
    assert facts["notes"][0].startswith("nvml: pynvml is not importable")
    assert "nvidia-smi reports 4 attached GPUs but lists 1" in facts["notes"]
    assert facts["fabric_manager"] == {
        "required": False,
        "nvswitch_count": 0,
        "state": "Not Supported",
        "service_state": None,
        "version": None,
    }


def test_nvidia_smi_garbage_fails_with_raw_output():
    commands = Commands({"nvidia-smi -q -x": (0, "Segmentation fault\n", "")})
    with pytest.raises(gf.GpuFactsParseError, match="Raw output:\nSegmentation fault"):
        gather(commands)


# --------------------------------------------------------------------------- PCI backend and "no GPU"


def test_pci_backend_hgx_without_driver(hgx_sysfs):
    facts, warnings = gather(sysfs=hgx_sysfs)
    assert warnings == []
    assert (facts["present"], facts["count"], facts["source"]) == (True, 8, "pci")
    assert (facts["driver_version"], facts["cuda_driver_version"], facts["driver_loaded"]) == (None, None, False)
    assert [gpu["pci_bus_id"] for gpu in facts["gpus"]] == [
        "00000000:18:00.0",
        "00000000:2A:00.0",
        "00000000:3A:00.0",
        "00000000:5D:00.0",
        "00000000:9A:00.0",
        "00000000:AB:00.0",
        "00000000:BA:00.0",
        "00000000:DB:00.0",
    ]
    assert [gpu["numa_node"] for gpu in facts["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {gpu["name"] for gpu in facts["gpus"]} == {None}
    assert facts["fabric_manager"]["required"] is True  # NVSwitch on the bus, even without a driver
    assert (facts["fabric_manager"]["nvswitch_count"], facts["fabric_manager"]["state"]) == (4, None)


def test_pci_backend_names_from_proc_when_module_loaded(tmp_path):
    """Driver module loaded but NVML and nvidia-smi absent (e.g. a minimal image): /proc fills in."""
    sysfs, proc = tmp_path / "sys", tmp_path / "proc"
    make_pci(sysfs, "0000:01:00.0", "0x10de", "0x030000", device="0x2204", numa="-1")  # VGA, no NUMA
    info = proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0"
    info.mkdir(parents=True)
    (info / "information").write_text(
        "Model: \t\t NVIDIA GeForce RTX 3090\nIRQ:   \t\t 150\nGPU UUID: \t GPU-12345678-abcd-ef01-2345-6789abcdef01\n"
        "Bus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n"
    )
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 2025\nGCC version:  gcc 12.2.0\n"
    )
    facts, _warnings = gather(sysfs=sysfs, proc=proc)
    assert (facts["source"], facts["driver_version"], facts["driver_loaded"]) == ("pci", "535.261.03", True)
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["uuid"], gpu["numa_node"]) == (
        "NVIDIA GeForce RTX 3090",
        "GPU-12345678-abcd-ef01-2345-6789abcdef01",
        None,
    )


def test_no_nvidia_gpu_is_a_normal_answer(tmp_path):
    sysfs = tmp_path / "sys"
    make_pci(sysfs, "0000:00:02.0", "0x8086", "0x030000", device="0x46a6")  # Intel iGPU: not ours
    facts, warnings = gather(sysfs=sysfs)
    assert warnings == []
    assert (facts["present"], facts["count"], facts["source"], facts["gpus"]) == (False, 0, "none", [])
    assert facts["fabric_manager"] == {
        "required": False,
        "nvswitch_count": 0,
        "state": None,
        "service_state": None,
        "version": None,
    }


# --------------------------------------------------------------------------- backend order


def test_order_nvml_missing_uses_nvidia_smi(xml_capture):
    commands = Commands({"nvidia-smi -q -x": (0, xml_capture, ""), "nvidia-smi nvlink -s": (1, "", "")})
    facts, _warnings = gather(commands)  # the loader raises ImportError
    assert facts["source"] == "nvidia-smi"
    assert facts["gpus"][0]["nvlink"] is None
    assert "'nvidia-smi nvlink -s' exited 1; nvlink is null" in facts["notes"]


@pytest.mark.parametrize("init_error", [NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded])
def test_order_no_driver_and_no_nvidia_smi_uses_pci(hgx_sysfs, init_error):
    nvml = make_fake_pynvml([], init_error=init_error)
    facts, warnings = gather(Commands(binaries=()), nvml=nvml, sysfs=hgx_sysfs)
    assert facts["source"] == "pci"
    assert warnings == []  # no driver is an expected state, not a warning
    assert facts["notes"] == [f"nvml: nvmlInit failed: {init_error()}", "nvidia-smi: nvidia-smi is not in PATH"]
    assert "nvmlShutdown" not in nvml.calls  # never initialised, so nothing to shut down


def test_order_nvidia_smi_without_driver_uses_pci(hgx_sysfs):
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    nvml = make_fake_pynvml([], init_error=NVMLError_DriverNotLoaded)
    facts, _warnings = gather(Commands({"nvidia-smi -q -x": (9, failed, "")}), nvml=nvml, sysfs=hgx_sysfs)
    assert facts["source"] == "pci"
    assert facts["notes"][1].startswith("nvidia-smi: 'nvidia-smi -q -x' exited 9: NVIDIA-SMI has failed")


def test_order_driver_library_mismatch_warns_then_falls_back(hgx_sysfs):
    nvml = make_fake_pynvml([], init_error=NVMLError_LibRmVersionMismatch)
    facts, warnings = gather(nvml=nvml, sysfs=hgx_sysfs)
    assert facts["source"] == "pci"
    assert len(warnings) == 1
    assert "NVML/RM version mismatch" in warnings[0]


def test_named_backend_does_not_fall_back():
    with pytest.raises(gf.GpuFactsError, match="backend nvidia-smi cannot answer on this host: nvidia-smi is not"):
        gather(backend="nvidia-smi")


def test_nvml_fewer_gpus_than_pci_is_noted(hgx_sysfs):
    facts, _warnings = gather(nvml=make_fake_pynvml(hgx_fake_gpus()[:7]), sysfs=hgx_sysfs)
    assert len(facts["gpus"]) == len(hgx_fake_gpus()) - 1
    assert "nvml lists 7 GPUs but the PCI bus shows 8 NVIDIA display/3D controllers" in facts["notes"][-1]


def test_real_pynvml_without_libnvidia_ml_falls_back(tmp_path):
    """The real nvidia-ml-py on a host without libnvidia-ml.so.1 raises what the backend expects."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("libnvidia-ml is loadable here: tests/gpu covers the real library")
    facts, warnings = gf.gather_gpu_facts(
        nvml_loader=lambda: importlib.import_module("pynvml"),
        which=lambda name: None,
        sysfs_root=str(tmp_path),
        proc_root=str(tmp_path),
    )
    assert (facts["source"], facts["present"], warnings) == ("none", False, [])
    assert facts["notes"][0] == "nvml: nvmlInit failed: NVML Shared Library Not Found"


# --------------------------------------------------------------------------- topology=true (nvidia-smi topo -m)

TOPO = "nvidia-smi topo -m"
FM_OK = {
    "systemctl is-active nvidia-fabricmanager": (0, "active\n", ""),
    "nv-fabricmanager --version": (0, "Fabric Manager version is : 565.57.01\n", ""),
}


def test_topology_h100x8_sxm_2numa_noNIC(hgx_sysfs, capture):
    """NVML answers the GPUs, one `nvidia-smi topo -m` (the real capture) answers the topology."""
    matrix = capture("topo", "h100x8_sxm_2numa_noNIC.txt").read_text()
    commands = Commands({TOPO: (0, matrix, ""), **FM_OK})
    nvml = make_fake_pynvml(hgx_fake_gpus())
    facts, warnings = gf.gather_gpu_facts(
        nvml_loader=lambda: nvml,
        run=commands.run,
        which=commands.which,
        sysfs_root=str(hgx_sysfs),
        proc_root="/nonexistent/proc",
        topology=True,
        gpus_per_job=4,
    )
    assert warnings == []
    assert commands.ran.count(TOPO) == 1  # once for the host, never per GPU
    assert "nvidia-smi -q -x" not in commands.ran
    topo = facts["topology"]
    assert topo["nvlink_all_to_all"] is True
    assert topo["nvlink_domains"] == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert topo["numa_groups"] == [{"numa_node": 0, "gpus": [0, 1, 2, 3]}, {"numa_node": 1, "gpus": [4, 5, 6, 7]}]
    assert topo["placements"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (topo["nics"], topo["warnings"]) == ([], [])
    assert [gpu["index"] for gpu in topo["gpus"]] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert topo["gpus"][0] == {
        "index": 0,
        "cpu_affinity": "0-51,104-155",
        "numa_node": 0,
        "numa_affinity": "0",
        "gpu_numa_id": None,
        "nvlink_peers": {"1": 18, "2": 18, "3": 18, "4": 18, "5": 18, "6": 18, "7": 18},
        "nearest_nics": [],
        "nearest_nic_link": None,
    }
    assert (topo["gpus"][7]["cpu_affinity"], topo["gpus"][7]["numa_node"]) == ("52-103,156-207", 1)
    # the topology's NUMA nodes agree with sysfs' (hgx_sysfs puts GPUs 0-3 on node 0, 4-7 on node 1)
    assert [gpu["numa_node"] for gpu in topo["gpus"]] == [gpu["numa_node"] for gpu in facts["gpus"]]
    assert not [note for note in facts["notes"] if note.startswith("topology:")]
    json.dumps(facts)


def test_topology_azure_nc48v4_a100_80gb_x2_nv12_cpuaff_0_1_VM_QUIRK(capture):
    """A VM whose NUMA Affinity names two nodes: numa_node null, and the parser's warning is surfaced."""
    matrix = capture("topo", "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK.txt").read_text()
    gpus = [FakeGpu(uuid=f"GPU-{n}", bus_id=f"00000001:0{n}:00.0") for n in (1, 2)]
    commands = Commands({TOPO: (0, matrix, "")})
    nvml = make_fake_pynvml(gpus)
    facts, warnings = gf.gather_gpu_facts(
        nvml_loader=lambda: nvml, run=commands.run, which=commands.which, topology=True, gpus_per_job=2
    )
    topo = facts["topology"]
    assert [(g["index"], g["cpu_affinity"], g["numa_affinity"], g["numa_node"]) for g in topo["gpus"]] == [
        (0, "0-1", "0-1", None),
        (1, "0-1", "0-1", None),
    ]
    assert topo["gpus"][0]["nvlink_peers"] == {"1": 12}
    assert (topo["nvlink_domains"], topo["numa_groups"], topo["placements"]) == ([[0, 1]], [], [[0, 1]])
    assert len(topo["warnings"]) == 1
    assert topo["warnings"][0].startswith("NUMA Affinity '0-1' of GPU0, GPU1 spans several NUMA nodes")
    assert warnings == [f"topology: {topo['warnings'][0]}"]


def test_topology_not_asked_for_runs_nothing(hgx_sysfs):
    commands = Commands(FM_OK)
    facts, warnings = gather(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert (facts["count"], facts["topology"], warnings) == (8, None, [])
    assert TOPO not in commands.ran
    assert not [note for note in facts["notes"] if note.startswith("topology:")]


def _gather_topology(commands, nvml=None, sysfs="/nonexistent/sys"):
    return gf.gather_gpu_facts(
        nvml_loader=(lambda: nvml) if nvml is not None else _no_pynvml,
        run=commands.run,
        which=commands.which,
        sysfs_root=str(sysfs),
        proc_root="/nonexistent/proc",
        topology=True,
    )


def test_topology_not_read_without_a_driver(hgx_sysfs):
    commands = Commands(binaries=())
    facts, warnings = _gather_topology(commands, sysfs=hgx_sysfs)
    assert (facts["source"], facts["count"], facts["topology"], warnings) == ("pci", 8, None, [])
    assert facts["notes"][-1] == (
        "topology: not read because source is pci: `nvidia-smi topo -m` needs a working driver"
    )
    assert commands.ran == []


def test_topology_not_read_for_one_gpu_a100_sxm4_80gb_mig_enabled_1of4gpus(xml_capture):
    commands = Commands({"nvidia-smi -q -x": (0, xml_capture, ""), "nvidia-smi nvlink -s": (0, "", "")})
    facts, warnings = _gather_topology(commands)
    assert (facts["source"], facts["count"], facts["topology"], warnings) == ("nvidia-smi", 1, None, [])
    assert facts["notes"][-1] == "topology: not read because nvidia-smi lists 1 GPU: a matrix needs two or more"
    assert commands.ran == ["nvidia-smi -q -x", "nvidia-smi nvlink -s"]


def test_topology_not_read_when_nvml_answers_without_nvidia_smi(hgx_sysfs):
    commands = Commands(FM_OK, binaries=("systemctl", "nv-fabricmanager"))
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert (facts["source"], facts["topology"], warnings) == ("nvml", None, [])
    assert facts["notes"][-1] == "topology: not read because nvidia-smi is not in PATH (NVML answered without it)"


def test_topology_command_failure_is_a_warning_not_a_failure(hgx_sysfs):
    failed = "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    commands = Commands({TOPO: (255, failed, ""), **FM_OK})
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert (facts["count"], facts["topology"]) == (8, None)
    assert warnings == [
        "`nvidia-smi topo -m` exited 255: Unable to determine the device handle for GPU0000:18:00.0: Unknown Error. "
        "Expected the topology matrix of 8 GPUs; topology is null, check that `nvidia-smi topo -m` works on this host"
    ]
    assert facts["notes"][-1] == "topology: not read because `nvidia-smi topo -m` exited 255"


def test_topology_output_without_matrix_warns_with_raw_output(hgx_sysfs):
    commands = Commands({TOPO: (0, "Segmentation fault (core dumped)\n", ""), **FM_OK})
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert facts["topology"] is None
    assert len(warnings) == 1
    assert warnings[0].startswith("no `nvidia-smi topo -m` matrix found")
    assert warnings[0].endswith("Raw output:\nSegmentation fault (core dumped)\n")
    assert facts["notes"][-1] == "topology: not read because `nvidia-smi topo -m` printed no matrix"


@pytest.mark.parametrize("size", [0, -2])
def test_gpus_per_job_below_one_is_refused(size):
    with pytest.raises(gf.GpuFactsError, match=f"gpus_per_job is {size}: expected a number of GPUs greater than 0"):
        gf.gather_gpu_facts(which=lambda name: None, topology=True, gpus_per_job=size)


def test_topology_h100x8_sxm_2numa_noNIC_against_two_listed_gpus_is_noted(capture):
    """The matrix is kept as read, and the disagreement with the GPU backend is said, not hidden."""
    matrix = capture("topo", "h100x8_sxm_2numa_noNIC.txt").read_text()
    commands = Commands({TOPO: (0, matrix, "")})
    nvml = make_fake_pynvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")])
    facts, warnings = gf.gather_gpu_facts(
        nvml_loader=lambda: nvml, run=commands.run, which=commands.which, topology=True
    )
    assert (facts["count"], len(facts["topology"]["gpus"]), warnings) == (2, 8, [])
    assert facts["notes"][-1] == "topology: the matrix shows 8 GPUs, nvml lists 2"
