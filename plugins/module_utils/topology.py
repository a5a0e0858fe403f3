"""Read the text of ``nvidia-smi topo -m`` into GPU topology facts.

Pure string processing (no regular expressions, no subprocess): the caller hands in the text, which may
come from the host, from a capture in an inventory, or from a test. The parser never raises on bad input;
it reads what is there and explains what it could not read in ``warnings``. Terminal control sequences are
removed first (``text.strip_terminal``): driver 580 wraps the header in underline codes even into a pipe,
``\t\x1b[4mGPU0\tCPU Affinity ...\x1b[0m``; a warning that quotes the text quotes it as it came.

The decisions (connection ranks, NVLink peers, nearest NICs, NUMA, placements, the ``-mp`` warning) are the
documented behaviour of gpu_facts' ``topology: true`` (its DOCUMENTATION and RETURN), not repeated here. One is not
visible there: when the text ends inside the matrix, the last field of the last row is ignored, because it may be
cut (``0-23,48-71`` cut to ``0-23,4`` still looks valid).
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.cpu_list import ascii_digits, is_cpu_list
from ansible_collections.gpuops.cluster.plugins.module_utils.text import cut_line, strip_terminal

_RANK = {"X": 0, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6, "SOC": 6}
_NV_RANK = 1
_NV_PREFIX = "NV"

_INFO_COLUMNS = (
    (("CPU", "Affinity"), "cpu_affinity"),
    (("NUMA", "Affinity"), "numa_affinity"),
    (("GPU", "NUMA", "ID"), "gpu_numa_id"),
)
_INFO_STARTS = frozenset(words[0] for words, _key in _INFO_COLUMNS)
_MP_FLAGS = frozenset(("-mp", "--matrix_pcie"))
_NOT_AVAILABLE = "N/A"
_SHOW_NAMES = 12  # how many names a warning lists before "and N more"
_CLIQUE_BUDGET = 200_000  # search steps for placements; far above what 16 or 72 GPUs need
_MAX_DEVICES = 512  # header columns read; a real matrix has tens (keeps damaged input from costing n**2)


def _numbered(label: str, prefix: str) -> int | None:
    """The number of ``<prefix><ASCII digits>`` (``GPU3`` -> 3, ``NIC0`` -> 0, ``NV12`` -> 12); else None."""
    number = label[len(prefix) :]
    return int(number) if label.startswith(prefix) and ascii_digits(number) else None


def nvlink_count(cell: str) -> int | None:
    """``NV12`` -> 12; anything else (``NV0`` too) -> None."""
    return _numbered(cell, _NV_PREFIX) or None


def link_rank(cell: str) -> int | None:
    """Rank of a matrix cell in the order above (0 = self, smaller = closer); None when not a link type."""
    return _NV_RANK if nvlink_count(cell) else _RANK.get(cell)


def gpu_index(label: str) -> int | None:
    return _numbered(label, "GPU")


def _is_nic_label(label: str) -> bool:
    return _numbered(label, "NIC") is not None


def _names(names: list[str]) -> str:
    if len(names) <= _SHOW_NAMES:
        return ", ".join(names)
    return ", ".join(names[:_SHOW_NAMES]) + f" and {len(names) - _SHOW_NAMES} more"


# --------------------------------------------------------------------------------------------- reading


def _find_header(lines: list[str]) -> int | None:
    """Index of the header line: first token ``GPU<n>``, second token not a link type."""
    for number, line in enumerate(lines):
        tokens = line.split()
        if tokens and gpu_index(tokens[0]) is not None and (len(tokens) == 1 or link_rank(tokens[1]) is None):
            return number
    return None


def _match_info(tokens: list[str], start: int) -> tuple[str, int] | None:
    for words, key in _INFO_COLUMNS:
        if tuple(tokens[start : start + len(words)]) == words:
            return key, start + len(words)
    return None


def _read_header(line: str, warnings: list[str]) -> tuple[list[str], list[str]]:
    """Device column names, then info column keys (cpu_affinity, numa_affinity, gpu_numa_id, or unknown)."""
    tokens = line.split()
    devices: list[str] = []
    position = 0
    while position < len(tokens) and tokens[position] not in _INFO_STARTS:
        devices.append(tokens[position])
        position += 1
    info: list[str] = []
    while position < len(tokens):
        known = _match_info(tokens, position)
        if known:
            info.append(known[0])
            position = known[1]
            continue
        start = position
        position += 1
        while position < len(tokens) and _match_info(tokens, position) is None:
            position += 1
        name = " ".join(tokens[start:position])
        info.append(name)
        warnings.append(f"unknown header column {name!r}: its values are ignored")
    return devices, info


class _Capture:
    """What the text says (read_capture), then the links and GPU fields read from its rows (interpret)."""

    def __init__(self) -> None:
        self.devices: list[str] = []  # header device columns, in order
        self.info: list[str] = []  # header info columns, in order
        self.rows: dict[str, list[str]] = {}  # row label -> tokens after the label, in text order
        self.legend: set[str] = set()  # codes seen in "Legend:" (X, SYS, ..., NV#)
        self.nic_names: dict[str, str] = {}  # NIC0 -> mlx5_0
        self.mp_command = False  # "-mp" on a command line above the matrix
        self.last_row: str | None = None  # label of a row that is the last non-blank line of the text
        self.cut_row: str | None = None  # last_row, once its last field was dropped as possibly cut
        self.links: dict[tuple[str, str], str] = {}  # (row label, column label) -> cell
        self.gpus: list[str] = []  # GPU labels, sorted by index
        self.nics: list[str] = []  # NIC labels, in column order then row order
        self.fields: dict[str, dict[str, str]] = {}  # GPU label -> info key -> raw value

    def link(self, first: str, second: str) -> str | None:
        cell = self.links.get((first, second))
        return cell if cell is not None else self.links.get((second, first))


def _read_sections(lines: list[str], header: int, capture: _Capture, warnings: list[str]) -> None:
    section = "matrix"
    last_nonblank = max((n for n, line in enumerate(lines) if line.strip()), default=header)
    known_labels = set(capture.devices)
    for number in range(header + 1, len(lines)):
        text = lines[number].strip()
        if not text:
            continue
        if text.startswith("NIC Legend"):
            section = "nic_legend"
        elif text.startswith("Legend"):
            section = "legend"
        elif section == "legend":
            code, sep, _meaning = text.partition("=")
            if sep:
                capture.legend.add(code.strip())
        elif section == "nic_legend":
            key, sep, name = text.partition(":")
            if sep and _is_nic_label(key.strip()) and name.strip():
                capture.nic_names[key.strip()] = name.strip()
        else:
            tokens = text.split()
            label = tokens[0]
            if not (label in known_labels or gpu_index(label) is not None or _is_nic_label(label)):
                warnings.append(f"line {number + 1} is not a matrix row, ignored: {cut_line(text)}")
            elif label in capture.rows:
                warnings.append(f"row {label} appears twice: the second one (line {number + 1}) is ignored")
            else:
                capture.rows[label] = tokens[1:]
                if number == last_nonblank:
                    capture.last_row = label


def read_capture(text: str, warnings: list[str]) -> _Capture | None:
    lines = text.splitlines()
    header = _find_header(lines)
    if header is None:
        return None
    capture = _Capture()
    capture.mp_command = any(_MP_FLAGS.intersection(line.split()) for line in lines[:header])
    capture.devices, capture.info = _read_header(lines[header], warnings)
    if len(capture.devices) > _MAX_DEVICES:
        warnings.append(f"the header names {len(capture.devices)} devices: only the first {_MAX_DEVICES} are read")
        del capture.devices[_MAX_DEVICES:]
    if len(set(capture.devices)) != len(capture.devices):
        warnings.append(f"the header names a device twice (damaged capture?): {cut_line(lines[header].strip())}")
    _read_sections(lines, header, capture, warnings)
    return capture


# ------------------------------------------------------------------------------------------ interpreting


def _devices(capture: _Capture, warnings: list[str]) -> tuple[list[str], list[str]]:
    """GPU labels sorted by index, and NIC labels: the header's columns, then rows that have none."""
    extra = [label for label in capture.rows if label not in capture.devices]
    if extra:
        warnings.append(
            f"rows {_names(extra)} have no column in the header (terminal-damaged capture?): "
            "their links to other rows' devices are unknown"
        )
    labels = [*capture.devices, *extra]
    gpus = sorted({label for label in labels if gpu_index(label) is not None}, key=lambda label: gpu_index(label) or 0)
    return gpus, [label for label in labels if gpu_index(label) is None]


