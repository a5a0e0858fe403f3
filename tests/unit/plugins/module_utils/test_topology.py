"""topology: the `nvidia-smi topo -m` parser on real captures, placements and bad input (the module: ../modules).

Each capture is read twice: as recorded, and in driver 580's form (its header underlined as the H200 capture shows,
topology_expected.driver580_form); the H200's own captures are recorded in that form already.
"""

from __future__ import annotations

import json
import time
from itertools import combinations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import (
    is_cpu_list,
    link_rank,
    nvlink_count,
    parse_topology,
)
from conftest import shared_path
from module_helpers import assert_warnings
from topology_expected import (
    CAPTURES,
    EXPECTED,
    FOLDERS,
    H200_CAPTURES,
    MP_MAYBE,
    RESET,
    UNDERLINE,
    driver580_form,
)

ALL_CAPTURES = sorted(CAPTURES)
RECORDED, DRIVER580 = "recorded", "driver580"
# (capture, form): the 13 captures as recorded and in driver 580's form, the H200's as recorded (driver 580's form)
CAPTURE_FORMS = [
    *(pytest.param(name, form, id=f"{name}-{form}") for name in ALL_CAPTURES for form in (RECORDED, DRIVER580)),
    *(pytest.param(name, RECORDED, id=f"h200-driver580-{name}") for name in sorted(H200_CAPTURES)),
]
SECONDS_FOR_CAPTURES = 5.0
SECONDS_FOR_HUGE_INPUT = 10.0


def capture(name: str) -> str:
    """The capture's bytes as text, line ends as recorded (the H200's terminal capture has CR LF)."""
    return shared_path("nvidia-smi", FOLDERS[name], f"{name}.txt").read_bytes().decode("utf-8")


def capture_in(name: str, form: str) -> str:
    """The capture as recorded, or in driver 580's form: exactly one underlined header (two escape codes)."""
    text = capture(name)
    if form == DRIVER580:
        assert "\x1b" not in text, f"{name} is recorded without escape codes"
        text = driver580_form(text)
    assert text.count("\x1b") == (0 if name in CAPTURES and form == RECORDED else 2)
    return text


# ----------------------------------------------------------------------------------------- real captures


def test_every_capture_has_expectations(shared_data):
    on_disk = {path.stem for path in (shared_data / "nvidia-smi" / "topo").glob("*.txt")}
    assert on_disk == set(CAPTURES)


@pytest.mark.parametrize(("name", "form"), CAPTURE_FORMS)
def test_capture(name, form):
    expected = EXPECTED[name]
    result = parse_topology(capture_in(name, form))
    assert len(result["gpus"]) == expected["gpu_count"]
    assert [gpu["index"] for gpu in result["gpus"]] == list(range(expected["gpu_count"]))
    assert result["nics"] == expected["nics"]
    assert result["nvlink_domains"] == expected["nvlink_domains"]
    assert result["nvlink_all_to_all"] is expected["nvlink_all_to_all"]
    assert result["numa_groups"] == expected["numa_groups"]
    assert result["placements"] == []
    for index, fields in expected["gpus"].items():
        gpu = result["gpus"][index]
        assert {key: gpu[key] for key in fields} == fields, f"GPU{index}"
    assert_warnings(result["warnings"], expected["warnings"])


@pytest.mark.parametrize(("name", "form"), CAPTURE_FORMS)
def test_capture_result_is_plain_json(name, form):
    """What Ansible 2.19 accepts: str keys, real booleans, ints, no tuples or sets."""
    result = parse_topology(capture_in(name, form), 2)
    assert json.loads(json.dumps(result)) == result
    assert isinstance(result["nvlink_all_to_all"], bool)


@pytest.mark.parametrize(("name", "form"), CAPTURE_FORMS)
def test_capture_cut_anywhere_never_crashes(name, form):
    """Cut each capture at many points (as a terminal or an issue excerpt would, also inside an escape code): no
    exception, sane shape."""
    text = capture_in(name, form)
    for end in range(0, len(text), 23):
        result = parse_topology(text[:end], 2)
        assert set(result) == {
            "gpus",
            "nics",
            "nvlink_domains",
            "nvlink_all_to_all",
            "numa_groups",
            "placements",
            "warnings",
        }
        if not result["gpus"]:
            assert result["warnings"]


@pytest.mark.parametrize(("name", "form"), CAPTURE_FORMS)
def test_capture_with_windows_line_ends_reads_the_same(name, form):
    text = capture_in(name, form).replace("\r\n", "\n")
    assert parse_topology(text.replace("\n", "\r\n")) == parse_topology(text)


