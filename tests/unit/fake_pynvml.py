"""A stand-in for the ``pynvml`` module (nvidia-ml-py) at the library boundary.

It mirrors the names, call signatures, return types and error classes of the real module
(checked against the installed nvidia-ml-py by ``test_fake_pynvml_mirrors_real_pynvml``), and
answers from a list of ``FakeGpu`` records. Strings come back as ``str`` like nvidia-ml-py >= 11.515,
or as ``bytes`` like the older releases when ``bytes_strings=True``.
"""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass, field
from typing import ClassVar

# values copied from the real module, so the code under test sees the same numbers
NVML_SUCCESS = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

_ERROR_CLASSES = {
    NVML_ERROR_UNINITIALIZED: ("NVMLError_Uninitialized", "Uninitialized"),
    NVML_ERROR_INVALID_ARGUMENT: ("NVMLError_InvalidArgument", "Invalid Argument"),
    NVML_ERROR_NOT_SUPPORTED: ("NVMLError_NotSupported", "Not Supported"),
    NVML_ERROR_NO_PERMISSION: ("NVMLError_NoPermission", "Insufficient Permissions"),
    NVML_ERROR_DRIVER_NOT_LOADED: ("NVMLError_DriverNotLoaded", "Driver Not Loaded"),
    NVML_ERROR_LIBRARY_NOT_FOUND: ("NVMLError_LibraryNotFound", "NVML Shared Library Not Found"),
    NVML_ERROR_FUNCTION_NOT_FOUND: ("NVMLError_FunctionNotFound", "Function Not Found"),
    NVML_ERROR_GPU_IS_LOST: ("NVMLError_GpuIsLost", "GPU is lost"),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVMLError_LibRmVersionMismatch",
        "RM has detected an NVML/RM version mismatch.",
    ),
    NVML_ERROR_UNKNOWN: ("NVMLError_Unknown", "Unknown Error"),
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: ``NVMLError(code)`` returns the matching subclass; ``.value`` is the code."""

    _value_class: ClassVar[dict] = {}

    def __new__(cls, value=None):
        target = NVMLError._value_class.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value if value is not None else target._code
        return obj

    def __init__(self, value=None):
        super().__init__()

    def __str__(self):
        return _ERROR_CLASSES.get(self.value, ("", f"NVML Error with code {self.value}"))[1]


def _make_error_classes() -> dict:
    classes = {}
    for code, (name, _text) in _ERROR_CLASSES.items():
        cls = type(name, (NVMLError,), {"_code": code})
        NVMLError._value_class[code] = cls
        classes[name] = cls
    return classes


ERRORS = _make_error_classes()
NVMLError_NotSupported = ERRORS["NVMLError_NotSupported"]
NVMLError_LibraryNotFound = ERRORS["NVMLError_LibraryNotFound"]
NVMLError_DriverNotLoaded = ERRORS["NVMLError_DriverNotLoaded"]
NVMLError_FunctionNotFound = ERRORS["NVMLError_FunctionNotFound"]
NVMLError_InvalidArgument = ERRORS["NVMLError_InvalidArgument"]
NVMLError_GpuIsLost = ERRORS["NVMLError_GpuIsLost"]
NVMLError_NoPermission = ERRORS["NVMLError_NoPermission"]
NVMLError_LibRmVersionMismatch = ERRORS["NVMLError_LibRmVersionMismatch"]


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    """Same layout as pynvml.c_nvmlGpuFabricInfo_t."""

    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class c_nvmlGpuFabricInfo_v2_t(ctypes.Structure):
    """Same layout as pynvml.c_nvmlGpuFabricInfo_v2_t (version set by the constructor)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
    ]

    def __init__(self):
        super().__init__(version=0x02000024)


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:18:00.0"
    memory_total_bytes: int = 81559 * 1024 * 1024
    mig: tuple = (0, 0)  # (current, pending): NVML_DEVICE_MIG_DISABLE / _ENABLE
    persistence: int = 1  # NVML_FEATURE_ENABLED
    nvlink_states: list = field(default_factory=list)  # one 0/1 per link that exists
    fabric: tuple | None = None  # (state, status, clique_id, cluster_uuid bytes[16]) or None: NotSupported
    errors: dict = field(default_factory=dict)  # pynvml function name -> error class or instance to raise
    # health (gpu_health): None means NVML answers NotSupported
    ecc_uncorrected: tuple | None = (0, 0)  # (volatile, aggregate)
    remapped_rows: tuple | None = (0, 0, 0, 0)  # (correctable, uncorrectable, isPending, failureOccurred)
    retired_pages_pending: int | None = None  # NVML_FEATURE_ENABLED / _DISABLED
    clock_reasons: int | None = 0x1  # nvmlClocksEventReason* bits; GpuIdle
    pcie: tuple | None = (5, 5, 16, 16)  # (current gen, max gen, current width, max width)
    nvlink_errors: dict = field(default_factory=dict)  # {(link, counter): count}; others read 0


