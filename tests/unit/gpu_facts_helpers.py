"""A stand-in host for gather_gpu_facts: canned commands, a sysfs PCI tree, the HGX H100 board as fake NVML GPUs.

Shared by tests/unit/plugins/module_utils/test_gpu_facts*.py (one file per backend); their fixtures
(``capture``, ``xml_capture``, ``hgx_sysfs``) are in tests/unit/plugins/module_utils/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from fake_pynvml import FakeGpu

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


# CPU and NUMA affinity of the HGX board's GPUs, as the h100x8_sxm_2numa_noNIC capture's topo -m gives them; the
# stand-in sysfs (hgx_sysfs) writes the same into local_cpulist, as the kernel would on that board
HGX_CPUS = ("0-51,104-155", "52-103,156-207")


def make_pci(
    sysfs: Path, bdf: str, vendor: str, cls: str, device: str = "0x2330", numa: str = "0", cpus: str | None = None
) -> None:
    """A PCI device under ``<sysfs>/bus/pci/devices/<bdf>``; ``local_cpulist`` only when ``cpus`` is given."""
    path = sysfs / "bus" / "pci" / "devices" / bdf
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "class").write_text(cls + "\n")
    (path / "device").write_text(device + "\n")
    (path / "numa_node").write_text(numa + "\n")
    if cpus is not None:
        (path / "local_cpulist").write_text(cpus + "\n")


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


def no_pynvml():
    raise ImportError("No module named 'pynvml'")


def gather(commands=None, nvml=None, sysfs="/nonexistent/sys", proc="/nonexistent/proc", backend="auto"):
    commands = commands or Commands(binaries=())
    loader = (lambda: nvml) if nvml is not None else no_pynvml
    return gf.gather_gpu_facts(
        backend=backend,
        nvml_loader=loader,
        run=commands.run,
        which=commands.which,
        sysfs_root=str(sysfs),
        proc_root=str(proc),
    )


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
