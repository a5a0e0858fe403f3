"""cuda_compat: the CUDA/driver table and the native / minor_version / forward_compat / incompatible decision.

Row-by-row checks read ../shared/data/cuda/cuda_driver_table.csv in place (NVIDIA's Table 3 and the
minor-version floors); hand-written cases follow ../shared/data/cuda/cuda_compat_notes.md and rules.md; the
nvidia-smi cases read the driver and "CUDA Version" that real `nvidia-smi -q` captures printed.
"""

from __future__ import annotations

import csv
import re

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.cuda_compat import (
    CUDA_RELEASES,
    MINOR_VERSION_FLOORS,
    check_compat,
    classify_gpu,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.versions import (
    compare_versions,
    parse_cuda_version,
    parse_driver_version,
)
from conftest import SHARED_DATA, shared_path

CSV_PATH = SHARED_DATA / "cuda" / "cuda_driver_table.csv"
CSV_RELEASES = 56  # data rows in the CSV: CUDA 10.0.130 .. 13.2 Update 2
FLOOR_COLUMN = 2  # min_driver_minor_compat
PATCH_DOTS = 2  # major.minor.patch


def _csv_rows() -> list:
    if not CSV_PATH.is_file():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"real third-party data not present: {CSV_PATH}"))]
    with CSV_PATH.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][:3] == ["cuda_version", "min_driver_linux_toolkit", "min_driver_minor_compat"]
    return [pytest.param(row, id=row[0].split(" (")[0]) for row in rows[1:]]


CSV_ROWS = _csv_rows()


def _driver(cell: str) -> str:
    """'>= 450.51.06' / '>=460.27.03' (NVIDIA's spacing varies) -> '450.51.06'."""
    return cell.replace(">=", "").strip()


def _floor(row: list) -> str | None:
    # the 10.1 row has only two fields in the CSV as published; 10.x has no minor-version compatibility
    cell = row[FLOOR_COLUMN].strip() if len(row) > FLOOR_COLUMN else "N/A"
    return None if cell == "N/A" else _driver(cell)


# rows with a minor-version floor (CUDA 11 onwards)
FLOOR_ROWS = [param for param in CSV_ROWS if param.values[0] is None or _floor(param.values[0]) is not None]


def _toolkit(label: str) -> str:
    """The toolkit version a CSV label names: '12.4 Update 1' -> 12.4.1, '12.4 GA' -> 12.4.0, '11.4.0 GA' -> 11.4.0."""
    base = re.match(r"\d+\.\d+(?:\.\d+)?", label).group(0)
    if base.count(".") == PATCH_DOTS:  # major.minor.patch already given (10.x: a build number)
        return base
    update = re.search(r"Update (\d+)", label)
    if update:
        return f"{base}.{update.group(1)}"
    return f"{base}.0" if "GA" in label else base


def _one_below(version: str) -> str:
    """The previous patch: 530.30.02 -> 530.30.01, 570.26 -> 570.25, 580.0.0 -> 579.99.99."""
    texts = version.split(".")
    parts = [int(text) for text in texts]
    index = len(parts) - 1
    while parts[index] == 0:
        parts[index] = 99
        index -= 1
    parts[index] -= 1
    return ".".join(str(part).zfill(len(text)) for part, text in zip(parts, texts))


def _tuple(version: str) -> tuple:
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


# --- the table against the CSV ------------------------------------------------------------------------------


