# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU events in kernel-log lines: NVRM Xid, NVSwitch SXid and "fallen off the bus" (pure functions of text).

Every format the drivers have printed is read, whatever the log prefix (``dmesg``'s ``[ 12.345]`` or
``[Fri Aug 30 11:43:09 2024]``, ``journalctl``/syslog's ``Feb 14 05:03:41 host kernel:``, ISO time stamps):

* ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.`` (and without ``PCI:``,
  without ``pid=``/``name=``, with ``pid='<unknown>'``);
* ``nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 ...`` -- the ``Severity ...`` and
  ``Data {...}`` lines the driver prints after it belong to that event and are not events of their own, but only
  when that header (same device, same code) came before them in the text read: a continuation line whose header
  is not there (the log was rotated or filtered between them) is an event of its own, with ``fatal`` null;
* ``NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.`` and the multi-line
  ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``... installed in this system has`` / ``NVRM: fallen off the bus ...``.

A line is at most one event: an Xid 79 line is an ``xid`` event, never also a ``fallen_off_bus`` one. Other NVRM
lines (module loading, GSP messages, ``GPU at PCI:...`` headers) are not events.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_xid_table import SXID_TABLE, XID_TABLE

KIND_XID = "xid"
KIND_SXID = "sxid"
KIND_FALLEN_OFF_BUS = "fallen_off_bus"
UNKNOWN = "UNKNOWN"
FALLEN_OFF_BUS_XID = 79  # the Xid that names this condition; a fallen_off_bus event takes its code and bucket
SOURCE_XID_CATALOG = "nvidia-xid-catalog"
SOURCE_SXID_NVSENTINEL = "nvsentinel-sxid-mapping"

_PCI = r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?"
_PCI_PARTS_RE = re.compile(r"(?:PCI:)?([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?")
_XID_RE = re.compile(r"NVRM: Xid(?: \((?P<device>[^)]*)\))?: (?P<code>\d+)\b(?P<rest>.*)$")
_SXID_RE = re.compile(r"nvidia-nvswitch\d*: SXid(?: \((?P<device>[^)]*)\))?: (?P<code>\d+)\b,?\s*(?P<rest>.*)$")
_SXID_CONTINUATION_RE = re.compile(r"^(?:Severity\b|Data\s*\{)")
_FALLEN_RE = re.compile(r"NVRM:.*fallen off the bus", re.IGNORECASE)
_FALLEN_PCI_RE = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<pci>" + _PCI + r")")
_FALLEN_LOOKBACK = 3  # the multi-line message names the GPU at most two lines before "fallen off the bus"
_RECOVERY_RE = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")
_NVLINK5_FATALITY_RE = re.compile(r"^,\s*\S+\s+(?P<fatality>Fatal|Nonfatal)\b", re.IGNORECASE)
_TIME_RES = (
    re.compile(r"(?P<time>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"),
    re.compile(r"^\s*(?P<time>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})"),
    re.compile(r"\[\s*(?P<time>[^\]]+?)\s*\]"),
)


def table_action(table: dict, code: int) -> tuple:
    """``(action, mnemonic)`` of a code in ``XID_TABLE`` (the Xid catalog's bucket) or ``SXID_TABLE`` (NVSentinel's
    mapping, not NVIDIA guidance); UNKNOWN when the table gives none."""
    mnemonic, action = table.get(code, (None, None))
    return action or UNKNOWN, mnemonic


def pci_of(device: str | None) -> str | None:
    """The PCI address as printed (``0000:3b:00``, ``PCI:`` dropped); None when the device is not one."""
    text = (device or "").strip()
    text = text[4:] if text.upper().startswith("PCI:") else text
    return text if re.fullmatch(_PCI, text) else None


def pci_key(address: str | None) -> tuple | None:
    """(domain, bus, device) of any PCI address form, to match ``0000:3b:00`` with ``00000000:3B:00.0``."""
    match = _PCI_PARTS_RE.fullmatch(address or "")
    return tuple(int(part, 16) for part in match.groups()) if match else None


def line_time(prefix: str) -> str | None:
    """The time stamp in the text before the message, as printed; None when there is none."""
    for pattern in _TIME_RES:
        match = pattern.search(prefix)
        if match:
            return match.group("time")
    return None


