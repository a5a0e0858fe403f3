# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts for gpuops.cluster: three backends and the pure parsers they use.

Backends, tried in this order (``gather_gpu_facts``):

1. ``nvml``: the NVML library through ``pynvml`` (PyPI package ``nvidia-ml-py``);
2. ``nvidia-smi``: one ``nvidia-smi -q -x`` call (XML) plus one ``nvidia-smi nvlink -s``;
3. ``pci``: sysfs PCI discovery (vendor 0x10de), which needs no driver at all.

On request (``topology=True``), one ``nvidia-smi topo -m`` more, read by ``topology.parse_topology``,
so that preflight needs a single module call per host.

A host without an NVIDIA GPU, or without a driver, is a normal answer
(``present: false`` / ``source: pci``), never a failure.

Everything that touches the host is injected: the pynvml module (``nvml_loader``), command
execution (``run(argv) -> (rc, stdout, stderr)``), executable lookup (``which(name)``) and the
``/sys`` and ``/proc`` roots. Parsers are pure functions of text.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import xml.etree.ElementTree as ET

from ansible_collections.gpuops.cluster.plugins.module_utils.topology import gpus_per_job_problem, parse_topology

NVIDIA_PCI_VENDOR = 0x10DE
# PCI base class + subclass (class code >> 8)
PCI_CLASS_VGA = 0x0300
PCI_CLASS_3D = 0x0302
PCI_CLASS_BRIDGE_OTHER = 0x0680  # NVSwitch shows up as an "other bridge" with the NVIDIA vendor id

SOURCE_NVML = "nvml"
SOURCE_NVIDIA_SMI = "nvidia-smi"
SOURCE_PCI = "pci"
SOURCE_NONE = "none"
BACKENDS = (SOURCE_NVML, SOURCE_NVIDIA_SMI, SOURCE_PCI)

# mig_mode / mig_mode_pending: one of these, or None when the backend cannot tell (pci)
MIG_ENABLED = "Enabled"
MIG_DISABLED = "Disabled"
MIG_NOT_SUPPORTED = "N/A"

# fabric state (per GPU and aggregated): one of these, or None when not reported
FABRIC_NOT_SUPPORTED = "Not Supported"
FABRIC_NOT_STARTED = "Not Started"
FABRIC_IN_PROGRESS = "In Progress"
FABRIC_COMPLETED = "Completed"
FABRIC_ACTIVE_STATES = (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED)
# aggregation: the least advanced state wins; an unrecognised string ranks worst of all
_FABRIC_RANK = {FABRIC_NOT_STARTED: 1, FABRIC_IN_PROGRESS: 2, FABRIC_COMPLETED: 3, FABRIC_NOT_SUPPORTED: 4}
# NVML nvmlGpuFabricState_t values
_NVML_FABRIC_STATES = {0: FABRIC_NOT_SUPPORTED, 1: FABRIC_NOT_STARTED, 2: FABRIC_IN_PROGRESS, 3: FABRIC_COMPLETED}

_NA = ("", "n/a", "[n/a]", "not supported", "[not supported]", "none")
_RAW_LIMIT = 4000
_TOPOLOGY_MIN_GPUS = 2  # a topology matrix says something only between two GPUs
_MIB = 1024 * 1024
_CUDA_MAJOR = 1000
_CUDA_MINOR = 10
_BUS_ID_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def _shorten(raw: str) -> str:
    """Raw output as quoted in messages: the first _RAW_LIMIT characters, and how many more there were."""
    return raw if len(raw) <= _RAW_LIMIT else raw[:_RAW_LIMIT] + f"\n[... {len(raw) - _RAW_LIMIT} more chars]"


class GpuFactsError(Exception):
    """A failure the module reports with fail_json: the message states fact, expectation and fix."""


class GpuFactsParseError(GpuFactsError):
    """Output that should be machine-readable could not be read; the raw output is in the message."""

    def __init__(self, what: str, detail: str, raw: str) -> None:
        shown = _shorten(raw)
        super().__init__(
            f"could not parse {what}: {detail}. Expected the documented nvidia-smi format; if the driver "
            f"changed it, report this output so the parser can follow. Raw output:\n{shown}"
        )
        self.raw = raw


class BackendUnavailable(GpuFactsError):
    """This backend cannot answer on this host; the next one is tried."""


# --------------------------------------------------------------------------- small normalisers


def _text(value) -> str | None:
    """pynvml returns bytes before nvidia-ml-py 11.515 and str after; accept both."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    value = str(value).strip().rstrip("\x00")
    return value or None


def _na(value: str | None) -> str | None:
    """None for nvidia-smi's placeholders ("N/A", "[Not Supported]", empty)."""
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in _NA else value


