"""Expected topology of each real capture in ../shared/data/nvidia-smi/topo/ and of the H200's in
../shared/data/nvidia-smi/h200-driver580/, written by hand; and driver 580's form of a capture.

Every value below was read off the capture text (and SOURCES.md), not produced by the parser. Keys:

* ``gpu_count``, ``nics``, ``nvlink_domains``, ``nvlink_all_to_all``, ``numa_groups``: the whole result;
* ``gpus``: spot checks, GPU index -> the fields that GPU must have (fields not named are not checked);
* ``warnings``: one substring per expected warning, and no other warning may appear.
"""

from __future__ import annotations


def all_peers(gpu: int, count: int, links: int) -> dict[str, int]:
    """Peers of ``gpu`` when every pair of ``count`` GPUs shows ``NV<links>``."""
    return {str(peer): links for peer in range(count) if peer != gpu}


def names(prefix: str, first: int, last: int) -> list[str]:
    return [f"{prefix}{number}" for number in range(first, last + 1)]


EIGHT = list(range(8))
SINGLETONS_8 = [[gpu] for gpu in EIGHT]
TWO_SOCKETS_8 = [{"numa_node": 0, "gpus": [0, 1, 2, 3]}, {"numa_node": 1, "gpus": [4, 5, 6, 7]}]
MP_MAYBE = "may be what this is"  # the warning for "no NVLink, no complete legend"