def _read_row(label: str, tokens: list[str], capture: _Capture, warnings: list[str]) -> None:
    columns = capture.devices
    bad = []
    for column, cell in zip(columns, tokens):
        if link_rank(cell) is None:
            bad.append(f"{cell!r} under {column}")
        else:
            capture.links[(label, column)] = cell
    if bad:
        warnings.append(f"row {label}: cells that are not link types, ignored: {_names(bad)}")
    if label in columns and capture.links.get((label, label), "X") != "X":
        warnings.append(f"row {label} is misaligned: expected X under {label}, found {capture.links[(label, label)]}")
    values = tokens[len(columns) :]
    is_gpu = gpu_index(label) is not None
    if len(tokens) < len(columns):
        warnings.append(f"row {label} has {len(tokens)} of {len(columns)} link cells: the rest are unknown")
    elif is_gpu and len(values) != len(capture.info) and label != capture.cut_row:
        warnings.append(
            f"row {label} has {len(values)} affinity fields, the header names {len(capture.info)}: "
            "missing ones are unknown, extra ones ignored"
        )
    elif not is_gpu and values:
        warnings.append(f"row {label}: extra fields ignored: {cut_line(' '.join(values))}")
    if is_gpu:
        capture.fields[label] = dict(zip(capture.info, values))