def cuda_version_from_int(value) -> str | None:
    """NVML's CUDA driver version integer (12040) as "major.minor" ("12.4"); None for 0/None."""
    if not value:
        return None
    value = int(value)
    return f"{value // _CUDA_MAJOR}.{(value % _CUDA_MAJOR) // _CUDA_MINOR}"


def canonical_bus_id(value: str | None) -> str | None:
    """Any PCI address form as nvidia-smi prints it: ``00000000:18:00.0`` (8-digit domain, upper case)."""
    match = _BUS_ID_RE.match((value or "").strip())
    if not match:
        return None
    domain, bus, dev, fn = (int(part, 16) for part in match.groups())
    return f"{domain:08X}:{bus:02X}:{dev:02X}.{fn:X}"


def sysfs_bus_id(value: str | None) -> str | None:
    """Any PCI address form as sysfs names it: ``0000:18:00.0`` (lower case)."""
    match = _BUS_ID_RE.match((value or "").strip())
    if not match:
        return None
    domain, bus, dev, fn = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def normalise_mig_mode(value: str | None) -> str | None:
    """ "Enabled" / "Disabled" / "N/A" (GPU without MIG); None when unknown; other text passed through."""
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("enabled", "enable"):
        return MIG_ENABLED
    if lowered in ("disabled", "disable"):
        return MIG_DISABLED
    if lowered in _NA:
        return MIG_NOT_SUPPORTED
    return value.strip()


def normalise_fabric_state(value: str | None) -> str | None:
    """Fabric state as one of FABRIC_*; nvidia-smi's "N/A" is a GPU without fabric support."""
    if value is None:
        return None
    lowered = value.strip().lower()
    for state in (FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED):
        if lowered == state.lower():
            return state
    if lowered in _NA:
        return FABRIC_NOT_SUPPORTED
    return value.strip()


def aggregate_fabric_state(states) -> str | None:
    """One state for the host: the least advanced among GPUs (Not Started < In Progress < Completed)."""
    known = [state for state in states if state is not None]
    if not known:
        return None
    return min(known, key=lambda state: _FABRIC_RANK.get(state, 0))


def parse_enabled(value: str | None) -> bool | None:
    """ "Enabled" -> True, "Disabled" -> False, anything else -> None."""
    lowered = (value or "").strip().lower()
    if lowered == "enabled":
        return True
    if lowered == "disabled":
        return False
    return None


def parse_mib(value: str | None) -> int | None:
    """ "81920 MiB" -> 81920."""
    match = re.match(r"^\s*(\d+)\s*MiB\s*$", value or "")
    return int(match.group(1)) if match else None


def _int_or_none(value: str | None) -> int | None:
    value = _na(value)
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError:
        return None


def _fabric(state=None, status=None, clique_id=None, cluster_uuid=None) -> dict:
    return {"state": state, "status": status, "clique_id": clique_id, "cluster_uuid": cluster_uuid}


def _gpu(index: int, **fields) -> dict:
    """One GPU record with every key present; backends fill what they know."""
    record = {
        "index": index,
        "name": None,
        "uuid": None,
        "pci_bus_id": None,
        "memory_total_mib": None,
        "mig_mode": None,
        "mig_mode_pending": None,
        "persistence_mode": None,
        "numa_node": None,
        "nvlink": None,
        "fabric": _fabric(),
    }
    record.update(fields)
    return record


# --------------------------------------------------------------------------- nvidia-smi -q -x (XML)