CAPTURES: dict[str, dict] = {
    # 8x A100, every GPU pair NV12; 17 NICs named by the NIC Legend (mlx5_2..mlx5_17, mlx5_bond_0);
    # pairs of GPUs sit behind PXB switches with 4 NICs each; every GPU CPU 0-103, NUMA 0.
    "a100x8_17nic_singleNUMA": {
        "gpu_count": 8,
        "nics": [*names("mlx5_", 2, 17), "mlx5_bond_0"],
        "nvlink_domains": [EIGHT],
        "nvlink_all_to_all": True,
        "numa_groups": [{"numa_node": 0, "gpus": EIGHT}],
        "gpus": {
            0: {
                "cpu_affinity": "0-103",
                "numa_node": 0,
                "numa_affinity": "0",
                "gpu_numa_id": None,
                "nvlink_peers": all_peers(0, 8, 12),
                "nearest_nics": names("mlx5_", 2, 5),
                "nearest_nic_link": "PXB",
            },
            3: {"nearest_nics": names("mlx5_", 6, 9), "nearest_nic_link": "PXB"},
            4: {"nearest_nics": names("mlx5_", 10, 13), "nvlink_peers": all_peers(4, 8, 12)},
            7: {"cpu_affinity": "0-103", "numa_node": 0, "nearest_nics": names("mlx5_", 14, 17)},
        },
        "warnings": [],
    },
    # 4x A10, all GPU pairs SYS, both NICs SYS to every GPU; full legend including its NV# line.
    "a10x4_pcie_sys_2nic": {
        "gpu_count": 4,
        "nics": ["mlx5_0", "mlx5_1"],
        "nvlink_domains": [[0], [1], [2], [3]],
        "nvlink_all_to_all": False,
        "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3]}],
        "gpus": {
            0: {"cpu_affinity": "0-127", "numa_node": 0, "nvlink_peers": {}, "nearest_nic_link": "SYS"},
            3: {"nearest_nics": ["mlx5_0", "mlx5_1"], "nvlink_peers": {}},
        },
        "warnings": [],
    },
    # Azure NC48 v4: 2 GPUs NV12, CPU Affinity 0-1 and NUMA Affinity 0-1 (VM quirk), no NIC columns.
    "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK": {
        "gpu_count": 2,
        "nics": [],
        "nvlink_domains": [[0, 1]],
        "nvlink_all_to_all": True,
        "numa_groups": [],
        "gpus": {
            0: {
                "cpu_affinity": "0-1",
                "numa_node": None,
                "numa_affinity": "0-1",
                "nvlink_peers": {"1": 12},
                "nearest_nics": [],
                "nearest_nic_link": None,
            },
            1: {"numa_node": None, "nvlink_peers": {"0": 12}},
        },
        "warnings": ["'0-1' of GPU0, GPU1 spans several NUMA nodes"],
    },
    # Azure NC96 v4: 4 GPUs as two NV12 pairs (0-1, 2-3), SYS across; CPU Affinity 0, NUMA Affinity 0-3.
    "azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK": {
        "gpu_count": 4,
        "nics": [],
        "nvlink_domains": [[0, 1], [2, 3]],
        "nvlink_all_to_all": False,
        "numa_groups": [],
        "gpus": {
            0: {"cpu_affinity": "0", "numa_node": None, "numa_affinity": "0-3", "nvlink_peers": {"1": 12}},
            2: {"nvlink_peers": {"3": 12}},
            3: {"cpu_affinity": "0", "numa_affinity": "0-3", "nvlink_peers": {"2": 12}},
        },
        "warnings": ["'0-3' of GPU0, GPU1, GPU2, GPU3 spans several NUMA nodes"],
    },
    # DGX A100: NV12 all pairs; NUMA Affinity 3,3,1,1,7,7,5,5 (NPS4); GPU pairs behind PXB with two NICs each;
    # mlx5_8/mlx5_9 (storage) are SYS to every GPU, so nobody's nearest.
    "dgx-a100_8gpu_10nic_nps4-numa_dgx05": {
        "gpu_count": 8,
        "nics": names("mlx5_", 0, 9),
        "nvlink_domains": [EIGHT],
        "nvlink_all_to_all": True,
        "numa_groups": [
            {"numa_node": 1, "gpus": [2, 3]},
            {"numa_node": 3, "gpus": [0, 1]},
            {"numa_node": 5, "gpus": [6, 7]},
            {"numa_node": 7, "gpus": [4, 5]},
        ],
        "gpus": {
            0: {
                "cpu_affinity": "48-63,176-191",
                "numa_node": 3,
                "gpu_numa_id": None,
                "nvlink_peers": all_peers(0, 8, 12),
                "nearest_nics": ["mlx5_0", "mlx5_1"],
                "nearest_nic_link": "PXB",
            },
            2: {"cpu_affinity": "16-31,144-159", "numa_node": 1, "nearest_nics": ["mlx5_2", "mlx5_3"]},
            5: {"cpu_affinity": "112-127,240-255", "numa_node": 7, "nearest_nics": ["mlx5_4", "mlx5_5"]},
            7: {"cpu_affinity": "80-95,208-223", "numa_node": 5, "nearest_nics": ["mlx5_6", "mlx5_7"]},
        },
        "warnings": [],
    },
    # DGX-2 class, TRUNCATED: header names 16 GPUs + mlx5_0..9 + CPU Affinity only; rows GPU0-GPU3 whole,
    # GPU4 cut inside its CPU Affinity ("0-23,4"). All cells shown are NV6.
    "dgx2-class_v100x16_nv6_10nic_TRUNCATED_nccl-tests78": {
        "gpu_count": 16,
        "nics": names("mlx5_", 0, 9),
        "nvlink_domains": [list(range(16))],
        "nvlink_all_to_all": False,  # pairs between GPU5..GPU15 are not in the text
        "numa_groups": [],
        "gpus": {
            0: {
                "cpu_affinity": "0-23,48-71",
                "numa_node": None,
                "numa_affinity": None,
                "nvlink_peers": all_peers(0, 16, 6),
                "nearest_nics": ["mlx5_0"],
                "nearest_nic_link": "PIX",
            },
            2: {"cpu_affinity": "0-23,48-71", "nearest_nics": ["mlx5_1"], "nearest_nic_link": "PIX"},
            4: {"cpu_affinity": None, "nvlink_peers": all_peers(4, 16, 6), "nearest_nics": ["mlx5_2"]},
            5: {
                "cpu_affinity": None,
                "nvlink_peers": {"0": 6, "1": 6, "2": 6, "3": 6, "4": 6},
                "nearest_nics": [],
            },
            15: {"nvlink_peers": {"0": 6, "1": 6, "2": 6, "3": 6, "4": 6}, "nearest_nic_link": None},
        },
        "warnings": [
            "no row for GPU5, GPU6",
            "ends inside row GPU4: its last field '0-23,4'",
            "nvlink_all_to_all is false because these GPU pairs are unknown: GPU5-GPU6",
            "no NUMA Affinity column",
        ],
    },
    # `nvidia-smi topo -mp`, TRUNCATED in the GPU4 row ("SY"); no legend left. GPU0-3: NODE among themselves,
    # SYS to GPU4-7, PIX to NIC0/NIC1/NIC2/NIC7 in turn; CPU 0-47,96-143, NUMA 0.
    "gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60": {
        "gpu_count": 8,
        "nics": names("NIC", 0, 13),
        "nvlink_domains": SINGLETONS_8,
        "nvlink_all_to_all": False,
        "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3]}],
        "gpus": {
            0: {
                "cpu_affinity": "0-47,96-143",
                "numa_node": 0,
                "gpu_numa_id": None,
                "nvlink_peers": {},
                "nearest_nics": ["NIC0"],
                "nearest_nic_link": "PIX",
            },
            1: {"nearest_nics": ["NIC1"]},
            2: {"nearest_nics": ["NIC2"]},
            3: {"nearest_nics": ["NIC7"], "nearest_nic_link": "PIX"},
            4: {"cpu_affinity": None, "numa_node": None, "nearest_nics": []},
        },
        "warnings": [
            "no row for GPU5, GPU6, GPU7, NIC0",
            "ends inside row GPU4: its last field 'SY'",
            "row GPU4 has 15 of 22 link cells",
            "no NIC Legend entry for NIC0",
            MP_MAYBE,
        ],
    },
    # 4x H100 in a VM: NV18 among all four; every GPU-NIC link PHB; CPU 0-79, NUMA 0; NIC Legend mlx5_0..7.
    "h100x4_vm_8nic_phb": {
        "gpu_count": 4,
        "nics": names("mlx5_", 0, 7),
        "nvlink_domains": [[0, 1, 2, 3]],
        "nvlink_all_to_all": True,
        "numa_groups": [{"numa_node": 0, "gpus": [0, 1, 2, 3]}],
        "gpus": {
            0: {
                "cpu_affinity": "0-79",
                "numa_node": 0,
                "numa_affinity": "0",
                "gpu_numa_id": None,
                "nvlink_peers": {"1": 18, "2": 18, "3": 18},
                "nearest_nics": names("mlx5_", 0, 7),
                "nearest_nic_link": "PHB",
            },
            3: {"nvlink_peers": {"0": 18, "1": 18, "2": 18}},
        },
        "warnings": [],
    },
    # Raw TAB-separated, TRUNCATED after the NIC5 row (a lone "NIC" line follows); no legends.
    # GPU0..GPU7 are PIX to NIC8..NIC1 in turn; NIC0 is SYS to everything. NUMA 0 for GPU0-3, 1 for GPU4-7.
    "h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453": {
        "gpu_count": 8,
        "nics": names("NIC", 0, 8),
        "nvlink_domains": [EIGHT],
        "nvlink_all_to_all": True,
        "numa_groups": TWO_SOCKETS_8,
        "gpus": {
            0: {
                "cpu_affinity": "0-79",
                "numa_node": 0,
                "gpu_numa_id": None,
                "nvlink_peers": all_peers(0, 8, 18),
                "nearest_nics": ["NIC8"],
                "nearest_nic_link": "PIX",
            },
            3: {"nearest_nics": ["NIC5"], "numa_node": 0},
            4: {"cpu_affinity": "80-159", "numa_node": 1, "nearest_nics": ["NIC4"]},
            7: {"cpu_affinity": "80-159", "numa_node": 1, "nearest_nics": ["NIC1"], "nearest_nic_link": "PIX"},
        },
        "warnings": [
            "line 16 is not a matrix row, ignored: 'NIC'",
            "no row for NIC6, NIC7, NIC8",
            "no NIC Legend entry for NIC0",
        ],
    },
    # 8x H100 SXM: NV18 all pairs; GPU0-3 CPU 0-51,104-155 NUMA 0; GPU4-7 CPU 52-103,156-207 NUMA 1; no NICs.
    "h100x8_sxm_2numa_noNIC": {
        "gpu_count": 8,
        "nics": [],
        "nvlink_domains": [EIGHT],
        "nvlink_all_to_all": True,
        "numa_groups": TWO_SOCKETS_8,
        "gpus": {
            0: {
                "cpu_affinity": "0-51,104-155",
                "numa_node": 0,
                "numa_affinity": "0",
                "gpu_numa_id": None,
                "nvlink_peers": all_peers(0, 8, 18),
                "nearest_nics": [],
                "nearest_nic_link": None,
            },
            4: {"cpu_affinity": "52-103,156-207", "numa_node": 1},
            7: {"cpu_affinity": "52-103,156-207", "numa_node": 1, "nvlink_peers": all_peers(7, 8, 18)},
        },
        "warnings": [],
    },
    # H800, terminal-damaged: CPU Affinity "-31,64-95" for GPU0-3 (leading digits lost); GPU7 "2-63,96-127"
    # is just as damaged but still a valid CPU list, so it cannot be caught. NIC rows exist without NIC
    # columns: NIC0 is PIX to GPU1, NIC1 PIX to GPU3, NIC2 and NIC3 PIX to GPU7; NODE inside a socket.
    "h800x8_nv8_4nic_TERMINAL-TRUNCATED": {
        "gpu_count": 8,
        "nics": names("mlx5_", 0, 3),
        "nvlink_domains": [EIGHT],
        "nvlink_all_to_all": True,
        "numa_groups": TWO_SOCKETS_8,
        "gpus": {
            0: {
                "cpu_affinity": None,
                "numa_node": 0,
                "nvlink_peers": all_peers(0, 8, 8),
                "nearest_nics": ["mlx5_0", "mlx5_1"],
                "nearest_nic_link": "NODE",
            },
            1: {"nearest_nics": ["mlx5_0"], "nearest_nic_link": "PIX"},
            3: {"cpu_affinity": None, "nearest_nics": ["mlx5_1"], "nearest_nic_link": "PIX"},
            4: {"cpu_affinity": "32-63,96-127", "numa_node": 1, "nearest_nics": ["mlx5_2", "mlx5_3"]},
            7: {"cpu_affinity": "2-63,96-127", "nearest_nics": ["mlx5_2", "mlx5_3"], "nearest_nic_link": "PIX"},
        },
        "warnings": [
            "rows NIC0, NIC1, NIC2, NIC3 have no column in the header",
            "CPU Affinity '-31,64-95' of GPU0, GPU1, GPU2, GPU3 is not a CPU list",
        ],
    },
    # 8x A5000 PCIe over two sockets, no NVLink (PXB/PIX inside a socket, SYS across); NIC columns named
    # mlx5_0/mlx5_1, NODE to GPU0-3, SYS to GPU4-7. No legend at all.
    "pcie8_a5000_2socket_savio4_mlx5": {
        "gpu_count": 8,
        "nics": ["mlx5_0", "mlx5_1"],
        "nvlink_domains": SINGLETONS_8,
        "nvlink_all_to_all": False,
        "numa_groups": TWO_SOCKETS_8,
        "gpus": {
            0: {
                "cpu_affinity": "0-15",
                "numa_node": 0,
                "nvlink_peers": {},
                "nearest_nics": ["mlx5_0", "mlx5_1"],
                "nearest_nic_link": "NODE",
            },
            7: {
                "cpu_affinity": "16-31",
                "numa_node": 1,
                "nearest_nics": ["mlx5_0", "mlx5_1"],
                "nearest_nic_link": "SYS",
            },
        },
        "warnings": [MP_MAYBE],
    },
    # 8x RTX 3090: PIX pairs, PHB inside a socket, SYS across; no NICs; legend cut in its PHB line.
    "rtx3090x8_pcie_pix-phb-sys_2socket_LEGEND-TRUNCATED_nccl1439": {
        "gpu_count": 8,
        "nics": [],
        "nvlink_domains": SINGLETONS_8,
        "nvlink_all_to_all": False,
        "numa_groups": TWO_SOCKETS_8,
        "gpus": {
            0: {"cpu_affinity": "0-13,28-41", "numa_node": 0, "gpu_numa_id": None, "nvlink_peers": {}},
            5: {"cpu_affinity": "14-27,42-55", "numa_node": 1, "nearest_nics": []},
        },
        "warnings": [MP_MAYBE],
    },
}