def interpret(capture: _Capture, warnings: list[str]) -> None:
    capture.gpus, capture.nics = _devices(capture, warnings)
    missing = [label for label in capture.devices if label not in capture.rows]
    if missing:
        warnings.append(
            f"the matrix has no row for {_names(missing)} (capture truncated?): "
            "what only those rows say (GPU affinity, links between two of them) is unknown"
        )
        if capture.last_row is not None and capture.rows[capture.last_row]:
            cut = capture.rows[capture.last_row].pop()
            capture.cut_row = capture.last_row
            warnings.append(
                f"the text ends inside row {capture.last_row}: its last field {cut!r} is ignored, it may be cut"
            )
    for label in capture.rows:
        _read_row(label, capture.rows[label], capture, warnings)
    _check_symmetry(capture, warnings)


def _check_symmetry(capture: _Capture, warnings: list[str]) -> None:
    odd = []
    for (first, second), cell in capture.links.items():
        other = capture.links.get((second, first))
        if first < second and other is not None and other != cell:
            odd.append(f"{first}-{second} {cell}/{other}")
    if odd:
        warnings.append(f"the matrix is not symmetric (damaged capture?), a row's own cells win: {_names(odd)}")


# ------------------------------------------------------------------------------------------- conclusions


# an affinity field that gives no value: its warning, for all the GPUs whose field reads so
_NUMA_NA = "NUMA Affinity is N/A for {gpus}: numa_node is null"
_NUMA_MULTI = (
    "NUMA Affinity {raw!r} of {gpus} spans several NUMA nodes (VM or NPS setting?): "
    "numa_node is null, the text is kept in numa_affinity"
)
_NUMA_BAD = "NUMA Affinity {raw!r} of {gpus} is not a NUMA node (damaged capture?): numa_node is null"
_CPU_NA = "CPU Affinity is N/A for {gpus}: cpu_affinity is null"
_CPU_BAD = "CPU Affinity {raw!r} of {gpus} is not a CPU list (damaged capture?): cpu_affinity is null"


def _numa(label: str, raw: str | None, unread: dict[tuple[str, str], list[str]]) -> int | None:
    if raw is None:
        return None
    if ascii_digits(raw):
        return int(raw)
    text = _NUMA_NA if raw == _NOT_AVAILABLE else _NUMA_MULTI if is_cpu_list(raw) else _NUMA_BAD
    unread.setdefault((text, raw), []).append(label)
    return None