class _Handle:
    """Like c_nvmlDevice_t: an opaque handle."""

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu


class _PciInfo:
    def __init__(self, bus_id: bytes) -> None:
        self.busId = bus_id  # a c_char array field reads back as bytes in every pynvml version
        self.busIdLegacy = bus_id


class _Memory:
    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.used = 0


def make_fake_pynvml(  # noqa: PLR0915 - one closure per pynvml function keeps the fake in one readable place
    gpus,
    driver_version: str = "565.57.01",
    cuda_version: int = 12070,
    init_error=None,
    count_error=None,
    bytes_strings: bool = False,
    without=(),
    system_errors=None,
):
    """A module object that behaves like pynvml for ``gpus``.

    ``init_error``/``count_error``: error class raised by nvmlInit / nvmlDeviceGetCount;
    ``without``: pynvml attribute names to leave out (older nvidia-ml-py releases);
    ``system_errors``: {function name: error class} for system-level calls.
    ``module.calls`` records every call made, by function name.
    """
    module = types.ModuleType("pynvml")
    module.calls = []
    module.initialised = 0
    system_errors = dict(system_errors or {})

    def out(text: str):
        return text.encode() if bytes_strings else text

    def record(name, handle=None):
        module.calls.append(name)
        error = handle.gpu.errors.get(name) if handle is not None else None
        error = error or system_errors.get(name)
        if error is not None:
            raise error() if isinstance(error, type) else error

    def nvmlInit():
        record("nvmlInit")
        if init_error is not None:
            raise init_error()
        module.initialised += 1

    def nvmlShutdown():
        record("nvmlShutdown")
        if module.initialised <= 0:
            raise ERRORS["NVMLError_Uninitialized"]()
        module.initialised -= 1

    def needs_init():
        if module.initialised <= 0:
            raise ERRORS["NVMLError_Uninitialized"]()

    def nvmlSystemGetDriverVersion():
        needs_init()
        record("nvmlSystemGetDriverVersion")
        return out(driver_version)

    def nvmlSystemGetCudaDriverVersion():
        needs_init()
        record("nvmlSystemGetCudaDriverVersion")
        return cuda_version

    def nvmlSystemGetCudaDriverVersion_v2():
        needs_init()
        record("nvmlSystemGetCudaDriverVersion_v2")
        return cuda_version

    def nvmlDeviceGetCount():
        needs_init()
        record("nvmlDeviceGetCount")
        if count_error is not None:
            raise count_error()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index):
        needs_init()
        module.calls.append("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(gpus):
            raise NVMLError_InvalidArgument()
        handle = _Handle(gpus[index])
        record("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetName(handle):
        record("nvmlDeviceGetName", handle)
        return out(handle.gpu.name)

    def nvmlDeviceGetUUID(handle):
        record("nvmlDeviceGetUUID", handle)
        return out(handle.gpu.uuid)

    def nvmlDeviceGetPciInfo(handle):
        record("nvmlDeviceGetPciInfo", handle)
        return _PciInfo(handle.gpu.bus_id.encode())

    def nvmlDeviceGetMemoryInfo(handle, version=None):
        record("nvmlDeviceGetMemoryInfo", handle)
        return _Memory(handle.gpu.memory_total_bytes)

    def nvmlDeviceGetMigMode(device):
        record("nvmlDeviceGetMigMode", device)
        return list(device.gpu.mig)

    def nvmlDeviceGetPersistenceMode(handle):
        record("nvmlDeviceGetPersistenceMode", handle)
        return handle.gpu.persistence

    def nvmlDeviceGetNvLinkState(device, link):
        record("nvmlDeviceGetNvLinkState", device)
        states = device.gpu.nvlink_states
        if not states:
            raise NVMLError_NotSupported()
        if link >= len(states):
            raise NVMLError_InvalidArgument()
        return states[link]

    def fill_fabric(name, device, ref):
        record(name, device)
        info = ref._obj  # ctypes.byref(struct) keeps the struct here
        if device.gpu.fabric is None:
            raise NVMLError_NotSupported()
        state, status, clique, cluster = device.gpu.fabric
        info.state, info.status, info.cliqueId = state, status, clique
        ctypes.memmove(info.clusterUuid, bytes(cluster), 16)
        return NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfo(device, gpuFabricInfo):
        return fill_fabric("nvmlDeviceGetGpuFabricInfo", device, gpuFabricInfo)

    def nvmlDeviceGetGpuFabricInfoV(device, gpuFabricInfo):
        return fill_fabric("nvmlDeviceGetGpuFabricInfoV", device, gpuFabricInfo)

    def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
        record("nvmlDeviceGetTotalEccErrors", handle)
        if handle.gpu.ecc_uncorrected is None or errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            raise NVMLError_NotSupported()
        return handle.gpu.ecc_uncorrected[counterType]

    def nvmlDeviceGetRemappedRows(device):
        record("nvmlDeviceGetRemappedRows", device)
        if device.gpu.remapped_rows is None:
            raise NVMLError_NotSupported()
        return tuple(device.gpu.remapped_rows)

    def nvmlDeviceGetRetiredPagesPendingStatus(device):
        record("nvmlDeviceGetRetiredPagesPendingStatus", device)
        if device.gpu.retired_pages_pending is None:
            raise NVMLError_NotSupported()
        return device.gpu.retired_pages_pending

    def nvmlDeviceGetCurrentClocksEventReasons(handle):
        record("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if handle.gpu.clock_reasons is None:
            raise NVMLError_NotSupported()
        return handle.gpu.clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
        record("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return nvmlDeviceGetCurrentClocksEventReasons(handle)

    def pcie(name, handle, position):
        record(name, handle)
        if handle.gpu.pcie is None:
            raise NVMLError_NotSupported()
        return handle.gpu.pcie[position]

    def nvmlDeviceGetCurrPcieLinkGeneration(handle):
        return pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, 0)

    def nvmlDeviceGetMaxPcieLinkGeneration(handle):
        return pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, 1)

    def nvmlDeviceGetCurrPcieLinkWidth(handle):
        return pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, 2)

    def nvmlDeviceGetMaxPcieLinkWidth(handle):
        return pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, 3)

    def nvmlDeviceGetNvLinkErrorCounter(device, link, counter):
        record("nvmlDeviceGetNvLinkErrorCounter", device)
        if link >= len(device.gpu.nvlink_states):
            raise NVMLError_InvalidArgument()
        return device.gpu.nvlink_errors.get((link, counter), 0)

    names = dict(locals())
    for name, value in names.items():
        if name.startswith("nvml"):
            setattr(module, name, value)
    for name, value in ERRORS.items():
        setattr(module, name, value)
    module.NVMLError = NVMLError
    module.c_nvmlGpuFabricInfo_t = c_nvmlGpuFabricInfo_t
    module.c_nvmlGpuFabricInfo_v2_t = c_nvmlGpuFabricInfo_v2_t
    module.c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t
    module.NVML_SUCCESS = NVML_SUCCESS
    module.NVML_FEATURE_DISABLED = 0
    module.NVML_FEATURE_ENABLED = 1
    module.NVML_DEVICE_MIG_DISABLE = 0
    module.NVML_DEVICE_MIG_ENABLE = 1
    module.NVML_NVLINK_MAX_LINKS = 36
    module.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
    module.NVML_GPU_FABRIC_STATE_NOT_STARTED = 1
    module.NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
    module.NVML_GPU_FABRIC_STATE_COMPLETED = 3
    module.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    module.NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    module.NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    for name in without:
        delattr(module, name)
    return module


# the pynvml names this fake provides, for the check against the real module
MIRRORED_NAMES = (
    "NVMLError",
    *sorted(ERRORS),
    "c_nvmlGpuFabricInfo_t",
    "c_nvmlGpuFabricInfo_v2_t",
    "c_nvmlGpuFabricInfoV_t",
    "NVML_SUCCESS",
    "NVML_FEATURE_DISABLED",
    "NVML_FEATURE_ENABLED",
    "NVML_DEVICE_MIG_DISABLE",
    "NVML_DEVICE_MIG_ENABLE",
    "NVML_NVLINK_MAX_LINKS",
    "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED",
    "NVML_GPU_FABRIC_STATE_NOT_STARTED",
    "NVML_GPU_FABRIC_STATE_IN_PROGRESS",
    "NVML_GPU_FABRIC_STATE_COMPLETED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetNvLinkErrorCounter",
)