@pytest.mark.parametrize("name", sorted(H200_CAPTURES))
def test_driver580_form_is_the_h200_capture(name):
    """driver580_form puts the codes where driver 580 does: undone by hand on the H200's captures, it gives them
    back byte for byte (pipe, terminal with CR LF, and -mp)."""
    text = capture(name)
    plain = text.replace(UNDERLINE, "").replace(RESET, "")
    assert plain != text
    assert driver580_form(plain) == text


def test_h200_terminal_and_mp_captures_read_as_the_pipe():
    """The same host three ways: into a pipe, under `script` (CR LF), and `topo -mp` (one GPU: no NVLink to miss)."""
    pipe = parse_topology(capture("topo-m.pipe"))
    assert pipe["gpus"], "the H200 pipe capture reads as a matrix"
    assert parse_topology(capture("topo-m.tty")) == pipe
    assert parse_topology(capture("topo-mp")) == pipe


@pytest.mark.parametrize("name", ["a10x4_pcie_sys_2nic", "topo-m.pipe"])
def test_escape_codes_in_cells_and_legend_read_the_same(name):
    """Codes anywhere (a colour per cell, a bold legend), not only driver 580's header, are removed before reading."""
    text = capture(name).replace(UNDERLINE, "").replace(RESET, "")
    coloured = text.replace(" X ", " \x1b[1;31mX\x1b[0m ").replace("Legend:", "\x1b[1mLegend:\x1b[m")
    assert text.count(" X ") >= 1
    assert coloured.count("\x1b") == 2 * (text.count(" X ") + text.count("Legend:"))  # every self cell and legend
    assert parse_topology(coloured, 1) == parse_topology(text, 1)


def test_tabs_and_spaces_read_the_same():
    """h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453 is raw TAB output; the same text with tabs expanded reads the same."""
    text = capture("h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453")
    assert "\t" in text
    assert parse_topology(text.expandtabs(8)) == parse_topology(text)


# --------------------------------------------------------------------------------------------- placements


@pytest.mark.parametrize(
    ("name", "per_job", "expected"),
    [
        # GPU0-3 are NUMA 0 and GPU4-7 NUMA 1, all NV18: two sets, each inside one node.
        pytest.param("h100x8_sxm_2numa_noNIC", 4, [[0, 1, 2, 3], [4, 5, 6, 7]], id="h100x8_sxm_2numa_noNIC-4"),
        # Lowest-index greedy would give [3, 4, 5] as the second set, across nodes; NUMA-first gives [4, 5, 6].
        pytest.param("h100x8_sxm_2numa_noNIC", 3, [[0, 1, 2], [4, 5, 6]], id="h100x8_sxm_2numa_noNIC-3"),
        # No node holds 5 or 8 GPUs: then a set may cross nodes.
        pytest.param("h100x8_sxm_2numa_noNIC", 5, [[0, 1, 2, 3, 4]], id="h100x8_sxm_2numa_noNIC-5"),
        pytest.param("h100x8_sxm_2numa_noNIC", 8, [list(range(8))], id="h100x8_sxm_2numa_noNIC-8"),
        pytest.param("h100x8_sxm_2numa_noNIC", 9, [], id="h100x8_sxm_2numa_noNIC-9"),
        # NPS4: nodes hold GPU pairs (3: 0,1; 1: 2,3; 7: 4,5; 5: 6,7).
        pytest.param("dgx-a100_8gpu_10nic_nps4-numa_dgx05", 2, [[0, 1], [2, 3], [4, 5], [6, 7]], id="dgx-a100_nps4-2"),
        pytest.param("dgx-a100_8gpu_10nic_nps4-numa_dgx05", 4, [[0, 1, 2, 3], [4, 5, 6, 7]], id="dgx-a100_nps4-4"),
        # NV12 pairs 0-1 and 2-3 only; NUMA unknown (0-3).
        pytest.param(
            "azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK", 2, [[0, 1], [2, 3]], id="nc96v4-2"
        ),
        pytest.param("azure-nc96v4_a100-80gb-x4_nv12-pairs_cpuaff-0_numa-0-3_VM-QUIRK", 4, [], id="nc96v4-4"),
        # No NVLink at all: no pair, but one GPU per job always fits.
        pytest.param("a10x4_pcie_sys_2nic", 2, [], id="a10x4_pcie_sys_2nic-2"),
        pytest.param("a10x4_pcie_sys_2nic", 1, [[0], [1], [2], [3]], id="a10x4_pcie_sys_2nic-1"),
        # Truncated: only the links of rows GPU0-GPU4 are known, so GPU4 has no 3 known-NVLinked partners.
        pytest.param("dgx2-class_v100x16_nv6_10nic_TRUNCATED_nccl-tests78", 4, [[0, 1, 2, 3]], id="dgx2-truncated-4"),
    ],
)
def test_placements(name, per_job, expected):
    result = parse_topology(capture(name), per_job)
    assert result["placements"] == expected
    empty_warning = f"no set of {per_job} pairwise NVLinked GPUs"
    assert any(empty_warning in warning for warning in result["warnings"]) is (expected == [])