def test_table_holds_exactly_the_csv_rows(shared_data):
    with (shared_data / "cuda" / "cuda_driver_table.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    assert {r.label: r.min_driver for r in CUDA_RELEASES} == {row[0]: _driver(row[1]) for row in rows}
    assert len(CUDA_RELEASES) == len(rows) == CSV_RELEASES


def test_minor_version_floors_match_the_csv(shared_data):
    with (shared_data / "cuda" / "cuda_driver_table.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    by_major = {}
    for row in rows:
        by_major.setdefault(int(row[0].split(".")[0]), set()).add(_floor(row))
    assert by_major == {10: {None}, 11: {"450.80.02"}, 12: {"525.60.13"}, 13: {"580"}}
    assert dict(MINOR_VERSION_FLOORS) == {11: "450.80.02", 12: "525.60.13", 13: "580"}


@pytest.mark.parametrize("row", CSV_ROWS)
def test_csv_row_driver_at_exact_minimum_is_native(row):
    minimum, toolkit = _driver(row[1]), _toolkit(row[0])
    result = check_compat(minimum, toolkit)
    assert (result["mode"], result["compatible"], result["min_driver"], result["cuda_release"]) == (
        "native",
        True,
        minimum,
        row[0],
    )


@pytest.mark.parametrize("row", CSV_ROWS)
def test_csv_row_one_patch_below_minimum_is_not_native(row):
    minimum, toolkit, floor = _driver(row[1]), _toolkit(row[0]), _floor(row)
    below = _one_below(minimum)
    result = check_compat(below, toolkit)  # no gpu_name: forward compatibility cannot be established
    expected = "minor_version" if floor is not None and _tuple(below) >= _tuple(floor) else "incompatible"
    assert result["mode"] == expected
    assert result["compatible"] is (expected != "incompatible")
    assert result["min_driver"] == minimum


@pytest.mark.parametrize("row", FLOOR_ROWS)
def test_csv_row_minor_version_floor_is_exact(row):
    minimum, toolkit, floor = _driver(row[1]), _toolkit(row[0]), _floor(row)
    at_floor = floor if floor.count(".") else f"{floor}.0.0"  # '>=580' -> driver 580.0.0
    below = _one_below(at_floor)
    # 11.0.x: the toolkit's own driver is older than the 11.x floor (450.80.02), so it is native there
    assert check_compat(at_floor, toolkit)["mode"] == (
        "native" if _tuple(at_floor) >= _tuple(minimum) else "minor_version"
    )
    assert check_compat(below, toolkit)["mode"] == ("native" if _tuple(below) >= _tuple(minimum) else "incompatible")


# --- hand-written cases (notes and rules in ../shared/data) ---------------------------------------------------


def test_535_104_05_runs_12_2_natively():
    result = check_compat("535.104.05", "12.2")
    assert (result["mode"], result["compatible"], result["max_cuda"]) == ("native", True, "12.2")
    assert result["min_driver"] == "535.54.03"  # a bare 12.2 is checked as the GA release
    assert result["reasons"] == ["driver 535.104.05 >= 535.54.03, the minimum for CUDA 12.2 GA: native support"]
    assert check_compat("535.104.05", "12.2.2")["mode"] == "native"  # 12.2 Update 2 ships with exactly this driver


def test_535_with_12_4_is_minor_version_with_ptx_caveat():
    result = check_compat("535.104.05", "12.4")
    assert (result["mode"], result["compatible"]) == ("minor_version", True)
    assert (result["min_driver"], result["max_cuda"]) == ("550.54.14", "12.2")
    assert "525.60.13" in result["reasons"][0]
    assert "no PTX JIT" in result["reasons"][1]
    assert "cudaErrorCallRequiresNewerDriver" in result["reasons"][1]
    assert result["datacenter_gpu"] is None
    assert not any("cuda-compat" in reason for reason in result["reasons"])


def test_535_with_12_4_1_on_a100_mentions_cuda_compat_package():
    result = check_compat("535.161.08", "12.4.1", gpu_name="NVIDIA A100-SXM4-80GB")
    assert (result["mode"], result["min_driver"], result["datacenter_gpu"]) == ("minor_version", "550.54.15", True)
    assert any("cuda-compat-12-4" in reason for reason in result["reasons"])


def test_470_with_12_0_on_geforce_is_incompatible():
    result = check_compat("470.82.01", "12.0", gpu_name="NVIDIA GeForce RTX 3090")
    assert (result["mode"], result["compatible"], result["datacenter_gpu"]) == ("incompatible", False, False)
    assert result["max_cuda"] == "11.4"
    assert any("cudaErrorCompatNotSupportedOnDevice (804)" in reason for reason in result["reasons"])
    assert result["reasons"][-1].startswith("fix: upgrade the driver to >= 525.60.13")


def test_470_with_12_0_on_a100_is_incompatible_because_r470_is_end_of_life():
    # A100 is a data-center GPU, but the notes (section 4, NVIDIA "Supported Drivers" Table 2) list only
    # R535, R570 and R580 as supported; all other branches are end of life, so no cuda-compat path.
    result = check_compat("470.82.01", "12.0", gpu_name="NVIDIA A100-SXM4-80GB")
    assert (result["mode"], result["compatible"], result["datacenter_gpu"]) == ("incompatible", False, True)
    assert any("R470" in reason and "R535, R570, R580" in reason for reason in result["reasons"])


def test_old_driver_without_gpu_name_cannot_use_forward_compat():
    result = check_compat("470.82.01", "12.0")
    assert result["mode"] == "incompatible"
    assert result["datacenter_gpu"] is None
    assert any(reason.startswith("gpu_name was not given") for reason in result["reasons"])


def test_r535_with_13_0_on_h100_is_forward_compat():
    result = check_compat("535.104.05", "13.0", gpu_name="NVIDIA H100 80GB HBM3")
    assert (result["mode"], result["compatible"], result["min_driver"]) == ("forward_compat", True, "580.65.06")
    assert any("cuda-compat-13-0" in reason and "R535" in reason for reason in result["reasons"])
    assert any(reason.startswith("constraints:") for reason in result["reasons"])


def test_r570_with_13_0_on_geforce_is_incompatible_and_on_l40s_forward_compat():
    assert check_compat("570.124.06", "13.0", gpu_name="NVIDIA GeForce RTX 4090")["mode"] == "incompatible"
    assert check_compat("570.124.06", "13.0", gpu_name="NVIDIA L40S")["mode"] == "forward_compat"


def test_580_with_13_0():
    native = check_compat("580.65.06", "13.0")
    assert (native["mode"], native["max_cuda"]) == ("native", "13.0")
    assert check_compat("580.65.06", "13.0.1")["mode"] == "minor_version"  # 13.0 Update 1 needs 580.82.07
    assert check_compat("580.95.05", "13.2")["mode"] == "minor_version"  # 13.2 GA needs 595.45.04
    assert check_compat("575.57.08", "13.0")["mode"] == "incompatible"  # below the 13.x floor (580)


def test_bare_minor_notes_the_stricter_update():
    result = check_compat("550.54.14", "12.4")
    assert result["mode"] == "native"
    assert "12.4 Update 1 needs >= 550.54.15" in result["reasons"][-1]
    assert check_compat("550.54.14", "12.4.1")["mode"] == "minor_version"


def test_cuda_10_has_no_minor_version_compatibility():
    assert check_compat("440.33", "10.2")["mode"] == "native"
    assert check_compat("418.39", "10.1.243")["mode"] == "native"  # the 10.1 row covers its updates
    result = check_compat("440.32", "10.2")
    assert result["mode"] == "incompatible"
    assert "no minor-version compatibility" in result["reasons"][0]


def test_volta_with_cuda_13_is_warned():
    result = check_compat("580.65.06", "13.0", gpu_name="Tesla V100-SXM2-16GB")
    assert result["mode"] == "native"
    assert any("Maxwell/Pascal/Volta" in reason for reason in result["reasons"])
    assert not any(
        "Volta" in reason for reason in check_compat("580.65.06", "13.0", "NVIDIA A100-SXM4-80GB")["reasons"]
    )


@pytest.mark.parametrize(
    ("driver", "expected"),
    [("410.48", "10.0"), ("409.99", None), ("550.90.07", "12.4"), ("560.35.03", "12.6"), ("570.26", "12.8"),
     ("530.41.03", "12.1"), ("600.10.01", "13.2")],
)  # fmt: skip
def test_max_cuda(driver, expected):
    assert check_compat(driver, "10.0")["max_cuda"] == expected


# --- Fabric Manager --------------------------------------------------------------------------------------------


def test_fabric_manager_same_branch_different_version_is_a_mismatch():
    # NVIDIA/gpu-operator issue #544: "fabric manager ... version 530.30.02 don't match with driver version 530.41.03"
    result = check_compat("530.41.03", "12.1", fabric_manager_version="530.30.02")
    assert result["fabric_manager_match"] is False
    assert result["compatible"] is True  # the CUDA answer is separate
    assert "530.30.02 does not match driver 530.41.03" in result["reasons"][-1]


def test_fabric_manager_nvtrust_mismatch_and_match():
    assert check_compat("550.107.02", "12.4", fabric_manager_version="550.90.07")["fabric_manager_match"] is False
    assert check_compat("550.90.07", "12.4", fabric_manager_version="550.90.07")["fabric_manager_match"] is True
    assert check_compat("550.90.07", "12.4")["fabric_manager_match"] is None


# --- GPU classes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", True),  # names as real nvidia-smi -q captures print them
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA H100 NVL", True),
        ("NVIDIA H800", True),
        ("Tesla V100-SXM2-16GB", True),
        ("Tesla T4", True),
        ("NVIDIA A10", True),
        ("NVIDIA L40S", True),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
        ("NVIDIA GeForce RTX 4090", False),
        ("NVIDIA RTX A6000", False),
        ("Quadro RTX 8000", False),
        ("NVIDIA TITAN RTX", False),
        ("NVIDIA A1000 mystery", False),
        (None, None),
        ("  ", None),
    ],
)
def test_classify_gpu(name, expected):
    assert classify_gpu(name)[0] is expected


