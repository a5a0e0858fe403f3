"""gpuops.cluster.gpu_facts_sysfs: /proc and nv-fabricmanager parsers, and the PCI backend (no driver, no GPU).

Fixtures (``hgx_sysfs``) are in conftest.py; the stand-in host in tests/unit/gpu_facts_helpers.py.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_sysfs as sysfs_backend
from gpu_facts_helpers import HGX_CPUS, gather, make_pci

# --------------------------------------------------------------------------- /proc and nv-fabricmanager parsers


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
    assert sysfs_backend.parse_proc_driver_version(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [("Fabric Manager version is : 450.102.04\n", "450.102.04"), ("", None)],
)
def test_parse_fabricmanager_version(text, want):
    assert sysfs_backend.parse_fabricmanager_version(text) == want


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
    assert [gpu["cpu_affinity"] for gpu in facts["gpus"]] == [HGX_CPUS[0]] * 4 + [HGX_CPUS[1]] * 4  # no driver needed
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


# --------------------------------------------------------------------------- CPU and NUMA affinity (sysfs)

# A stand-in for the H200 host of ../shared/data/nvidia-smi/h200-driver580 before its driver: its one GPU at the bus id
# its `nvidia-smi -q` shows, with the NUMA node and CPUs its `nvidia-smi topo -m` shows (sysfs itself not captured).
H200_BDF = "0000:00:06.0"


def test_one_gpu_without_driver_has_cpu_and_numa_affinity(tmp_path):
    """A fresh one-GPU server: no driver, yet the GPU facts carry its NUMA node and CPU list (the plan's cpuset)."""
    sysfs = tmp_path / "sys"
    make_pci(sysfs, H200_BDF, "0x10de", "0x030200", device="0x2335", numa="0", cpus="0-15")
    facts, warnings = gather(sysfs=sysfs)
    assert (facts["source"], facts["count"], warnings) == ("pci", 1, [])
    gpu = facts["gpus"][0]
    assert (gpu["pci_bus_id"], gpu["numa_node"], gpu["cpu_affinity"]) == ("00000000:00:06.0", 0, "0-15")


@pytest.mark.parametrize(
    ("numa", "cpus", "want"),
    [
        ("1", "52-103,156-207\n", (1, "52-103,156-207")),
        ("-1", "0-15", (None, "0-15")),  # no NUMA (a VM): the CPUs still stand
        ("0", "0-3,4-7,12", (0, "0-7,12")),  # written back in the one CPU-list form (cpu_list.format_cpu_list)
        ("0", "", (0, None)),  # empty: no CPU is local
        ("0", "ff", (0, None)),  # a mask (local_cpus), not a list
        ("0", None, (0, None)),  # no local_cpulist file
    ],
    ids=["two-ranges", "no-numa", "normalised", "empty", "mask", "absent"],
)
def test_read_affinity(tmp_path, numa, cpus, want):
    sysfs = tmp_path / "sys"
    make_pci(sysfs, H200_BDF, "0x10de", "0x030200", numa=numa, cpus=cpus)
    root = str(sysfs)
    for bus_id in (H200_BDF, "00000000:00:06.0"):  # sysfs' and nvidia-smi's forms of the address
        got = (sysfs_backend.read_numa_node(root, bus_id), sysfs_backend.read_cpu_affinity(root, bus_id))
        assert got == want
    assert sysfs_backend.read_cpu_affinity(root, "0000:00:07.0") is None
    assert sysfs_backend.read_cpu_affinity(root, None) is None