def _event(kind: str, code: int, device: str | None, line: str, match, **extra) -> dict:
    """The event of ``line``, whose ``match`` starts the message (the text before it holds the time stamp)."""
    table, source = (SXID_TABLE, SOURCE_SXID_NVSENTINEL) if kind == KIND_SXID else (XID_TABLE, SOURCE_XID_CATALOG)
    action, mnemonic = table_action(table, code)
    event = {
        "kind": kind,
        "code": code,
        "pci": pci_of(device),
        "gpu": None,
        "immediate_action": action,
        "line": line.strip(),
        "time": line_time(line[: match.start()]),
        "mnemonic": mnemonic,
        "action_source": source if action != UNKNOWN else None,
        "fatal": None,
        "recovery_action": None,
    }
    event.update(extra)
    return event


def _xid_event(match, line: str) -> dict:
    rest = match.group("rest")
    event = _event(KIND_XID, int(match.group("code")), match.group("device"), line, match)
    recovery = _RECOVERY_RE.search(rest)
    if recovery:
        event["recovery_action"] = recovery.group(2).strip()
    fatality = _NVLINK5_FATALITY_RE.match(rest)
    if event["immediate_action"] == "WORKFLOW_NVLINK5_ERR" and fatality:
        event["fatal"] = fatality.group("fatality").lower() == "fatal"
    return event


def _sxid_event(match, line: str, headers: set) -> dict | None:
    """The SXid event of a line; None for a continuation line whose header (same device and code) is in
    ``headers``, the SXid headers read before it (added to here)."""
    rest = match.group("rest").strip()
    code = int(match.group("code"))
    key = ((match.group("device") or "").strip(), code)
    if not _SXID_CONTINUATION_RE.match(rest):
        headers.add(key)
    elif key in headers:
        return None
    lowered = rest.lower()
    fatal = True if lowered.startswith("fatal") else False if lowered.startswith(("non-fatal", "nonfatal")) else None
    return _event(KIND_SXID, code, match.group("device"), line, match, fatal=fatal)


def _fallen_event(match, line: str, previous: list) -> dict:
    address = _FALLEN_PCI_RE.search(line)
    for earlier in reversed(previous):
        if address:
            break
        address = _FALLEN_PCI_RE.search(earlier)
    pci = address.group("pci") if address else None
    return _event(KIND_FALLEN_OFF_BUS, FALLEN_OFF_BUS_XID, pci, line, match)


def parse_line(line: str, previous: list | None = None, sxid_headers: set | None = None) -> dict | None:
    """The event one kernel-log line reports, or None. ``previous``: the lines just before it (for the GPU
    address of a multi-line "fallen off the bus" message); ``sxid_headers``: the ``(device, code)`` of the SXid
    header lines read before it (updated here), without which an SXid continuation line is an event of its own."""
    match = _XID_RE.search(line)
    if match:
        return _xid_event(match, line)
    match = _SXID_RE.search(line)
    if match:
        return _sxid_event(match, line, set() if sxid_headers is None else sxid_headers)
    match = _FALLEN_RE.search(line)
    if match:
        return _fallen_event(match, line, previous or [])
    return None


def parse_events(lines) -> list:
    """Every event in ``lines`` (an iterable of kernel-log lines), in log order."""
    events: list = []
    previous: list = []
    sxid_headers: set = set()
    for raw in lines:
        line = raw.rstrip("\r\n")
        event = parse_line(line, previous, sxid_headers)
        if event is not None:
            events.append(event)
        previous = [*previous[-(_FALLEN_LOOKBACK - 1) :], line]
    return events


def map_gpus(events: list, gpus: list) -> list:
    """Set each event's ``gpu`` to the index of the GPU at its PCI address (``gpus``: records with
    ``index`` and ``pci_bus_id``); SXid events name an NVSwitch, never a GPU. Returns ``events``."""
    by_key = {pci_key(gpu.get("pci_bus_id")): gpu["index"] for gpu in gpus if pci_key(gpu.get("pci_bus_id"))}
    for event in events:
        if event["kind"] != KIND_SXID:
            event["gpu"] = by_key.get(pci_key(event["pci"]))
    return events