def _xml_text(node, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _xml_fabric(gpu_node) -> dict:
    node = gpu_node.find("fabric")
    if node is None:
        return _fabric()
    clique = _xml_text(node, "cliqueId") or _xml_text(node, "clique_id")
    cluster = _xml_text(node, "clusterUuid") or _xml_text(node, "cluster_uuid")
    return _fabric(
        state=normalise_fabric_state(_xml_text(node, "state")),
        status=_na(_xml_text(node, "status")),
        clique_id=_int_or_none(clique),
        cluster_uuid=_na(cluster),
    )


def _xml_mig_devices(gpu_node) -> list:
    devices = []
    for node in gpu_node.findall("mig_devices/mig_device"):
        devices.append(
            {
                "index": _int_or_none(_xml_text(node, "index")),
                "gpu_instance_id": _int_or_none(_xml_text(node, "gpu_instance_id")),
                "compute_instance_id": _int_or_none(_xml_text(node, "compute_instance_id")),
                "multiprocessor_count": _int_or_none(_xml_text(node, "device_attributes/shared/multiprocessor_count")),
                "memory_total_mib": parse_mib(_xml_text(node, "fb_memory_usage/total")),
            }
        )
    return devices


def parse_nvidia_smi_xml(text: str) -> dict:
    """Parse ``nvidia-smi -q -x``.

    Returns ``{driver_version, cuda_driver_version, attached_gpus, gpus}``; each GPU has the keys of
    a facts GPU record (numa_node and nvlink are None: the XML does not carry them) plus
    ``mig_devices`` (list of ``{index, gpu_instance_id, compute_instance_id, multiprocessor_count,
    memory_total_mib}``).
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise GpuFactsParseError("nvidia-smi -q -x output", f"not well-formed XML ({err})", text) from err
    if root.tag != "nvidia_smi_log":
        raise GpuFactsParseError("nvidia-smi -q -x output", f"root element is <{root.tag}>, not <nvidia_smi_log>", text)
    gpus = []
    for index, node in enumerate(root.findall("gpu")):
        gpus.append(
            _gpu(
                index,
                name=_na(_xml_text(node, "product_name")),
                uuid=_na(_xml_text(node, "uuid")),
                pci_bus_id=canonical_bus_id(_xml_text(node, "pci/pci_bus_id") or node.get("id")),
                memory_total_mib=parse_mib(_xml_text(node, "fb_memory_usage/total")),
                mig_mode=normalise_mig_mode(_xml_text(node, "mig_mode/current_mig")),
                mig_mode_pending=normalise_mig_mode(_xml_text(node, "mig_mode/pending_mig")),
                persistence_mode=parse_enabled(_xml_text(node, "persistence_mode")),
                fabric=_xml_fabric(node),
                mig_devices=_xml_mig_devices(node),
            )
        )
    return {
        "driver_version": _na(_xml_text(root, "driver_version")),
        "cuda_driver_version": _na(_xml_text(root, "cuda_version")),
        "attached_gpus": _int_or_none(_xml_text(root, "attached_gpus")),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- nvidia-smi -q (text)

_Q_VALUE_RE = re.compile(r"^(?P<key>\S.*?)\s+:\s?(?P<value>.*)$")
_Q_GPU_RE = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _q_tree(lines) -> dict:
    """Indentation tree of ``Key : value`` lines; a line without a value opens a section.

    A key repeated at the same level keeps its first value (only process lists repeat keys).
    """
    root: dict = {}
    stack = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        node = stack[-1][1]
        body = line.strip()
        match = _Q_VALUE_RE.match(body)
        if match:
            node.setdefault(match.group("key").strip(), match.group("value").strip())
        else:
            section: dict = {}
            if not isinstance(node.setdefault(body, section), dict):
                node[body] = section
            stack.append((indent, node[body]))
    return root


def _q_get(tree: dict, *path: str) -> str | None:
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, str) else None


def _q_gpu(index: int, bus_id: str, tree: dict) -> dict:
    fabric = tree.get("Fabric") if isinstance(tree.get("Fabric"), dict) else {}
    return _gpu(
        index,
        name=_na(_q_get(tree, "Product Name")),
        uuid=_na(_q_get(tree, "GPU UUID")),
        pci_bus_id=canonical_bus_id(_q_get(tree, "PCI", "Bus Id") or bus_id),
        memory_total_mib=parse_mib(_q_get(tree, "FB Memory Usage", "Total")),
        mig_mode=normalise_mig_mode(_q_get(tree, "MIG Mode", "Current")),
        mig_mode_pending=normalise_mig_mode(_q_get(tree, "MIG Mode", "Pending")),
        persistence_mode=parse_enabled(_q_get(tree, "Persistence Mode")),
        fabric=_fabric(
            state=normalise_fabric_state(_q_get(fabric, "State")),
            status=_na(_q_get(fabric, "Status")),
            clique_id=_int_or_none(_q_get(fabric, "CliqueId")),
            cluster_uuid=_na(_q_get(fabric, "ClusterUUID")),
        ),
        mig_devices=None,  # the text form's MIG device list is not parsed; use -q -x or -L
    )


def parse_nvidia_smi_q(text: str) -> dict:
    """Parse plain-text ``nvidia-smi -q`` (also ``-q -i N``); same shape as parse_nvidia_smi_xml.

    ``mig_devices`` is None for every GPU: the text form's MIG listing is not parsed.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    header: list = []
    blocks: list = []  # [(bus_id, lines)]
    for line in lines:
        match = _Q_GPU_RE.match(line)
        if match:
            blocks.append((match.group("bus"), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            header.append(line)
    head = _q_tree(line for line in header if not line.startswith("="))
    if not blocks and "Driver Version" not in head:
        raise GpuFactsParseError(
            "nvidia-smi -q output", "found neither a 'Driver Version' line nor a 'GPU <bus id>' section", text
        )
    return {
        "driver_version": _na(_q_get(head, "Driver Version")),
        "cuda_driver_version": _na(_q_get(head, "CUDA Version")),
        "attached_gpus": _int_or_none(_q_get(head, "Attached GPUs")),
        "gpus": [_q_gpu(index, bus, _q_tree(body)) for index, (bus, body) in enumerate(blocks)],
    }


# --------------------------------------------------------------------------- nvidia-smi -L / nvlink -s

_L_GPU_RE = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)]+)\)\s*$")
_L_MIG_RE = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s+\(UUID:\s*(?P<uuid>[^)]+)\)\s*$")