# --- real nvidia-smi -q captures: driver and the "CUDA Version" it printed ---------------------------------------


def _smi(name: str) -> tuple[str, str]:
    text = shared_path("nvidia-smi", "query", name).read_text(encoding="utf-8")
    if name.endswith(".xml"):
        driver = re.search(r"<driver_version>([^<]+)<", text).group(1)
        cuda = re.search(r"<cuda_version>([^<]+)<", text).group(1)
    else:
        driver = re.search(r"^Driver Version\s*:\s*(\S+)", text, re.MULTILINE).group(1)
        cuda = re.search(r"^CUDA Version\s*:\s*(\S+)", text, re.MULTILINE).group(1)
    return driver, cuda


def test_a100_sxm4_80gb_x4_nvidia_smi_q():
    driver, printed = _smi("a100-sxm4-80gb-x4_nvidia-smi-q.txt")
    assert (driver, printed) == ("555.42.02", "12.5")
    assert check_compat(driver, printed)["max_cuda"] == "12.5"
    assert check_compat(driver, "12.5")["mode"] == "native"
    assert check_compat(driver, "12.5.1")["mode"] == "minor_version"  # needs 555.42.06
    assert check_compat(driver, "13.0", gpu_name="NVIDIA A100-SXM4-80GB")["mode"] == "incompatible"  # R555 is EOL


