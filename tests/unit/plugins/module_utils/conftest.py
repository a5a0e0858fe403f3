"""Fixtures of the gpu_facts tests (test_gpu_facts*.py, one file per backend); plain helpers: gpu_facts_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_facts_helpers import HGX_BDFS, HGX_CPUS, make_pci


@pytest.fixture
def capture(shared_data):
    """``capture(folder, name)``: a file of ../shared/data/nvidia-smi, the test skipped when it is absent."""

    def find(folder: str, name: str) -> Path:
        path = shared_data / "nvidia-smi" / folder / name
        if not path.exists():
            pytest.skip(f"real third-party data not present: {path} (see ../shared/data/README.md)")
        return path

    return find


@pytest.fixture
def xml_capture(capture) -> str:
    return capture("query", "a100-sxm4-80gb_mig-enabled_1of4gpus.xml").read_text()


@pytest.fixture
def hgx_sysfs(tmp_path) -> Path:
    """8 H100 SXM (3D controllers) on two sockets (GPUs 0-3 on NUMA 0, 4-7 on NUMA 1, with those nodes' CPUs),
    4 NVSwitches, plus devices that must be ignored."""
    sysfs = tmp_path / "sys"
    for number, bdf in enumerate(HGX_BDFS):
        make_pci(sysfs, bdf, "0x10de", "0x030200", numa=str(number // 4), cpus=HGX_CPUS[number // 4])
    for bdf in ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"):
        make_pci(sysfs, bdf, "0x10de", "0x068000", device="0x22a3")
    make_pci(sysfs, "0000:18:00.1", "0x10de", "0x040300", device="0x22ba")  # HD audio function
    make_pci(sysfs, "0000:00:00.0", "0x8086", "0x060000", device="0x09a2")  # host bridge
    make_pci(sysfs, "0000:31:00.0", "0x15b3", "0x020700", device="0x1021")  # ConnectX-7
    return sysfs
