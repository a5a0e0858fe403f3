# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts from ``nvidia-smi``: the backend (``-q -x``, then ``nvlink -s``) and the parsers of its outputs, also
``-q`` text and ``nvlink -e`` for gpu_health. Every parser removes terminal control sequences first
(``text.strip_terminal``); an error quotes the text as it came."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    SOURCE_NVIDIA_SMI,
    BackendUnavailable,
    GpuFactsParseError,
    canonical_bus_id,
    fabric_record,
    gpu_record,
    int_or_none,
    normalise_fabric_state,
    normalise_mig_mode,
    parse_flag,
    parse_mib,
    value_or_none,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.text import one_line, strip_terminal

# --------------------------------------------------------------------------- one GPU, from either output

# A GPU record's fields and where each output prints them: (field, normaliser, `-q -x` XML path, `-q` section path).
_GPU_FIELDS = (
    ("name", value_or_none, "product_name", ("Product Name",)),
    ("uuid", value_or_none, "uuid", ("GPU UUID",)),
    ("memory_total_mib", parse_mib, "fb_memory_usage/total", ("FB Memory Usage", "Total")),
    ("mig_mode", normalise_mig_mode, "mig_mode/current_mig", ("MIG Mode", "Current")),
    ("mig_mode_pending", normalise_mig_mode, "mig_mode/pending_mig", ("MIG Mode", "Pending")),
    ("persistence_mode", parse_flag, "persistence_mode", ("Persistence Mode",)),
)
_FABRIC_FIELDS = (
    ("state", normalise_fabric_state, "fabric/state", ("Fabric", "State")),
    ("status", value_or_none, "fabric/status", ("Fabric", "Status")),
    ("clique_id", int_or_none, "fabric/cliqueId", ("Fabric", "CliqueId")),
    ("cluster_uuid", value_or_none, "fabric/clusterUuid", ("Fabric", "ClusterUUID")),
)


def _smi_gpu(index: int, bus_id: str | None, read) -> dict:
    """The facts GPU record of one GPU of either output; ``read(xml_path, q_path)`` is that output's raw text of a
    field, or None (numa_node, cpu_affinity and nvlink stay None: neither output carries them)."""

    def fields(table) -> dict:
        return {name: normalise(read(xml_path, q_path)) for name, normalise, xml_path, q_path in table}

    return gpu_record(
        index,
        pci_bus_id=canonical_bus_id(bus_id),
        fabric=fabric_record(**fields(_FABRIC_FIELDS)),
        **fields(_GPU_FIELDS),
    )


# --------------------------------------------------------------------------- nvidia-smi -q -x (XML)


