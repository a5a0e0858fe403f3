"""gpuops.cluster.gpu_facts: the order the three backends are tried in, and the topology call (topology=true).

Each backend has its own file: test_gpu_facts_{nvml,smi,sysfs}.py, with the shared normalisers in
test_gpu_facts_common.py. Fixtures (``capture``, ``xml_capture``, ``hgx_sysfs``) are in conftest.py; the
stand-in host (``Commands``, ``gather``, the HGX board) in tests/unit/gpu_facts_helpers.py.
"""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from fake_pynvml import (
    FakeGpu,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
    NVMLError_LibRmVersionMismatch,
    make_fake_pynvml,
)
from gpu_facts_helpers import HGX_CPUS, Commands, gather, hgx_fake_gpus, no_pynvml

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
    # the topology's NUMA nodes and CPUs agree with sysfs' (hgx_sysfs: GPUs 0-3 on node 0, 4-7 on node 1)
    assert [gpu["numa_node"] for gpu in topo["gpus"]] == [gpu["numa_node"] for gpu in facts["gpus"]]
    assert [gpu["cpu_affinity"] for gpu in facts["gpus"]] == [HGX_CPUS[0]] * 4 + [HGX_CPUS[1]] * 4
    assert [gpu["cpu_affinity"] for gpu in topo["gpus"]] == [gpu["cpu_affinity"] for gpu in facts["gpus"]]
    assert not [note for note in facts["notes"] if note.startswith("topology:")]
    assert facts["topology_error"] is None
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
    assert (facts["count"], facts["topology"], facts["topology_error"], warnings) == (8, None, None, [])
    assert TOPO not in commands.ran
    assert not [note for note in facts["notes"] if note.startswith("topology:")]


def _gather_topology(commands, nvml=None, sysfs="/nonexistent/sys"):
    return gf.gather_gpu_facts(
        nvml_loader=(lambda: nvml) if nvml is not None else no_pynvml,
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
    # no driver is no topology error: the GPUs' CPU and NUMA affinity come from sysfs instead
    assert facts["topology_error"] is None
    assert [gpu["cpu_affinity"] for gpu in facts["gpus"]] == [HGX_CPUS[0]] * 4 + [HGX_CPUS[1]] * 4


def test_topology_read_for_one_gpu_h200_driver580(capture):
    """The H200 host of ../shared/data/nvidia-smi/h200-driver580: `-q -x` and `topo -m` as recorded (its header
    underlined by driver 580). One GPU: no links, but the CPU and NUMA affinity its workspace's cpuset needs."""
    xml = capture("h200-driver580", "q.xml").read_text()
    matrix = capture("h200-driver580", "topo-m.pipe.txt").read_text()
    assert "\x1b[4m" in matrix
    commands = Commands({"nvidia-smi -q -x": (0, xml, ""), "nvidia-smi nvlink -s": (0, "", ""), TOPO: (0, matrix, "")})
    facts, warnings = _gather_topology(commands)
    assert (facts["source"], facts["count"], facts["driver_version"], warnings) == ("nvidia-smi", 1, "580.159.04", [])
    assert [(g["index"], g["cpu_affinity"], g["numa_node"]) for g in facts["topology"]["gpus"]] == [(0, "0-15", 0)]
    assert facts["topology"]["numa_groups"] == [{"numa_node": 0, "gpus": [0]}]
    assert facts["topology_error"] is None
    assert not [note for note in facts["notes"] if note.startswith("topology:")]
    assert commands.ran == ["nvidia-smi -q -x", "nvidia-smi nvlink -s", TOPO]


def test_topology_not_read_when_nvml_lists_no_gpu():
    commands = Commands({})
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml([]))
    assert (facts["source"], facts["count"], facts["topology"], facts["topology_error"]) == ("nvml", 0, None, None)
    assert (warnings, commands.ran) == ([], [])
    assert facts["notes"][-1] == "topology: not read because nvml lists no GPU"


def test_topology_not_read_when_nvml_answers_without_nvidia_smi(hgx_sysfs):
    commands = Commands(FM_OK, binaries=("systemctl", "nv-fabricmanager"))
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert (facts["source"], facts["topology"], facts["topology_error"], warnings) == ("nvml", None, None, [])
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
    assert facts["topology_error"] == {
        "command": "nvidia-smi topo -m",
        "error": "exited 255: Unable to determine the device handle for GPU0000:18:00.0: Unknown Error",
    }


def test_topology_command_failure_without_output_on_one_gpu(capture):
    """The H200's GPU facts, and a `topo -m` that fails silently: one GPU is read, so its failure is an error too."""
    xml = capture("h200-driver580", "q.xml").read_text()
    commands = Commands({"nvidia-smi -q -x": (0, xml, ""), "nvidia-smi nvlink -s": (0, "", ""), TOPO: (9, "", "")})
    facts, warnings = _gather_topology(commands)
    assert facts["topology"] is None
    assert warnings == [
        "`nvidia-smi topo -m` exited 9: no output. Expected the topology matrix of 1 GPU; topology is null, "
        "check that `nvidia-smi topo -m` works on this host"
    ]
    assert facts["topology_error"] == {"command": "nvidia-smi topo -m", "error": "exited 9: no output"}


def test_topology_output_without_matrix_warns_with_raw_output(hgx_sysfs):
    commands = Commands({TOPO: (0, "Segmentation fault (core dumped)\n", ""), **FM_OK})
    facts, warnings = _gather_topology(commands, nvml=make_fake_pynvml(hgx_fake_gpus()), sysfs=hgx_sysfs)
    assert facts["topology"] is None
    assert len(warnings) == 1
    assert warnings[0].startswith("no `nvidia-smi topo -m` matrix found")
    assert warnings[0].endswith("Raw output:\nSegmentation fault (core dumped)\n")
    assert facts["notes"][-1] == "topology: not read because `nvidia-smi topo -m` printed no matrix"
    assert facts["topology_error"] == {
        "command": "nvidia-smi topo -m",
        "error": "no `nvidia-smi topo -m` matrix found: expected a header line whose first column is GPU0, "
        "got 'Segmentation fault (core dumped)\\n'",
    }


@pytest.mark.parametrize("size", [0, -2])
def test_gpus_per_job_below_one_is_refused(size):
    with pytest.raises(gf.GpuFactsError, match=f"gpus_per_job is {size}: expected a number of GPUs greater than 0"):
        gf.gather_gpu_facts(run=None, which=None, topology=True, gpus_per_job=size)


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