def test_h100_nvl_x2_nvidia_smi_q():
    driver, printed = _smi("h100-nvl-x2_nvidia-smi-q.txt")
    assert (driver, printed) == ("550.54.14", "12.4")
    result = check_compat(driver, "12.6", gpu_name="NVIDIA H100 NVL")
    assert (result["mode"], result["max_cuda"], result["datacenter_gpu"]) == ("minor_version", "12.4", True)


def test_h100_sxm_80gb_x8_hgx_nvidia_smi_q_fabric_completed():
    driver, printed = _smi("h100-sxm-80gb-x8_hgx_nvidia-smi-q_fabric-completed.txt")
    assert (driver, printed) == ("565.57.01", "12.7")
    # nvidia-smi prints the driver API version 12.7; there is no CUDA 12.7 toolkit, so max_cuda is 12.6
    assert check_compat(driver, "12.6.3")["max_cuda"] == "12.6"
    assert check_compat(driver, "12.6.3")["mode"] == "native"
    with pytest.raises(ValueError, match=r"there is no CUDA 12\.7 release"):
        check_compat(driver, printed)
    assert check_compat(driver, "13.0", gpu_name="NVIDIA H100 80GB HBM3")["mode"] == "incompatible"  # R565 EOL


def test_h800_sxm_x8_nvidia_smi_q_i0_fabric_completed():
    driver, printed = _smi("h800-sxm_x8_nvidia-smi-q-i0_fabric-completed.txt")
    assert (driver, printed) == ("525.105.17", "12.0")
    assert check_compat(driver, "12.0.1")["mode"] == "native"  # 12.0 Update 1 needs 525.85.12
    result = check_compat(driver, "12.1")
    assert (result["mode"], result["max_cuda"]) == ("minor_version", "12.0")


