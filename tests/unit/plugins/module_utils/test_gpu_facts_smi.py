"""gpuops.cluster.gpu_facts_smi: the nvidia-smi parsers on every real capture, and the nvidia-smi backend.

Capture cases are named after their file in ../shared/data/nvidia-smi/{query,mig,h200-driver580}; the expected
values were read off each file by hand (see ../shared/data/nvidia-smi/*/SOURCES.md).
Fixtures (``capture``, ``xml_capture``) are in conftest.py; the stand-in host in tests/unit/gpu_facts_helpers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_smi as smi
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import GpuFactsParseError
from gpu.nvidia_smi_list import parse_nvidia_smi_list
from gpu.nvidia_smi_q import parse_nvidia_smi_q
from gpu_facts_helpers import Commands, gather, make_pci

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


# One NVIDIA H200, driver 580.159.04 (h200-driver580/SOURCES.md): `nvidia-smi -q` and `-q -x`
H200 = "h200-driver580"
H200_UUID = "GPU-283a682d-d984-3e2f-10f2-3a540656cc51"
H200_CASES = {
    name: {
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
        "attached_gpus": 1,
        "name": "NVIDIA H200",
        "bus_ids": ["00000000:00:06.0"],
        "uuids": [H200_UUID],
        "memory_total_mib": 143771,
        "mig_mode": "Disabled",
        "persistence_mode": True,
        "fabric": NO_FABRIC,  # Fabric State N/A: a PCIe-attached H200 in a VM
    }
    for name in ("q.txt", "q.xml")
}
CAPTURE_CASES = [
    *(pytest.param("query", name, QUERY_CASES[name], id=name.rsplit(".", 1)[0]) for name in sorted(QUERY_CASES)),
    *(pytest.param(H200, name, H200_CASES[name], id=f"{H200}-{name}") for name in sorted(H200_CASES)),
]


def _parse_capture(path: Path) -> dict:
    text = path.read_text()
    return smi.parse_nvidia_smi_xml(text) if path.suffix == ".xml" else parse_nvidia_smi_q(text)


@pytest.mark.parametrize(("folder", "cases"), [("query", QUERY_CASES), ("mig", MIG_CASES)])
def test_every_capture_has_a_case(folder, cases, shared_data):
    directory = shared_data / "nvidia-smi" / folder
    on_disk = sorted(path.name for path in directory.iterdir() if path.name != "SOURCES.md")
    assert on_disk == sorted(cases), "a capture without a hand-written case, or a case without its capture"


@pytest.mark.parametrize(("folder", "name", "want"), CAPTURE_CASES)
def test_query_capture(folder, name, want, capture):
    parsed = _parse_capture(capture(folder, name))
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
        assert gpu["cpu_affinity"] is None  # the same
        assert gpu["nvlink"] is None


@pytest.mark.parametrize("name", sorted(MIG_CASES), ids=lambda name: name.rsplit(".", 1)[0])
def test_mig_list_capture(name, capture):
    gpus = parse_nvidia_smi_list(capture("mig", name).read_text())
    assert len(gpus) == 1
    gpu = gpus[0]
    assert (gpu["index"], gpu["name"], gpu["uuid"]) == (
        0,
        "NVIDIA H100 80GB HBM3",
        "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
    )
    assert [(d["profile"], d["uuid"]) for d in gpu["mig_devices"]] == MIG_CASES[name]
    assert [d["index"] for d in gpu["mig_devices"]] == list(range(len(MIG_CASES[name])))


def test_h200_driver580_list(capture):
    assert parse_nvidia_smi_list(capture(H200, "L.txt").read_text()) == [
        {"index": 0, "name": "NVIDIA H200", "uuid": H200_UUID, "mig_devices": []}
    ]


# --------------------------------------------------------------------------- terminal control sequences


def _underlined(text: str) -> str:
    """Every non-blank line of ``text`` wrapped in underline codes, CR LF line ends: what a driver that colours its
    output on a terminal (driver 580 does it to topo -m's header even into a pipe) would print."""
    return "".join(
        f"\x1b[4m{line}\x1b[0m\r\n" if line.strip() and not line.lstrip().startswith("<") else f"{line}\r\n"
        for line in text.splitlines()
    )


@pytest.mark.parametrize(
    ("name", "parse"),
    [
        ("q.txt", parse_nvidia_smi_q),
        ("q.xml", smi.parse_nvidia_smi_xml),
        ("L.txt", parse_nvidia_smi_list),
    ],
    ids=["q", "q-x", "L"],
)
def test_h200_driver580_parsers_strip_terminal_codes(name, parse, capture):
    """Every nvidia-smi parser reads the H200's outputs the same with control sequences and CR LF added."""
    text = capture(H200, name).read_text()
    coloured = _underlined(text) if name != "q.xml" else text.replace("<gpu ", "\x1b[1m<gpu ").replace("\n", "\r\n")
    assert "\x1b" in coloured
    assert parse(coloured) == parse(text)


def test_nvlink_parsers_strip_terminal_codes():
    coloured = _underlined(NVLINK_STATUS)
    assert smi.parse_nvidia_smi_nvlink(coloured) == smi.parse_nvidia_smi_nvlink(NVLINK_STATUS)


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
    with pytest.raises(GpuFactsParseError) as err:
        smi.parse_nvidia_smi_xml(raw)
    assert detail in str(err.value)
    assert raw in str(err.value)


def test_text_parse_error_on_unrelated_output():
    with pytest.raises(GpuFactsParseError, match="Raw output:\nbash: nvidia-smi: command not found"):
        parse_nvidia_smi_q("bash: nvidia-smi: command not found\n")


def test_list_parse_error_names_the_line():
    with pytest.raises(GpuFactsParseError, match="unrecognised line 'Failed to initialize NVML"):
        parse_nvidia_smi_list("Failed to initialize NVML: Driver/library version mismatch\n")


def test_list_no_devices_is_empty():
    assert parse_nvidia_smi_list("No devices found.\n") == []


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
    gpus = smi.parse_nvidia_smi_nvlink(NVLINK_STATUS)
    assert [(gpu["index"], gpu["uuid"], smi.active_links(gpu)) for gpu in gpus] == [
        (0, "GPU-aaaa", 2),
        (1, "GPU-bbbb", 0),
        (2, "GPU-cccc", 0),
        (3, "GPU-dddd", None),
    ]


# --------------------------------------------------------------------------- nvidia-smi backend


def test_nvidia_smi_backend_on_a100_sxm4_80gb_mig_enabled_1of4gpus(tmp_path, xml_capture):
    sysfs = tmp_path / "sys"
    make_pci(sysfs, "0000:01:00.0", "0x10de", "0x030200", device="0x20b2", numa="1", cpus="32-63")  # stand-in
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
        "cpu_affinity": "32-63",
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
    with pytest.raises(GpuFactsParseError, match="Raw output:\nSegmentation fault"):
        gather(commands)