def parse_nvidia_smi_list(text: str) -> list:
    """Parse ``nvidia-smi -L``: ``[{index, name, uuid, mig_devices: [{index, profile, uuid}]}]``."""
    gpus: list = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or line.strip() == "No devices found.":
            continue
        gpu = _L_GPU_RE.match(line)
        mig = _L_MIG_RE.match(line)
        if gpu:
            gpus.append(
                {
                    "index": int(gpu.group("index")),
                    "name": gpu.group("name"),
                    "uuid": gpu.group("uuid").strip(),
                    "mig_devices": [],
                }
            )
        elif mig and gpus:
            gpus[-1]["mig_devices"].append(
                {"index": int(mig.group("index")), "profile": mig.group("profile"), "uuid": mig.group("uuid").strip()}
            )
        else:
            raise GpuFactsParseError("nvidia-smi -L output", f"unrecognised line {line.strip()!r}", text)
    return gpus


_NVLINK_LINK_RE = re.compile(r"^\s*Link\s+(\d+):\s*(.*)$")


def parse_nvidia_smi_nvlink_status(text: str) -> list:
    """Parse ``nvidia-smi nvlink -s``: ``[{index, uuid, active_links}]``.

    A link counts as active when it reports a bandwidth (``Link 0: 26.562 GB/s``); ``<inactive>``
    does not. A GPU whose header says it has no NVLink, or that all links are inactive, has 0;
    a header with nothing after it has None (the driver said nothing).
    """
    gpus: list = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        header = re.match(r"^GPU\s+(\d+):.*?\(UUID:\s*([^)]+)\)(.*)$", line)
        if header:
            tail = header.group(3).lower()
            said_none = "nvlink" in tail and ("not" in tail or "inactive" in tail)
            active = 0 if said_none else None
            gpus.append({"index": int(header.group(1)), "uuid": header.group(2).strip(), "active_links": active})
            continue
        link = _NVLINK_LINK_RE.match(line)
        if link and gpus:
            gpu = gpus[-1]
            gpu["active_links"] = (gpu["active_links"] or 0) + (1 if "/s" in link.group(2) else 0)
    return gpus


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
    return {"name": _na(fields.get("Model")), "uuid": _na(fields.get("GPU UUID"))}


def parse_fabricmanager_version(text: str) -> str | None:
    """``nv-fabricmanager --version`` ("Fabric Manager version is : 535.104.05") -> "535.104.05"."""
    match = re.search(r"version\s+is\s*:\s*(\d+\.\d+(?:\.\d+)?)", text or "", re.IGNORECASE)
    if not match:
        match = re.search(r"\b(\d+\.\d+\.\d+)\b", text or "")
    return match.group(1) if match else None


# --------------------------------------------------------------------------- sysfs / procfs readers


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def read_numa_node(sysfs_root: str, bus_id: str | None) -> int | None:
    """NUMA node of a PCI device from sysfs; -1 (no NUMA affinity) and absence are None."""
    name = sysfs_bus_id(bus_id)
    if name is None:
        return None
    value = _int_or_none(_read(os.path.join(sysfs_root, "bus", "pci", "devices", name, "numa_node")))
    return value if value is not None and value >= 0 else None


def scan_pci(sysfs_root: str) -> dict:
    """NVIDIA devices under ``<sysfs_root>/bus/pci/devices``.

    Returns ``{"gpus": [...], "nvswitches": [...]}``, each item ``{pci_bus_id, device_id, pci_class,
    numa_node}``; GPUs are display (0x0300xx) or 3D (0x0302xx) controllers, NVSwitches are
    "other bridge" (0x0680xx) devices, both with vendor 0x10de. Sorted by bus id, as nvidia-smi orders.
    """
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    found: dict = {"gpus": [], "nvswitches": []}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return found
    for name in names:
        vendor = _int_or_none(_read(os.path.join(base, name, "vendor")))
        pci_class = _int_or_none(_read(os.path.join(base, name, "class")))
        if vendor != NVIDIA_PCI_VENDOR or pci_class is None:
            continue
        kind = {PCI_CLASS_VGA: "gpus", PCI_CLASS_3D: "gpus", PCI_CLASS_BRIDGE_OTHER: "nvswitches"}.get(pci_class >> 8)
        if kind is None:
            continue  # HD audio, USB-C controller and other functions of the card
        found[kind].append(
            {
                "pci_bus_id": canonical_bus_id(name),
                "device_id": _read(os.path.join(base, name, "device")),
                "pci_class": f"0x{pci_class:06x}",
                "numa_node": read_numa_node(sysfs_root, name),
            }
        )
    found["gpus"].sort(key=lambda item: item["pci_bus_id"] or "")
    found["nvswitches"].sort(key=lambda item: item["pci_bus_id"] or "")
    return found