def test_placements_prefer_one_numa_node_even_when_interleaved():
    """Hand-made matrix: GPU0/GPU2 on node 0, GPU1/GPU3 on node 1, all NVLinked."""
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tNV4\tNV4\t0-7\t0\n"
        "GPU1\tNV4\t X \tNV4\tNV4\t8-15\t1\n"
        "GPU2\tNV4\tNV4\t X \tNV4\t0-7\t0\n"
        "GPU3\tNV4\tNV4\tNV4\t X \t8-15\t1\n"
    )
    result = parse_topology(text, 2)
    assert result["placements"] == [[0, 2], [1, 3]]
    assert result["numa_groups"] == [{"numa_node": 0, "gpus": [0, 2]}, {"numa_node": 1, "gpus": [1, 3]}]


@pytest.mark.parametrize(("name", "form"), CAPTURE_FORMS)
def test_placements_are_disjoint_full_and_pairwise_nvlinked(name, form):
    text = capture_in(name, form)
    for per_job in range(1, 9):
        result = parse_topology(text, per_job)
        peers = {gpu["index"]: gpu["nvlink_peers"] for gpu in result["gpus"]}
        used = [gpu for placement in result["placements"] for gpu in placement]
        assert len(used) == len(set(used))
        for placement in result["placements"]:
            assert len(placement) == per_job
            assert placement == sorted(placement)
            for first, second in combinations(placement, 2):
                assert str(second) in peers[first]


# ------------------------------------------------------------------------------------------------- topo -mp


def test_mp_capture_is_flagged():
    """gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60 came from `topo -mp`; its legend is cut off."""
    warnings = parse_topology(capture("gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60"))["warnings"]
    assert any(MP_MAYBE in warning and "topo -mp" in warning for warning in warnings)


def test_mp_legend_without_nv_line_is_flagged():
    """`topo -mp` prints the same legend without its NV# line: take a10x4_pcie_sys_2nic and drop that line."""
    text = capture("a10x4_pcie_sys_2nic")
    lines = [line for line in text.splitlines() if not line.strip().startswith("NV#")]
    assert len(lines) == len(text.splitlines()) - 1
    warnings = parse_topology("\n".join(lines))["warnings"]
    assert_warnings(warnings, ["the legend has no NV# line, so this is `nvidia-smi topo -mp` output"])


def test_mp_command_line_is_flagged():
    text = "root@f51fec68bf55:~# nvidia-smi topo -mp\n" + capture("gpu8_14nic_TOPO-MP-pcie-only_TRUNCATED_deepep60")
    warnings = parse_topology(text)["warnings"]
    assert any("the command line says so" in warning for warning in warnings)
    assert not any(MP_MAYBE in warning for warning in warnings)


def test_legend_nv_line_is_no_nvlink():
    """a10x4_pcie_sys_2nic: the legend explains NV# but no cell is NVLink, and the legend is not read as rows."""
    result = parse_topology(capture("a10x4_pcie_sys_2nic"))
    assert result["nvlink_domains"] == [[0], [1], [2], [3]]
    assert all(gpu["nvlink_peers"] == {} for gpu in result["gpus"])
    assert result["warnings"] == []


# ------------------------------------------------------------------------------------- bad and small input


@pytest.mark.parametrize("text", [None, "", "   \n\t\n"], ids=["none", "empty", "blank"])
def test_empty_input(text):
    result = parse_topology(text, 4)
    assert result["gpus"] == []
    assert result["nvlink_all_to_all"] is False
    assert result["nvlink_domains"] == []
    assert result["placements"] == []
    assert_warnings(result["warnings"], ["empty input"])


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
        "No devices were found\n",
        "\x00\xff\x1b[31mGPU X NV12\t\t\n" * 50,
        "GPU0 X NV12\nGPU1 NV12 X\n",  # rows without a header
    ],
    ids=["driver-not-loaded", "no-devices", "binary-junk", "rows-without-header"],
)
def test_garbage_input(text):
    result = parse_topology(text, 2)
    assert result["gpus"] == []
    assert result["nvlink_all_to_all"] is False
    assert_warnings(result["warnings"], ["no `nvidia-smi topo -m` matrix found"])
    assert repr(text[:20])[1:-1] in result["warnings"][0]  # the raw text is quoted