def _cpu_affinity(label: str, raw: str | None, unread: dict[tuple[str, str], list[str]]) -> str | None:
    if raw is None or is_cpu_list(raw):
        return raw
    unread.setdefault((_CPU_NA if raw == _NOT_AVAILABLE else _CPU_BAD, raw), []).append(label)
    return None


def _nearest_nics(capture: _Capture, gpu: str, names: dict[str, str]) -> tuple[list[str], str | None]:
    cells = [capture.link(gpu, nic) for nic in capture.nics]
    if not cells or None in cells:
        return [], None
    ranks = [link_rank(cell) or 0 for cell in cells if cell is not None]
    best = min(ranks)
    nearest = [names[nic] for nic, rank in zip(capture.nics, ranks) if rank == best]
    return nearest, next(cell for cell, rank in zip(cells, ranks) if rank == best)


def _domains(indexes: list[int], peers: dict[int, set[int]]) -> list[list[int]]:
    seen: set[int] = set()
    domains = []
    for start in indexes:
        if start in seen:
            continue
        stack, domain = [start], set()
        while stack:
            node = stack.pop()
            if node not in domain:
                domain.add(node)
                stack.extend(peers[node] - domain)
        seen |= domain
        domains.append(sorted(domain))
    return sorted(domains)


def _clique(candidates: list[int], peers: dict[int, set[int]], size: int, budget: list[int]) -> list[int] | None:
    """First (lowest-index) set of ``size`` candidates that are pairwise NVLinked; None if none."""

    def extend(chosen: list[int], start: int) -> list[int] | None:
        if len(chosen) == size:
            return chosen
        for position in range(start, len(candidates) - (size - len(chosen)) + 1):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            gpu = candidates[position]
            if all(gpu in peers[other] for other in chosen):
                found = extend([*chosen, gpu], position + 1)
                if found:
                    return found
        return None

    return extend([], 0)


def plan_placements(pools: list[list[int]], peers: dict[int, set[int]], size: int, warnings: list) -> list[list[int]]:
    """Greedy disjoint pairwise-NVLinked sets of ``size`` GPUs, from each pool in turn (each NUMA node's, then all)."""
    used: set[int] = set()
    placements: list[list[int]] = []
    budget = [_CLIQUE_BUDGET]
    for pool in pools:
        while True:
            found = _clique([gpu for gpu in pool if gpu not in used], peers, size, budget)
            if not found:
                break
            placements.append(found)
            used.update(found)
    if budget[0] < 0:
        warnings.append("placement search stopped early (too many combinations): more sets may exist")
    return sorted(placements)


def _mp_warning(capture: _Capture, gpu_count: int, has_nvlink: bool) -> str | None:
    if has_nvlink or gpu_count < 2:  # noqa: PLR2004 -- a pair needs two GPUs
        return None
    fix = "it shows no NVLink even where there is some; capture `nvidia-smi topo -m` instead"
    if capture.mp_command:
        return f"this is `nvidia-smi topo -mp` output (the command line says so): {fix}"
    if "NV#" in capture.legend:
        return None  # a complete `topo -m` legend: the GPUs really have no NVLink
    if "PIX" in capture.legend:
        return f"the legend has no NV# line, so this is `nvidia-smi topo -mp` output: {fix}"
    return (
        f"no NVLink between {gpu_count} GPUs and no complete legend to tell `topo -m` from "
        f"`nvidia-smi topo -mp` output, which may be what this is: {fix}"
    )


def _nic_names(capture: _Capture, warnings: list[str]) -> dict[str, str]:
    unnamed = [nic for nic in capture.nics if _is_nic_label(nic) and nic not in capture.nic_names]
    if unnamed:
        warnings.append(f"no NIC Legend entry for {_names(unnamed)}: those NICs keep their column names")
    return {nic: capture.nic_names.get(nic, nic) for nic in capture.nics}