def read_proc_driver(proc_root: str) -> dict:
    """``{"loaded": bool, "driver_version": str|None, "gpus": {bus_id: {name, uuid}}}`` from /proc/driver/nvidia."""
    base = os.path.join(proc_root, "driver", "nvidia")
    version_text = _read(os.path.join(base, "version"))
    gpus = {}
    try:
        names = os.listdir(os.path.join(base, "gpus"))
    except OSError:
        names = []
    for name in names:
        info = _read(os.path.join(base, "gpus", name, "information"))
        if info is not None and canonical_bus_id(name):
            gpus[canonical_bus_id(name)] = parse_proc_gpu_information(info)
    return {
        "loaded": version_text is not None,
        "driver_version": parse_proc_driver_version(version_text or ""),
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- NVML backend


def import_pynvml():
    """The real pynvml module (nvidia-ml-py); ImportError when it is not installed on the host."""
    return importlib.import_module("pynvml")


def _nvml_errors(nvml, *names: str) -> tuple:
    return tuple(cls for cls in (getattr(nvml, name, None) for name in names) if isinstance(cls, type))


class _NvmlCalls:
    """Per-field NVML calls: "not supported" answers become None, other NVML errors a warning and None."""

    def __init__(self, nvml, warnings: list) -> None:
        self.nvml = nvml
        self.warnings = warnings
        self.quiet = _nvml_errors(nvml, "NVMLError_NotSupported", "NVMLError_FunctionNotFound")
        self.not_supported = _nvml_errors(nvml, "NVMLError_NotSupported")

    def call(self, label: str, name: str, *args):
        func = getattr(self.nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except self.nvml.NVMLError as err:
            if not isinstance(err, self.quiet):
                self.warnings.append(f"NVML {name} for {label} failed: {err}; the field is reported as null")
            return None

    def mig_modes(self, label: str, handle) -> tuple:
        try:
            current, pending = self.nvml.nvmlDeviceGetMigMode(handle)
        except self.nvml.NVMLError as err:
            if isinstance(err, self.not_supported):
                return MIG_NOT_SUPPORTED, MIG_NOT_SUPPORTED
            if not isinstance(err, self.quiet):
                self.warnings.append(f"NVML nvmlDeviceGetMigMode for {label} failed: {err}")
            return None, None
        enable = getattr(self.nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        return (
            MIG_ENABLED if current == enable else MIG_DISABLED,
            MIG_ENABLED if pending == enable else MIG_DISABLED,
        )

    def nvlink_active(self, label: str, handle) -> int | None:
        """Active NVLink links over range(NVML_NVLINK_MAX_LINKS); None when no link answered."""
        active, answered, failure = 0, False, None
        expected = (*self.quiet, *_nvml_errors(self.nvml, "NVMLError_InvalidArgument"))
        enabled = getattr(self.nvml, "NVML_FEATURE_ENABLED", 1)
        for link in range(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                state = self.nvml.nvmlDeviceGetNvLinkState(handle, link)
            except self.nvml.NVMLError as err:
                if not isinstance(err, expected) and failure is None:
                    failure = err
                continue
            answered = True
            active += 1 if state == enabled else 0
        if failure is not None:
            self.warnings.append(f"NVML nvmlDeviceGetNvLinkState for {label} failed: {failure}")
        return active if answered else None

    def fabric(self, label: str, handle) -> dict:
        """nvmlDeviceGetGpuFabricInfoV (v2 struct) where available, else the older nvmlDeviceGetGpuFabricInfo."""
        nvml = self.nvml
        for func_name, struct_name in (
            ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
            ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
        ):
            func, struct = getattr(nvml, func_name, None), getattr(nvml, struct_name, None)
            if func is None or struct is None:
                continue
            info = struct()
            try:
                func(handle, ctypes.byref(info))
            except nvml.NVMLError as err:
                if isinstance(err, _nvml_errors(nvml, "NVMLError_FunctionNotFound")):
                    continue
                if isinstance(err, self.not_supported):
                    return _fabric(state=FABRIC_NOT_SUPPORTED)
                self.warnings.append(f"NVML {func_name} for {label} failed: {err}")
                return _fabric()
            return self._fabric_from_struct(info)
        return _fabric()

    def _fabric_from_struct(self, info) -> dict:
        state = _NVML_FABRIC_STATES.get(int(info.state), f"unknown ({int(info.state)})")
        if state == FABRIC_NOT_SUPPORTED:
            return _fabric(state=state)
        status = int(info.status)
        if status == 0:
            status_text = "Success"
        else:
            try:
                status_text = str(self.nvml.NVMLError(status))
            except Exception:  # rendering the code is best effort: fall back to the number
                status_text = f"NVML error {status}"
        raw_uuid = bytes(bytearray(info.clusterUuid)).hex()
        cluster = "-".join((raw_uuid[:8], raw_uuid[8:12], raw_uuid[12:16], raw_uuid[16:20], raw_uuid[20:]))
        clique = getattr(info, "cliqueId", getattr(info, "partitionId", None))
        return _fabric(state=state, status=status_text, clique_id=clique, cluster_uuid=cluster)


def _nvml_cuda_version(calls: _NvmlCalls) -> str | None:
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        value = calls.call("the system", name)
        if value:
            return cuda_version_from_int(value)
    return None


def _nvml_gpu(calls: _NvmlCalls, index: int) -> dict:
    nvml = calls.nvml
    label = f"GPU {index}"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as err:
        calls.warnings.append(f"NVML nvmlDeviceGetHandleByIndex({index}) failed: {err}; only its index is reported")
        return _gpu(index)
    pci = calls.call(label, "nvmlDeviceGetPciInfo", handle)
    memory = calls.call(label, "nvmlDeviceGetMemoryInfo", handle)
    persistence = calls.call(label, "nvmlDeviceGetPersistenceMode", handle)
    mig_mode, mig_pending = calls.mig_modes(label, handle)
    return _gpu(
        index,
        name=_text(calls.call(label, "nvmlDeviceGetName", handle)),
        uuid=_text(calls.call(label, "nvmlDeviceGetUUID", handle)),
        pci_bus_id=canonical_bus_id(_text(getattr(pci, "busId", None))),
        memory_total_mib=int(memory.total) // _MIB if memory is not None else None,
        mig_mode=mig_mode,
        mig_mode_pending=mig_pending,
        persistence_mode=None if persistence is None else persistence == getattr(nvml, "NVML_FEATURE_ENABLED", 1),
        nvlink=calls.nvlink_active(label, handle),
        fabric=calls.fabric(label, handle),
    )


def gather_nvml(nvml, warnings: list) -> dict:
    """Everything through NVML in one session; nvmlShutdown always runs once nvmlInit succeeded."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        expected = _nvml_errors(nvml, "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
        if not isinstance(err, expected):
            warnings.append(f"nvmlInit failed: {err}; falling back to the next backend")
        raise BackendUnavailable(f"nvmlInit failed: {err}") from err
    try:
        calls = _NvmlCalls(nvml, warnings)
        driver = _text(calls.call("the system", "nvmlSystemGetDriverVersion"))
        cuda = _nvml_cuda_version(calls)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            warnings.append(f"nvmlDeviceGetCount failed: {err}; falling back to the next backend")
            raise BackendUnavailable(f"nvmlDeviceGetCount failed: {err}") from err
        gpus = [_nvml_gpu(calls, index) for index in range(count)]
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            warnings.append(f"nvmlShutdown failed: {err}")
    return {"source": SOURCE_NVML, "driver_version": driver, "cuda_driver_version": cuda, "gpus": gpus}


# --------------------------------------------------------------------------- nvidia-smi backend


def gather_nvidia_smi(run, which, notes: list) -> dict:
    """``nvidia-smi -q -x`` once for all GPUs, then ``nvidia-smi nvlink -s`` once for link counts."""
    binary = which("nvidia-smi")
    if not binary:
        raise BackendUnavailable("nvidia-smi is not in PATH")
    rc, out, err = run([binary, "-q", "-x"])
    if rc != 0:
        message = " ".join((out or err or "").split())[:500]
        raise BackendUnavailable(f"'nvidia-smi -q -x' exited {rc}: {message}")
    parsed = parse_nvidia_smi_xml(out)
    gpus = []
    for gpu in parsed["gpus"]:
        record = dict(gpu)
        record.pop("mig_devices", None)
        gpus.append(record)
    if parsed["attached_gpus"] is not None and parsed["attached_gpus"] != len(gpus):
        notes.append(f"nvidia-smi reports {parsed['attached_gpus']} attached GPUs but lists {len(gpus)}")
    if gpus:
        rc, out, err = run([binary, "nvlink", "-s"])
        if rc == 0:
            by_uuid = {item["uuid"]: item["active_links"] for item in parse_nvidia_smi_nvlink_status(out)}
            for record in gpus:
                record["nvlink"] = by_uuid.get(record["uuid"])
        else:
            notes.append(f"'nvidia-smi nvlink -s' exited {rc}; nvlink is null")
    return {
        "source": SOURCE_NVIDIA_SMI,
        "driver_version": parsed["driver_version"],
        "cuda_driver_version": parsed["cuda_driver_version"],
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- PCI backend


def gather_pci(pci: dict, proc: dict) -> dict:
    """GPUs seen on the PCI bus; names and UUIDs from /proc/driver/nvidia when the module is loaded."""
    gpus = []
    for index, device in enumerate(pci["gpus"]):
        info = proc["gpus"].get(device["pci_bus_id"], {})
        gpus.append(_gpu(index, name=info.get("name"), uuid=info.get("uuid"), pci_bus_id=device["pci_bus_id"]))
    return {
        "source": SOURCE_PCI if gpus else SOURCE_NONE,
        "driver_version": proc["driver_version"],
        "cuda_driver_version": None,
        "gpus": gpus,
    }


# --------------------------------------------------------------------------- fabric manager + orchestration


def fabric_manager_facts(gpus: list, nvswitch_count: int, run, which, service: str) -> dict:
    """Is Fabric Manager required (NVSwitch on PCI, or a GPU reporting fabric state), and its state.

    The service state (``systemctl is-active``) and version (``nv-fabricmanager --version``) are only
    asked for where FM is required, to keep the common path to the GPU query alone.
    """
    states = [gpu["fabric"]["state"] for gpu in gpus]
    required = nvswitch_count > 0 or any(state in FABRIC_ACTIVE_STATES for state in states)
    facts = {
        "required": bool(required),
        "nvswitch_count": nvswitch_count,
        "state": aggregate_fabric_state(states),
        "service_state": None,
        "version": None,
    }
    if not required:
        return facts
    systemctl = which("systemctl")
    if systemctl:
        _rc, out, _err = run([systemctl, "is-active", service])
        facts["service_state"] = (out or "").strip().splitlines()[0] if (out or "").strip() else None
    binary = which("nv-fabricmanager")
    if binary:
        _rc, out, err = run([binary, "--version"])
        facts["version"] = parse_fabricmanager_version(f"{out or ''}\n{err or ''}")
    return facts


# --------------------------------------------------------------------------- topology (nvidia-smi topo -m)


def check_gpus_per_job(gpus_per_job) -> None:
    """Raise GpuFactsError for a job size below 1 (None means "no placements asked for")."""
    problem = gpus_per_job_problem(gpus_per_job)
    if problem:
        raise GpuFactsError(problem)


def gather_topology(source: str, count: int, run, which, gpus_per_job, warnings: list, notes: list) -> dict | None:
    """``nvidia-smi topo -m`` once, parsed by ``topology.parse_topology``; None (and a note why) when not read.

    Only a driver-backed source (nvml, nvidia-smi) with more than one GPU has a matrix worth reading.
    A failing command or an output without a matrix is a warning, not a failure: the GPU facts stand.
    The parser's warnings stay in the returned dict's ``warnings`` and are also added, prefixed
    ``topology:``, to the caller's ``warnings`` list (which the module shows as Ansible warnings).
    """
    if source not in (SOURCE_NVML, SOURCE_NVIDIA_SMI):
        notes.append(f"topology: not read because source is {source}: `nvidia-smi topo -m` needs a working driver")
        return None
    if count < _TOPOLOGY_MIN_GPUS:
        plural = "" if count == 1 else "s"
        notes.append(f"topology: not read because {source} lists {count} GPU{plural}: a matrix needs two or more")
        return None
    binary = which("nvidia-smi")
    if not binary:
        notes.append("topology: not read because nvidia-smi is not in PATH (NVML answered without it)")
        return None
    rc, out, err = run([binary, "topo", "-m"])
    if rc != 0:
        message = " ".join((out or err or "").split())[:500]
        warnings.append(
            f"`nvidia-smi topo -m` exited {rc}: {message}. Expected the topology matrix of {count} GPUs; "
            "topology is null, check that `nvidia-smi topo -m` works on this host"
        )
        notes.append(f"topology: not read because `nvidia-smi topo -m` exited {rc}")
        return None
    topology = parse_topology(out, gpus_per_job)
    if not topology["gpus"]:
        warnings.append(
            f"{topology['warnings'][0]}. Expected the output of `nvidia-smi topo -m` for {count} GPUs; "
            f"topology is null, report this output so the parser can follow. Raw output:\n{_shorten(out or '')}"
        )
        notes.append("topology: not read because `nvidia-smi topo -m` printed no matrix")
        return None
    if len(topology["gpus"]) != count:
        notes.append(f"topology: the matrix shows {len(topology['gpus'])} GPUs, {source} lists {count}")
    warnings.extend(f"topology: {warning}" for warning in topology["warnings"])
    return topology


# what a pynvml whose API differs from the one written against raises (renamed fields, changed signatures)
_PYNVML_MISMATCH = (AttributeError, TypeError, ValueError, ctypes.ArgumentError)


def _try_backend(name: str, nvml_loader, run, which, warnings: list, notes: list) -> dict:
    if name == SOURCE_NVML:
        try:
            nvml = nvml_loader()
        except ImportError as err:
            raise BackendUnavailable(f"pynvml is not importable ({err}); install nvidia-ml-py to use NVML") from err
        try:
            return gather_nvml(nvml, warnings)
        except _PYNVML_MISMATCH as err:
            # an nvidia-ml-py release whose API differs from what this module expects: nvidia-smi can still answer
            warnings.append(f"the NVML backend raised {type(err).__name__}: {err}; falling back to nvidia-smi")
            raise BackendUnavailable(f"pynvml API mismatch ({type(err).__name__}: {err})") from err
    return gather_nvidia_smi(run, which, notes)


def gather_gpu_facts(  # noqa: PLR0913 -- each host boundary is injected (nvml, run, which, /sys, /proc) for tests
    backend: str = "auto",
    nvml_loader=None,
    run=None,
    which=None,
    sysfs_root: str = "/sys",
    proc_root: str = "/proc",
    fabric_manager_service: str = "nvidia-fabricmanager",
    *,
    topology: bool = False,
    gpus_per_job: int | None = None,
) -> tuple:
    """All GPU facts in one pass. Returns ``(facts, warnings)``.

    ``backend`` is ``auto`` (nvml, then nvidia-smi, then pci) or one backend name; a named backend
    that cannot answer raises GpuFactsError instead of falling back.
    ``topology``: also read ``nvidia-smi topo -m`` once (see ``gather_topology``) into ``facts["topology"]``,
    which is None when not asked for or not read. ``gpus_per_job`` goes to ``parse_topology``.
    """
    check_gpus_per_job(gpus_per_job)
    nvml_loader = nvml_loader or import_pynvml
    run = run or (lambda argv: (127, "", f"no command runner given for {argv[0]}"))
    which = which or (lambda name: None)
    warnings: list = []
    notes: list = []
    pci = scan_pci(sysfs_root)
    proc = read_proc_driver(proc_root)
    order = [name for name in (SOURCE_NVML, SOURCE_NVIDIA_SMI) if backend in ("auto", name)]
    result = None
    for name in order:
        try:
            result = _try_backend(name, nvml_loader, run, which, warnings, notes)
            break
        except BackendUnavailable as err:
            if backend != "auto":
                raise GpuFactsError(
                    f"backend {name} cannot answer on this host: {err}. Expected it to work because "
                    f"backend={name} was asked for; use backend=auto to fall back, or fix the cause above"
                ) from err
            notes.append(f"{name}: {err}")
    if result is None:
        result = gather_pci(pci, proc)
    gpus = result["gpus"]
    for gpu in gpus:
        gpu["numa_node"] = read_numa_node(sysfs_root, gpu["pci_bus_id"])
    if result["source"] in (SOURCE_NVML, SOURCE_NVIDIA_SMI) and len(pci["gpus"]) > len(gpus):
        notes.append(
            f"{result['source']} lists {len(gpus)} GPUs but the PCI bus shows {len(pci['gpus'])} NVIDIA "
            "display/3D controllers (excluded, unbound or hidden from this namespace?)"
        )
    facts = {
        "present": bool(gpus),
        "count": len(gpus),
        "source": result["source"],
        "driver_version": result["driver_version"],
        "cuda_driver_version": result["cuda_driver_version"],
        "driver_loaded": bool(result["source"] in (SOURCE_NVML, SOURCE_NVIDIA_SMI) or proc["loaded"]),
        "gpus": gpus,
        "fabric_manager": fabric_manager_facts(gpus, len(pci["nvswitches"]), run, which, fabric_manager_service),
        "topology": None,
        "notes": notes,
    }
    if topology:
        facts["topology"] = gather_topology(result["source"], len(gpus), run, which, gpus_per_job, warnings, notes)
    return facts, warnings
