# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts without a driver: NVIDIA devices on the PCI bus (sysfs), /proc/driver/nvidia, nv-fabricmanager; and
``gather_pci``, the last backend (``source: pci``, or ``none`` without a GPU)."""

from __future__ import annotations

import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import format_cpu_list, parse_cpu_list
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    SOURCE_NONE,
    SOURCE_PCI,
    canonical_bus_id,
    gpu_record,
    int_or_none,
    sysfs_bus_id,
    value_or_none,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text

NVIDIA_PCI_VENDOR = 0x10DE
# PCI base class + subclass (class code >> 8) of a GPU (VGA or 3D controller) and of an NVSwitch ("other bridge")
_PCI_KINDS = {0x0300: "gpus", 0x0302: "gpus", 0x0680: "nvswitches"}

# --------------------------------------------------------------------------- /proc and nv-fabricmanager


def parse_proc_driver_version(text: str) -> str | None:
    """Kernel module version from ``/proc/driver/nvidia/version`` (proprietary or open module)."""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)\b", text or "")
    return match.group(1) if match else None


def parse_proc_gpu_information(text: str) -> dict:
    """``/proc/driver/nvidia/gpus/<bdf>/information`` as ``{name, uuid}`` (``Model:``/``GPU UUID:`` lines)."""
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return {"name": value_or_none(fields.get("Model")), "uuid": value_or_none(fields.get("GPU UUID"))}


def parse_fabricmanager_version(text: str) -> str | None:
    """``nv-fabricmanager --version`` ("Fabric Manager version is : 535.104.05") -> "535.104.05"."""
    match = re.search(r"version\s+is\s*:\s*(\d+\.\d+(?:\.\d+)?)", text or "", re.IGNORECASE)
    if not match:
        match = re.search(r"\b(\d+\.\d+\.\d+)\b", text or "")
    return match.group(1) if match else None


# --------------------------------------------------------------------------- sysfs / procfs readers


def _pci_attribute(sysfs_root: str, bus_id: str | None, attribute: str) -> str | None:
    name = sysfs_bus_id(bus_id)
    return read_text(os.path.join(sysfs_root, "bus", "pci", "devices", name, attribute)) if name else None


def read_numa_node(sysfs_root: str, bus_id: str | None) -> int | None:
    """NUMA node of a PCI device from sysfs; -1 (no NUMA affinity) and absence are None."""
    value = int_or_none(_pci_attribute(sysfs_root, bus_id, "numa_node"))
    return value if value is not None and value >= 0 else None


def read_cpu_affinity(sysfs_root: str, bus_id: str | None) -> str | None:
    """CPUs local to a PCI device (sysfs ``local_cpulist``) in the form of ``topology``'s ``cpu_affinity``; None when
    absent or not a CPU list. Needs no driver, so a fresh server's first plan has cpusets."""
    text = _pci_attribute(sysfs_root, bus_id, "local_cpulist")
    try:
        return format_cpu_list(parse_cpu_list(text)) if text else None
    except ValueError:
        return None


def scan_pci(sysfs_root: str) -> dict:
    """NVIDIA devices under ``<sysfs_root>/bus/pci/devices``.

    Returns ``{"gpus": [...], "nvswitches": [...]}``, each item ``{pci_bus_id}``; GPUs are display (0x0300xx) or
    3D (0x0302xx) controllers, NVSwitches are "other bridge" (0x0680xx) devices, both with vendor 0x10de. Sorted by
    bus id, as nvidia-smi orders.
    """
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    found: dict = {"gpus": [], "nvswitches": []}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return found
    for name in names:
        vendor = int_or_none(read_text(os.path.join(base, name, "vendor")))
        pci_class = int_or_none(read_text(os.path.join(base, name, "class")))
        if vendor != NVIDIA_PCI_VENDOR or pci_class is None:
            continue
        kind = _PCI_KINDS.get(pci_class >> 8)
        if kind is None:
            continue  # HD audio, USB-C controller and other functions of the card
        found[kind].append({"pci_bus_id": canonical_bus_id(name)})
    found["gpus"].sort(key=lambda item: item["pci_bus_id"] or "")
    found["nvswitches"].sort(key=lambda item: item["pci_bus_id"] or "")
    return found


def read_proc_driver(proc_root: str) -> dict:
    """``{"loaded": bool, "driver_version": str|None, "gpus": {bus_id: {name, uuid}}}`` from /proc/driver/nvidia."""
    base = os.path.join(proc_root, "driver", "nvidia")
    version_text = read_text(os.path.join(base, "version"))
    gpus = {}
    try:
        names = os.listdir(os.path.join(base, "gpus"))
    except OSError:
        names = []
    for name in names:
        info = read_text(os.path.join(base, "gpus", name, "information"))
        if info is not None and canonical_bus_id(name):
            gpus[canonical_bus_id(name)] = parse_proc_gpu_information(info)
    return {
        "loaded": version_text is not None,
        "driver_version": parse_proc_driver_version(version_text or ""),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- PCI backend


def gather_pci(pci: dict, proc: dict) -> dict:
    """GPUs seen on the PCI bus; names and UUIDs from /proc/driver/nvidia when the module is loaded."""
    gpus = []
    for index, device in enumerate(pci["gpus"]):
        info = proc["gpus"].get(device["pci_bus_id"], {})
        gpus.append(gpu_record(index, name=info.get("name"), uuid=info.get("uuid"), pci_bus_id=device["pci_bus_id"]))
    return {
        "source": SOURCE_PCI if gpus else SOURCE_NONE,
        "driver_version": proc["driver_version"],
        "cuda_driver_version": None,
        "gpus": gpus,
    }
