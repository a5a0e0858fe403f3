# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts, shared by every backend (nvml, smi, sysfs): the record shape, constants, errors and normalisers."""

from __future__ import annotations

import importlib
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.text import cut

SOURCE_NVML = "nvml"
SOURCE_NVIDIA_SMI = "nvidia-smi"
SOURCE_PCI = "pci"
SOURCE_NONE = "none"

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

_FLAGS = {"enabled": True, "yes": True, "active": True, "disabled": False, "no": False, "not active": False}
NA_VALUES = ("", "n/a", "[n/a]", "not supported", "[not supported]", "none")
MIB = 1024 * 1024
_CUDA_MAJOR = 1000
_CUDA_MINOR = 10
_BUS_ID_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


class GpuFactsError(Exception):
    """A failure the module reports with fail_json: the message states fact, expectation and fix."""


class GpuFactsParseError(GpuFactsError):
    """Output that should be machine-readable could not be read; the raw output is in the message."""

    def __init__(self, what: str, detail: str, raw: str) -> None:
        shown = cut(raw)
        super().__init__(
            f"could not parse {what}: {detail}. Expected the documented nvidia-smi format; if the driver "
            f"changed it, report this output so the parser can follow. Raw output:\n{shown}"
        )


class BackendUnavailable(GpuFactsError):
    """This backend cannot answer on this host; the next one is tried."""


def import_pynvml():
    """The real pynvml module (nvidia-ml-py); ImportError when it is not installed on the host."""
    return importlib.import_module("pynvml")


def find_nvidia_smi(which) -> str:
    """The nvidia-smi binary ``which`` finds; BackendUnavailable when there is none (read before the parsers load)."""
    binary = which("nvidia-smi")
    if not binary:
        raise BackendUnavailable("nvidia-smi is not in PATH")
    return binary


def load_pynvml(nvml_loader):
    """``nvml_loader()`` (pynvml, or a test's fake); BackendUnavailable when it is not importable. Here, so that a
    host without pynvml never loads the NVML backend's code."""
    try:
        return nvml_loader()
    except ImportError as err:
        raise BackendUnavailable(f"pynvml is not importable ({err}); install nvidia-ml-py to use NVML") from err


def first_backend(backend: str, attempts, notes: list):
    """(name, answer) of the first of ``attempts`` (name -> callable, in order) that answers, else None: the module's
    ``backend`` option (an unavailable backend is a note under ``auto``, an error when asked for by name)."""
    for name, attempt in attempts.items():
        if backend not in ("auto", name):
            continue
        try:
            return name, attempt()
        except BackendUnavailable as err:
            if backend != "auto":
                raise GpuFactsError(
                    f"backend {name} cannot answer on this host: {err}. Expected it to work because "
                    f"backend={name} was asked for; use backend=auto to fall back, or fix the cause above"
                ) from err
            notes.append(f"{name}: {err}")
    return None


# --------------------------------------------------------------------------- small normalisers


def value_or_none(value) -> str | None:
    """A text field of any backend, None for nvidia-smi's placeholders ("N/A", "[Not Supported]", empty); pynvml's
    bytes (before nvidia-ml-py 11.515) decoded, a C string's trailing NULs dropped."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    value = str(value).rstrip("\x00").strip()
    return None if value.lower() in NA_VALUES else value


def cuda_version_from_int(value) -> str | None:
    """NVML's CUDA driver version integer (12040) as "major.minor" ("12.4"); None for 0/None."""
    if not value:
        return None
    value = int(value)
    return f"{value // _CUDA_MAJOR}.{(value % _CUDA_MAJOR) // _CUDA_MINOR}"


def _bus_id(value: str | None, form: str) -> str | None:
    match = _BUS_ID_RE.match((value or "").strip())
    return form.format(*(int(part, 16) for part in match.groups())) if match else None


def canonical_bus_id(value: str | None) -> str | None:
    """Any PCI address form as nvidia-smi prints it: ``00000000:18:00.0`` (8-digit domain, upper case)."""
    return _bus_id(value, "{:08X}:{:02X}:{:02X}.{:X}")


def sysfs_bus_id(value: str | None) -> str | None:
    """Any PCI address form as sysfs names it: ``0000:18:00.0`` (lower case)."""
    return _bus_id(value, "{:04x}:{:02x}:{:02x}.{:x}")


def _one_of(value: str | None, choices: tuple, placeholder: str) -> str | None:
    """``value`` spelled as the one of ``choices`` it names (in any case), nvidia-smi's placeholders ("N/A", ...) as
    ``placeholder``, None when absent; other text passed through."""
    if value is None:
        return None
    text = value.strip()
    named = {choice.lower(): choice for choice in choices}.get(text.lower())
    return named or (placeholder if text.lower() in NA_VALUES else text)


def normalise_mig_mode(value: str | None) -> str | None:
    """MIG_ENABLED, MIG_DISABLED or MIG_NOT_SUPPORTED (a GPU without MIG); None when unknown."""
    return _one_of(value, (MIG_ENABLED, MIG_DISABLED), MIG_NOT_SUPPORTED)


def normalise_fabric_state(value: str | None) -> str | None:
    """Fabric state as one of FABRIC_*; nvidia-smi's "N/A" is a GPU without fabric support."""
    return _one_of(value, (FABRIC_NOT_SUPPORTED, *FABRIC_ACTIVE_STATES), FABRIC_NOT_SUPPORTED)


def aggregate_fabric_state(states) -> str | None:
    """One state for the host: the least advanced among GPUs (Not Started < In Progress < Completed)."""
    known = [state for state in states if state is not None]
    if not known:
        return None
    return min(known, key=lambda state: _FABRIC_RANK.get(state, 0))


def parse_flag(value: str | None) -> bool | None:
    """nvidia-smi's on and off words (``Enabled``, ``Yes``, ``Active``; ``Disabled``, ``No``, ``Not Active``) as a
    bool; anything else (``N/A``, absent) None."""
    return _FLAGS.get((value or "").strip().lower())


def parse_mib(value: str | None) -> int | None:
    """ "81920 MiB" -> 81920."""
    match = re.match(r"^\s*(\d+)\s*MiB\s*$", value or "")
    return int(match.group(1)) if match else None


def int_or_none(value: str | None) -> int | None:
    value = value_or_none(value)
    if value is None:
        return None
    try:
        return int(value, 0)
    except ValueError:
        return None


def fabric_record(state=None, status=None, clique_id=None, cluster_uuid=None) -> dict:
    return {"state": state, "status": status, "clique_id": clique_id, "cluster_uuid": cluster_uuid}


def gpu_record(index: int, **fields) -> dict:
    """One GPU record with every key present (the module's RETURN ``gpus``); backends fill what they know."""
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
        "cpu_affinity": None,
        "nvlink": None,
        "fabric": fabric_record(),
    }
    record.update(fields)
    return record
