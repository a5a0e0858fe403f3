# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The health state of each GPU, through gpu_facts' backends: NVML, else ``nvidia-smi -q`` (text).

Each GPU record of ``gather_state`` is a gpu_facts record (index, name, uuid, pci_bus_id, persistence_mode, fabric,
...) plus ``state``, a dict with every key of ``empty_state()``; a value a backend cannot read is null:

* ``ecc_uncorrectable_volatile`` / ``ecc_uncorrectable_aggregate``: uncorrectable ECC errors since the driver
  loaded / over the GPU's life (DRAM and SRAM together);
* ``row_remap_pending`` / ``row_remap_failure``: rows waiting for a GPU reset to be remapped / a remap failed;
* ``retired_pages_pending``: pages waiting for a reset to be retired (GPUs before A100);
* ``gpu_idle``, ``throttle_thermal`` (HW or SW thermal slowdown), ``throttle_power`` (HW power brake),
  ``throttle_sw_power_cap``, ``throttle_hw_slowdown``: the current clock event (throttle) reasons;
* ``nvlink_crc_errors``, ``nvlink_replay_errors``, ``nvlink_recovery_errors``: totals over the GPU's links;
  ``nvlink_links_active``, ``nvlink_links_down``: link numbers;
* ``pcie_gen_current``, ``pcie_gen_max``, ``pcie_width_current``, ``pcie_width_max``;
* ``persistence_mode``.

``not_supported`` and ``unread`` are as the gpu_health module's RETURN (``gpus``) describes them (page retirement is
not supported on A100 and newer: ../shared/data/nvidia-smi/h200-driver580/pynvml-probe.txt). Only ``unread`` makes
``read_ok`` false, since a host whose error counters were not read cannot be called healthy.