# One NVIDIA H200, driver 580.159.04 (h200-driver580/SOURCES.md): `nvidia-smi topo -m` into a pipe, the same under
# `script` (CR LF line ends) and `topo -mp`; each header is underlined (\x1b[4m ... \x1b[0m). One GPU, no NIC,
# CPU Affinity 0-15, NUMA Affinity 0, GPU NUMA ID N/A. One GPU: no pair to judge, so no `topo -mp` warning.
H200_ONE_GPU = {
    "gpu_count": 1,
    "nics": [],
    "nvlink_domains": [[0]],
    "nvlink_all_to_all": True,
    "numa_groups": [{"numa_node": 0, "gpus": [0]}],
    "gpus": {
        0: {
            "cpu_affinity": "0-15",
            "numa_node": 0,
            "numa_affinity": "0",
            "gpu_numa_id": None,
            "nvlink_peers": {},
            "nearest_nics": [],
            "nearest_nic_link": None,
        },
    },
    "warnings": [],
}
H200_CAPTURES: dict[str, dict] = dict.fromkeys(("topo-m.pipe", "topo-m.tty", "topo-mp"), H200_ONE_GPU)

# the folder under ../shared/data/nvidia-smi of every capture above, and every capture's expectations
FOLDERS = {**dict.fromkeys(CAPTURES, "topo"), **dict.fromkeys(H200_CAPTURES, "h200-driver580")}
EXPECTED = {**CAPTURES, **H200_CAPTURES}

# Driver 580 underlines the header of `topo -m` and `topo -mp`, from its first label to the end of the line, even
# into a pipe: "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m" (h200-driver580/topo-m.pipe.txt).
UNDERLINE, RESET = "\x1b[4m", "\x1b[0m"


def driver580_form(text: str) -> str:
    """``text`` as driver 580 prints it: its header line (the first whose first label is GPU0) underlined from that
    label to the end of the line, the line end kept. Raises ValueError when there is no such line."""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        labels = body.lstrip()
        if labels.startswith("GPU0"):
            lines[number] = f"{body[: len(body) - len(labels)]}{UNDERLINE}{labels}{RESET}{line[len(body) :]}"
            return "".join(lines)
    raise ValueError("no header line whose first label is GPU0")