def _xml_text(node, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def parse_nvidia_smi_xml(text: str) -> dict:
    """Parse ``nvidia-smi -q -x``: ``{driver_version, cuda_driver_version, attached_gpus, gpus}``, each GPU a facts
    GPU record (``_smi_gpu``)."""
    try:
        root = ET.fromstring(strip_terminal(text))
    except ET.ParseError as err:
        raise GpuFactsParseError("nvidia-smi -q -x output", f"not well-formed XML ({err})", text) from err
    if root.tag != "nvidia_smi_log":
        raise GpuFactsParseError("nvidia-smi -q -x output", f"root element is <{root.tag}>, not <nvidia_smi_log>", text)
    gpus = [
        _smi_gpu(
            index,
            _xml_text(node, "pci/pci_bus_id") or node.get("id"),
            lambda xml_path, _q_path, node=node: _xml_text(node, xml_path),
        )
        for index, node in enumerate(root.findall("gpu"))
    ]
    return {
        "driver_version": value_or_none(_xml_text(root, "driver_version")),
        "cuda_driver_version": value_or_none(_xml_text(root, "cuda_version")),
        "attached_gpus": int_or_none(_xml_text(root, "attached_gpus")),
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


def q_get(tree: dict, *path: str) -> str | None:
    """The value at ``path`` in a ``-q`` section tree, or None (also when ``path`` is a section)."""
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, str) else None


def q_gpu(index: int, bus_id: str, tree: dict) -> dict:
    """The facts GPU record of one ``-q`` GPU section (``split_nvidia_smi_q``'s tree)."""
    return _smi_gpu(index, q_get(tree, "PCI", "Bus Id") or bus_id, lambda _xml_path, q_path: q_get(tree, *q_path))


def split_nvidia_smi_q(text: str) -> tuple:
    """``nvidia-smi -q`` text as ``(header tree, [(bus id, GPU section tree), ...])``, in output order.

    Raises GpuFactsParseError when the text has neither a ``Driver Version`` line nor a ``GPU <bus id>`` section.
    """
    lines = strip_terminal(text).replace("\r", "\n").split("\n")
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
    return head, [(bus, _q_tree(body)) for bus, body in blocks]


# --------------------------------------------------------------------------- nvidia-smi nvlink -s / -e

_NVLINK_LINK_RE = re.compile(r"^\s*Link\s+(\d+):\s*(.*)$")
_NVLINK_GPU_RE = re.compile(r"^GPU\s+(\d+):(?:.*?\(UUID:\s*([^)]+)\))?(.*)$")
_NVLINK_ERROR_RE = re.compile(r"^(?P<name>[A-Za-z ]+?)\s+Errors?:\s*(?P<value>\d+)\s*$", re.IGNORECASE)


def parse_nvidia_smi_nvlink(text: str) -> list:
    """Parse ``nvidia-smi nvlink -s`` or ``nvlink -e``, link by link: ``[{index, uuid, said_none, links, counters}]``.

    ``links`` (``-s``): link -> active, when it reports a bandwidth (``Link 0: 26.562 GB/s``), not ``<inactive>``;
    ``said_none``: the GPU's header says it has no NVLink, or that all its links are inactive. ``counters`` (``-e``,
    ``Link <n>: <Name> Errors: <count>``): the name lower-cased (``replay``, ``recovery``, ``crc``, or whatever else
    the driver prints) -> its total over the GPU's links. ``uuid`` is None where the header shows none.
    """
    gpus: list = []
    for line in strip_terminal(text).splitlines():
        header = _NVLINK_GPU_RE.match(line)
        link = _NVLINK_LINK_RE.match(line)
        if header:
            tail = header.group(3).lower()
            gpu = {"index": int(header.group(1)), "uuid": (header.group(2) or "").strip() or None, "links": {}}
            said_none = "nvlink" in tail and ("not" in tail or "inactive" in tail)
            gpus.append({**gpu, "said_none": said_none, "counters": {}})
        elif link and gpus:
            counter = _NVLINK_ERROR_RE.match(link.group(2).strip())
            if counter:
                name = counter.group("name").strip().lower()
                gpus[-1]["counters"][name] = gpus[-1]["counters"].get(name, 0) + int(counter.group("value"))
            else:
                gpus[-1]["links"][int(link.group(1))] = "/s" in link.group(2)
    return gpus


def active_links(gpu: dict) -> int | None:
    """Active links of one ``parse_nvidia_smi_nvlink`` GPU of ``nvlink -s``: 0 where its header says it has none, None
    where the driver said nothing (a header with no links after it)."""
    return sum(gpu["links"].values()) if gpu["links"] else (0 if gpu["said_none"] else None)


# --------------------------------------------------------------------------- nvidia-smi backend


def gather_nvidia_smi(binary: str, run, notes: list) -> dict:
    """``nvidia-smi -q -x`` once for all GPUs, then ``nvidia-smi nvlink -s`` once for link counts."""
    rc, out, err = run([binary, "-q", "-x"])
    if rc != 0:
        message = one_line(out or err)
        raise BackendUnavailable(f"'nvidia-smi -q -x' exited {rc}: {message}")
    parsed = parse_nvidia_smi_xml(out)
    gpus = parsed["gpus"]
    if parsed["attached_gpus"] is not None and parsed["attached_gpus"] != len(gpus):
        notes.append(f"nvidia-smi reports {parsed['attached_gpus']} attached GPUs but lists {len(gpus)}")
    if gpus:
        rc, out, err = run([binary, "nvlink", "-s"])
        if rc == 0:
            by_uuid = {gpu["uuid"]: active_links(gpu) for gpu in parse_nvidia_smi_nvlink(out)}
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