def test_damaged_cell_is_warned_and_the_other_row_fills_in():
    """h100x8_sxm_2numa_noNIC with GPU2's cell under GPU0 damaged: GPU0's own row still says NV18."""
    original = capture("h100x8_sxm_2numa_noNIC")
    text = original.replace("GPU2    NV18    NV18     X", "GPU2    N?18    NV18     X")
    assert text != original
    result = parse_topology(text)
    assert_warnings(result["warnings"], ["row GPU2: cells that are not link types, ignored: 'N?18' under GPU0"])
    assert result["gpus"][2]["nvlink_peers"] == {str(peer): 18 for peer in (0, 1, 3, 4, 5, 6, 7)}
    assert result["nvlink_all_to_all"] is True


def test_header_only():
    result = parse_topology("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n")
    assert [gpu["index"] for gpu in result["gpus"]] == [0, 1]
    assert result["nvlink_all_to_all"] is False
    assert result["nvlink_domains"] == [[0], [1]]
    assert any("no row for GPU0, GPU1" in warning for warning in result["warnings"])


def test_single_gpu():
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-23\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
    result = parse_topology(text, 1)
    assert result["gpus"] == [
        {
            "index": 0,
            "cpu_affinity": "0-23",
            "numa_node": 0,
            "numa_affinity": "0",
            "gpu_numa_id": None,
            "nvlink_peers": {},
            "nearest_nics": [],
            "nearest_nic_link": None,
        }
    ]
    assert result["nvlink_all_to_all"] is True
    assert result["nvlink_domains"] == [[0]]
    assert result["placements"] == [[0]]
    assert result["warnings"] == []


@pytest.mark.parametrize(
    ("numa", "gpu_numa_id", "numa_node", "warning"),
    [
        ("0,2", "N/A", None, "'0,2' of GPU0 spans several NUMA nodes"),
        ("N/A", "N/A", None, "NUMA Affinity is N/A for GPU0"),
        ("1", "4", 1, None),
        ("x1", "N/A", None, "'x1' of GPU0 is not a NUMA node"),
    ],
)
def test_numa_values(numa, gpu_numa_id, numa_node, warning):
    text = f"\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-71\t{numa}\t\t{gpu_numa_id}\n"
    result = parse_topology(text)
    gpu = result["gpus"][0]
    assert gpu["numa_node"] == numa_node
    assert gpu["numa_affinity"] == numa
    assert gpu["gpu_numa_id"] == (int(gpu_numa_id) if gpu_numa_id.isdigit() else None)
    assert_warnings(result["warnings"], [warning] if warning else [])


def test_link_order():
    ranks = [link_rank(cell) for cell in ("X", "NV1", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS")]
    assert ranks == sorted(ranks)
    assert link_rank("NV1") == link_rank("NV18")
    assert link_rank("SOC") == link_rank("SYS")
    assert [link_rank(cell) for cell in ("NV", "NV#", "NV0", "nv4", "SY", "", "N/A")] == [None] * 7
    assert [nvlink_count(cell) for cell in ("NV1", "NV18", "NV#", "PIX")] == [1, 18, None, None]


def test_cpu_lists():
    assert all(is_cpu_list(text) for text in ("0", "0-103", "0-51,104-155", "2-63,96-127"))
    assert not any(is_cpu_list(text) for text in ("", "-31,64-95", "N/A", "5-3", "0-", "0,,1", "٣"))


def test_parser_is_fast_on_the_captures():
    """Fleet hot path: the 13 captures 20 times over (about 0.2 s here) within a bound a busy CI box meets."""
    texts = [capture(name) for name in ALL_CAPTURES]
    start = time.perf_counter()
    for _round in range(20):
        for text in texts:
            parse_topology(text, 4)
    assert time.perf_counter() - start < SECONDS_FOR_CAPTURES


def test_parser_is_fast_on_huge_damaged_input():
    """3000 columns, 40 full rows and 1 MB of legend-like junk: linear work, devices capped at 512."""
    header = "\t" + "\t".join(f"GPU{n}" for n in range(3000)) + "\tCPU Affinity\n"
    rows = "".join(f"GPU{n}\t" + "\t".join(["NV2"] * 3000) + "\t0-7\n" for n in range(40))
    junk = ("  NV#  = " + "x " * 5000 + "\n") * 200
    start = time.perf_counter()
    result = parse_topology(header + rows + junk, 2)
    assert time.perf_counter() - start < SECONDS_FOR_HUGE_INPUT
    assert any("only the first 512 are read" in warning for warning in result["warnings"])