def test_a100_sxm4_80gb_mig_enabled_1of4gpus_xml():
    driver, printed = _smi("a100-sxm4-80gb_mig-enabled_1of4gpus.xml")
    assert (driver, printed) == ("535.54.03", "12.2")
    assert check_compat(driver, printed)["mode"] == "native"
    assert check_compat(driver, "12.2.2")["mode"] == "minor_version"  # needs 535.104.05


# --- malformed input fails with a clear message -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "cuda", "fabric", "message"),
    [
        ("550", "12.4", None, r"driver_version '550' is a branch, not a version: pin the full version .* 550\.90\.07"),
        ("550.90.07-0ubuntu1", "12.4", None, r"looks like a package version; .* '550\.90\.07'"),
        ("", "12.4", None, r"driver_version '' is not a dotted version"),
        ("550.90.07.1", "12.4", None, r"has 4 parts; at most 3"),
        ("r550", "12.4", None, r"'r550' is not a dotted version of digits"),
        ("550.90.07", "12", None, r"cuda_version '12' names only a CUDA major"),
        ("550.90.07", "v12.4", None, r"cuda_version 'v12\.4' is not a dotted version"),
        ("550.90.07", "12.4.1.1", None, r"at most 3"),
        ("550.90.07", "12.7", None, r"there is no CUDA 12\.7 release; known CUDA 12 releases are 12\.0, .*12\.9"),
        ("550.90.07", "14.0", None, r"newer than the compatibility table, which ends at CUDA 13\.2 Update 2"),
        ("550.90.07", "9.2", None, r"older than CUDA 10\.0"),
        ("550.90.07", "12.4.2", None, r"known releases: 12\.4\.0 \(12\.4 GA\), 12\.4\.1 \(12\.4 Update 1\)"),
        ("550.90.07", "12.4", "550", r"fabric_manager_version '550' is a branch"),
    ],
)
def test_malformed_input_fails_clearly(driver, cuda, fabric, message):
    with pytest.raises(ValueError, match=message):
        check_compat(driver, cuda, fabric_manager_version=fabric)


def test_numbers_instead_of_strings_are_refused():
    with pytest.raises(ValueError, match=r"got float 12\.4; quote it in YAML"):
        parse_cuda_version(12.4)
    with pytest.raises(ValueError, match=r"got bool True"):
        parse_driver_version(True)


def test_compare_versions_is_numeric_and_pads():
    assert compare_versions("570.26", "570.124.06") == -1
    assert compare_versions("570.26", "570.26.0") == 0
    assert compare_versions("580", "579.99.99") == 1