def conclude(capture: _Capture, gpus_per_job: int | None, warnings: list[str]) -> dict:
    names = _nic_names(capture, warnings)
    label_of = {gpu_index(label) or 0: label for label in capture.gpus}
    indexes = sorted(label_of)
    peers: dict[int, set[int]] = {index: set() for index in indexes}
    unknown_pairs = []
    for position, first in enumerate(indexes):
        for second in indexes[position + 1 :]:
            cell = capture.link(label_of[first], label_of[second])
            if cell is None:
                unknown_pairs.append(f"GPU{first}-GPU{second}")
            elif nvlink_count(cell):
                peers[first].add(second)
                peers[second].add(first)
    pair_count = len(indexes) * (len(indexes) - 1) // 2
    all_to_all = bool(indexes) and sum(len(linked) for linked in peers.values()) == 2 * pair_count
    if unknown_pairs and sum(len(linked) for linked in peers.values()) == 2 * (pair_count - len(unknown_pairs)):
        warnings.append(f"nvlink_all_to_all is false because these GPU pairs are unknown: {_names(unknown_pairs)}")

    unread: dict[tuple[str, str], list[str]] = {}  # (warning, raw field) -> GPU labels
    gpus, numa = [], {}
    for index in indexes:
        label = label_of[index]
        fields = capture.fields.get(label, {})
        numa[index] = _numa(label, fields.get("numa_affinity"), unread)
        gpu_numa_id = fields.get("gpu_numa_id")
        nearest, nearest_link = _nearest_nics(capture, label, names)
        gpus.append(
            {
                "index": index,
                "cpu_affinity": _cpu_affinity(label, fields.get("cpu_affinity"), unread),
                "numa_node": numa[index],
                "numa_affinity": fields.get("numa_affinity"),
                "gpu_numa_id": int(gpu_numa_id) if gpu_numa_id and ascii_digits(gpu_numa_id) else None,
                "nvlink_peers": {
                    str(peer): nvlink_count(capture.link(label, label_of[peer]) or "") or 0
                    for peer in sorted(peers[index])
                },
                "nearest_nics": nearest,
                "nearest_nic_link": nearest_link,
            }
        )
    warnings.extend(text.format(raw=raw, gpus=_names(labels)) for (text, raw), labels in unread.items())
    if capture.fields and "numa_affinity" not in capture.info:
        warnings.append("no NUMA Affinity column (older nvidia-smi?): numa_node is null for every GPU")

    mp_warning = _mp_warning(capture, len(indexes), any(peers.values()))
    if mp_warning:
        warnings.append(mp_warning)

    nodes = sorted({node for node in numa.values() if node is not None})
    numa_groups = [{"numa_node": node, "gpus": [gpu for gpu in indexes if numa[gpu] == node]} for node in nodes]
    placements: list[list[int]] = []
    if gpus_per_job:
        pools = [group["gpus"] for group in numa_groups] + [indexes]
        placements = plan_placements(pools, peers, gpus_per_job, warnings)
        if not placements:
            warnings.append(f"no set of {gpus_per_job} pairwise NVLinked GPUs exists: placements is empty")
    return {
        "gpus": gpus,
        "nics": [names[nic] for nic in capture.nics],
        "nvlink_domains": _domains(indexes, peers),
        "nvlink_all_to_all": all_to_all,
        "numa_groups": numa_groups,
        "placements": placements,
        "warnings": warnings,
    }


def parse_topology(text: str | None, gpus_per_job: int | None = None) -> dict:
    """Topology facts from the text of ``nvidia-smi topo -m`` (or ``-mp``), terminal control sequences removed
    first; never raises on bad text (see ``warnings``)."""
    clean = strip_terminal(text)
    if not clean.strip():
        return conclude(_Capture(), None, ["empty input: there is no `nvidia-smi topo -m` output to read"])
    warnings: list[str] = []
    capture = read_capture(clean, warnings)
    if capture is None:  # what is not a matrix concludes as an empty one: no GPU, no link, the one warning
        warning = "no `nvidia-smi topo -m` matrix found: expected a header line whose first column is GPU0, got "
        return conclude(_Capture(), None, [warning + cut_line(text or "")])
    interpret(capture, warnings)
    return conclude(capture, gpus_per_job, warnings)