NVML reads all of it in gpu_facts' NVML session (its ``per_gpu`` hook). The nvidia-smi path reads ``nvidia-smi -q``
with gpu_facts' own section parser, then ``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e`` for the links.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    SOURCE_NONE,
    SOURCE_NVIDIA_SMI,
    SOURCE_NVML,
    BackendUnavailable,
    find_nvidia_smi,
    first_backend,
    import_pynvml,
    int_or_none,
    load_pynvml,
    parse_flag,
    value_or_none,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_nvml import gather_nvml
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import (
    parse_nvidia_smi_nvlink,
    q_get,
    q_gpu,
    split_nvidia_smi_q,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.text import one_line

# NVML clock event (throttle) reason bits, as in nvml.h (nvmlClocksEventReason* / nvmlClocksThrottleReason*)
_REASON_IDLE = 0x1
_REASON_SW_POWER_CAP = 0x4
_REASON_HW_SLOWDOWN = 0x8
_REASON_SW_THERMAL = 0x20
_REASON_HW_THERMAL = 0x40
_REASON_HW_POWER_BRAKE = 0x80
_NVLINK_COUNTERS = (("nvlink_replay_errors", 0), ("nvlink_recovery_errors", 1), ("nvlink_crc_errors", 2))
_NVLINK_CRC_DATA = 3  # NVML_NVLINK_ERROR_DL_CRC_DATA, added to the flit CRC count
_NVLINK_KEYS = (
    "nvlink_crc_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
    "nvlink_links_active",
    "nvlink_links_down",
)
_REASON_KEYS = ("gpu_idle", "throttle_thermal", "throttle_power", "throttle_sw_power_cap", "throttle_hw_slowdown")
# The error and pending-repair counters the verdict acts on: one of them unread (not "not supported") makes
# read_ok false
COUNTERS = (
    "ecc_uncorrectable_volatile",
    "ecc_uncorrectable_aggregate",
    "row_remap_pending",
    "row_remap_failure",
    "retired_pages_pending",
)
# The PCIe link keys, where nvidia-smi -q prints them under PCI > GPU Link Info
_SMI_PCIE = (
    ("pcie_gen_current", ("PCIe Generation", "Current")),
    ("pcie_gen_max", ("PCIe Generation", "Max")),
    ("pcie_width_current", ("Link Width", "Current")),
    ("pcie_width_max", ("Link Width", "Max")),
)
# What nvidia-smi prints for a field the GPU does not have, in -q and in the query CSV
_SMI_NOT_SUPPORTED = ("n/a", "[n/a]", "not supported", "[not supported]")
_NOT_SUPPORTED = object()  # NvmlCalls.call's answer here for NotSupported / FunctionNotFound


def empty_state() -> dict:
    """Every state key (the order the module returns them in), each null."""
    pcie = [key for key, _path in _SMI_PCIE]
    return dict.fromkeys((*COUNTERS, *_REASON_KEYS, *_NVLINK_KEYS, *pcie, "persistence_mode"))


def smi_not_supported(value) -> bool:
    """True for nvidia-smi's text for a field the GPU does not have (``N/A``, ``[N/A]``, ``[Not Supported]``)."""
    return isinstance(value, str) and value.strip().lower() in _SMI_NOT_SUPPORTED


# --------------------------------------------------------------------------- NVML


def _nvml_links(calls, label: str, handle, links: dict, state: dict) -> None:
    """Link states (gpu_facts' one walk, ``links``) and error counters over every NVLink the GPU has."""
    totals = dict.fromkeys(name for name, _counter in _NVLINK_COUNTERS)
    for link in links:
        for name, counter in (*_NVLINK_COUNTERS, ("nvlink_crc_errors", _NVLINK_CRC_DATA)):
            value = calls.call(label, "nvmlDeviceGetNvLinkErrorCounter", handle, link, counter)
            if value is not None:
                totals[name] = (totals[name] or 0) + int(value)
    if links:
        active = sorted(link for link, up in links.items() if up)
        state.update(totals, nvlink_links_active=active, nvlink_links_down=sorted(set(links) - set(active)))


def nvml_health(calls, label: str, handle, links: dict) -> dict:
    """``{state, not_supported}`` of one GPU through NVML (gpu_facts' ``per_gpu`` hook: same session, same
    handle)."""
    nvml = calls.nvml
    state = empty_state()
    not_supported: list = []

    def read(keys: tuple, name: str, *args):
        value = calls.call(label, name, handle, *args, unsupported=_NOT_SUPPORTED)
        if value is _NOT_SUPPORTED:
            not_supported.extend(keys)
            return None
        return value

    ecc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    for key, name, *args in (
        ("ecc_uncorrectable_volatile", "nvmlDeviceGetTotalEccErrors", ecc, getattr(nvml, "NVML_VOLATILE_ECC", None)),
        ("ecc_uncorrectable_aggregate", "nvmlDeviceGetTotalEccErrors", ecc, getattr(nvml, "NVML_AGGREGATE_ECC", None)),
        ("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        value = read((key,), name, *args)
        state[key] = None if value is None else int(value)
    remapped = read(("row_remap_pending", "row_remap_failure"), "nvmlDeviceGetRemappedRows")
    if remapped is not None:
        state["row_remap_pending"], state["row_remap_failure"] = bool(remapped[2]), bool(remapped[3])
    pending = read(("retired_pages_pending",), "nvmlDeviceGetRetiredPagesPendingStatus")
    if pending is not None:
        state["retired_pages_pending"] = pending == getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    mask = calls.call(label, "nvmlDeviceGetCurrentClocksEventReasons", handle, unsupported=_NOT_SUPPORTED)
    if mask is None or mask is _NOT_SUPPORTED:
        mask = read(_REASON_KEYS, "nvmlDeviceGetCurrentClocksThrottleReasons")
    if mask is not None:
        state["gpu_idle"] = bool(mask & _REASON_IDLE)
        state["throttle_thermal"] = bool(mask & (_REASON_HW_THERMAL | _REASON_SW_THERMAL))
        state["throttle_power"] = bool(mask & _REASON_HW_POWER_BRAKE)
        state["throttle_sw_power_cap"] = bool(mask & _REASON_SW_POWER_CAP)
        state["throttle_hw_slowdown"] = bool(mask & _REASON_HW_SLOWDOWN)
    _nvml_links(calls, label, handle, links, state)
    if state["nvlink_links_active"] is None:  # no link answered: a GPU without NVLink
        not_supported.extend(_NVLINK_KEYS)
    return {"state": state, "not_supported": sorted(set(not_supported))}


# --------------------------------------------------------------------------- nvidia-smi -q (text)


def _sum_uncorrectable(section) -> int | None:
    """Uncorrectable counts of one ``ECC Errors`` section (Volatile or Aggregate), in every layout drivers print:
    ``DRAM Uncorrectable``/``SRAM Uncorrectable[ Parity| SEC-DED]`` (R470+), or ``Double Bit`` / ``Total``."""
    if not isinstance(section, dict):
        return None
    values = [
        int_or_none(value)
        for key, value in section.items()
        if isinstance(value, str) and "uncorrectable" in key.lower()
    ]
    double_bit = section.get("Double Bit")
    if isinstance(double_bit, dict):
        values.append(int_or_none(double_bit.get("Total")))
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _link(value: str | None) -> int | None:
    """A PCIe generation (``4``) or width (``16x``)."""
    return int_or_none((value_or_none(value) or "").rstrip("xX"))


def _q_section_not_supported(section) -> bool:
    """A -q section (or value) that says N/A throughout: ``ECC Errors`` with ECC off, ``Retired Pages`` on A100
    and newer, ``Remapped Rows : N/A`` before A100."""
    if isinstance(section, dict):
        values = [value for value in section.values() if not isinstance(value, dict)]
        nested = [value for value in section.values() if isinstance(value, dict)]
        return (
            bool(values or nested)
            and all(map(smi_not_supported, values))
            and all(map(_q_section_not_supported, nested))
        )
    return smi_not_supported(section)


def q_health(tree: dict, persistence_mode) -> tuple:
    """``(state, not_supported)`` of one GPU section of ``nvidia-smi -q``, each field read once: the ``state`` dict
    (NVLink keys stay null: -q does not show them) and the state keys it prints as not supported
    (``smi_not_supported``)."""
    state, found = empty_state(), []
    ecc = tree.get("ECC Errors")
    for key, part in (("ecc_uncorrectable_volatile", "Volatile"), ("ecc_uncorrectable_aggregate", "Aggregate")):
        section = ecc.get(part) if isinstance(ecc, dict) else None
        state[key] = _sum_uncorrectable(section)
        if smi_not_supported(ecc) or (section is not None and _q_section_not_supported(section)):
            found.append(key)
    pending = q_get(tree, "Remapped Rows", "Pending")
    state["row_remap_pending"] = parse_flag(pending)
    state["row_remap_failure"] = parse_flag(q_get(tree, "Remapped Rows", "Remapping Failure Occurred"))
    if _q_section_not_supported(tree.get("Remapped Rows")) or smi_not_supported(pending):
        found += ["row_remap_pending", "row_remap_failure"]
    pages = q_get(tree, "Retired Pages", "Pending Page Blacklist") or q_get(
        tree, "Retired Pages", "Pending Page Retirement")
    state["retired_pages_pending"] = parse_flag(pages)
    if smi_not_supported(tree.get("Retired Pages")) or smi_not_supported(pages):
        found.append("retired_pages_pending")
    reasons = tree.get("Clocks Event Reasons") or tree.get("Clocks Throttle Reasons") or {}
    if isinstance(reasons, dict) and reasons:
        flags = {key: parse_flag(q_get(reasons, key)) for key in reasons}
        state["gpu_idle"] = flags.get("Idle")
        thermal = [flags.get("HW Thermal Slowdown"), flags.get("SW Thermal Slowdown")]
        state["throttle_thermal"] = any(thermal) if any(flag is not None for flag in thermal) else None
        state["throttle_power"] = flags.get("HW Power Brake Slowdown")
        state["throttle_sw_power_cap"] = flags.get("SW Power Cap")
        state["throttle_hw_slowdown"] = flags.get("HW Slowdown")
    elif smi_not_supported(reasons):
        found += list(_REASON_KEYS)
    for key, path in _SMI_PCIE:
        value = q_get(tree, "PCI", "GPU Link Info", *path)
        state[key] = _link(value)
        found += [key] if smi_not_supported(value) else []
    state["persistence_mode"] = persistence_mode
    return state, sorted(found)


def parse_health_q(text: str) -> list:
    """GPU records of ``nvidia-smi -q`` text, each with its ``state`` and ``not_supported`` (gpu_facts' record and
    the health keys, both from the one section tree ``split_nvidia_smi_q`` parsed)."""
    _head, blocks = split_nvidia_smi_q(text)
    records = []
    for index, (bus, tree) in enumerate(blocks):
        record = q_gpu(index, bus, tree)
        record["state"], record["not_supported"] = q_health(tree, record["persistence_mode"])
        records.append(record)
    return records


def add_nvlink(records: list, status_text: str | None, errors_text: str | None) -> None:
    """Fill the NVLink keys of each record's ``state`` from ``nvidia-smi nvlink -s`` / ``nvlink -e``, by UUID."""
    by_uuid = {record["uuid"]: record["state"] for record in records}
    by_index = {record["index"]: record["state"] for record in records}
    for gpu in parse_nvidia_smi_nvlink(status_text or ""):
        state = by_uuid.get(gpu["uuid"])
        if state is not None and gpu["links"]:
            state["nvlink_links_active"] = sorted(link for link, up in gpu["links"].items() if up)
            state["nvlink_links_down"] = sorted(link for link, up in gpu["links"].items() if not up)
    for gpu in parse_nvidia_smi_nvlink(errors_text or ""):
        state = by_uuid.get(gpu["uuid"]) if gpu["uuid"] else by_index.get(gpu["index"])
        if state is None or not gpu["counters"]:
            continue
        for key in ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors"):
            found = [count for name, count in gpu["counters"].items() if key.split("_")[1] in name]
            state[key] = sum(found) if found else None


def gather_smi_state(run, which, notes: list) -> list:
    """``nvidia-smi -q`` once for all GPUs, then ``nvlink -s`` and ``nvlink -e`` once each."""
    binary = find_nvidia_smi(which)
    rc, out, err = run([binary, "-q"])
    if rc != 0:
        raise BackendUnavailable(f"'nvidia-smi -q' exited {rc}: {one_line(out or err)}")
    records = parse_health_q(out)
    texts = []
    for argv in (["nvlink", "-s"], ["nvlink", "-e"]):
        rc, out, err = run([binary, *argv])
        texts.append(out if rc == 0 else None)
        if rc != 0:
            notes.append(f"'nvidia-smi {' '.join(argv)}' exited {rc}: {one_line(err or out)}; NVLink fields are null")
    add_nvlink(records, *texts)
    if texts[0] is not None:  # `nvlink -s` answered: a GPU it shows no link for has no NVLink
        for record in records:
            if record["state"]["nvlink_links_active"] is None:
                record["not_supported"] = sorted({*record["not_supported"], *_NVLINK_KEYS})
    return records


# --------------------------------------------------------------------------- orchestration


def _nvml_records(nvml_loader, warnings: list) -> list:
    records = gather_nvml(load_pynvml(nvml_loader), warnings, per_gpu=nvml_health)["gpus"]
    for record in records:  # a GPU without a handle has no state read
        record.setdefault("state", empty_state())["persistence_mode"] = record["persistence_mode"]
        record.setdefault("not_supported", [])
    return records


def _answer(source: str, gpus: list, warnings: list, notes: list) -> dict:
    """The state of a backend that answered: each GPU's ``unread`` counters, and ``read_ok`` false when any."""
    for record in gpus:
        state, unsupported = record["state"], record["not_supported"]
        record["unread"] = [key for key in COUNTERS if state[key] is None and key not in unsupported]
        if record["unread"]:
            notes.append(f"GPU {record['index']}: {', '.join(record['unread'])} not read ({source}); read_ok is false "
                         "(see the warnings for why)")
    read_ok = not any(record["unread"] for record in gpus)
    return {"source": source, "read_ok": read_ok, "gpus": gpus, "warnings": warnings, "notes": notes}


def gather_state(backend: str, run, which, nvml_loader=None, state_text: str | None = None) -> dict:
    """``{source, read_ok, gpus, warnings, notes}``: the GPUs and their state from the first backend that answers.

    ``state_text``: ``nvidia-smi -q`` text to read instead of asking the host (source ``nvidia-smi``).
    ``backend``: ``auto`` (nvml, then nvidia-smi) or one of them; a named backend that cannot answer raises
    GpuFactsError. With ``auto`` and neither answering, ``read_ok`` is false and ``gpus`` empty. A backend that
    answers but leaves one of a GPU's ``COUNTERS`` unread (not "not supported") gives ``read_ok`` false too.
    """
    warnings: list = []
    notes: list = []
    if state_text is not None:
        return _answer(SOURCE_NVIDIA_SMI, parse_health_q(state_text), warnings, notes)
    attempts = {
        SOURCE_NVML: lambda: _nvml_records(nvml_loader or import_pynvml, warnings),
        SOURCE_NVIDIA_SMI: lambda: gather_smi_state(run, which, notes),
    }
    answered = first_backend(backend, attempts, notes)
    if answered:
        return _answer(answered[0], answered[1], warnings, notes)
    return {"source": SOURCE_NONE, "read_ok": False, "gpus": [], "warnings": warnings, "notes": notes}
