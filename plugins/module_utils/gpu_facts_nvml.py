# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts from NVML through ``pynvml`` (PyPI ``nvidia-ml-py``), for gpu_facts and gpu_health (its ``per_gpu``
hook reads the health fields from the same handles, in the same session). Every call goes through ``NvmlCalls``, so
one odd GPU never costs the whole answer."""

from __future__ import annotations

import ctypes
import uuid

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    FABRIC_COMPLETED,
    FABRIC_IN_PROGRESS,
    FABRIC_NOT_STARTED,
    FABRIC_NOT_SUPPORTED,
    MIB,
    MIG_DISABLED,
    MIG_ENABLED,
    MIG_NOT_SUPPORTED,
    SOURCE_NVML,
    BackendUnavailable,
    canonical_bus_id,
    cuda_version_from_int,
    fabric_record,
    gpu_record,
    value_or_none,
)

# NVML nvmlGpuFabricState_t values
_NVML_FABRIC_STATES = {0: FABRIC_NOT_SUPPORTED, 1: FABRIC_NOT_STARTED, 2: FABRIC_IN_PROGRESS, 3: FABRIC_COMPLETED}


def _nvml_errors(nvml, *names: str) -> tuple:
    return tuple(cls for cls in (getattr(nvml, name, None) for name in names) if isinstance(cls, type))


class NvmlCalls:
    """Per-field NVML calls: "not supported" answers become None, other NVML errors a warning and None."""

    def __init__(self, nvml, warnings: list) -> None:
        self.nvml = nvml
        self.warnings = warnings
        self.quiet = _nvml_errors(nvml, "NVMLError_NotSupported", "NVMLError_FunctionNotFound")
        self.not_supported = _nvml_errors(nvml, "NVMLError_NotSupported")

    def call(self, label: str, name: str, *args, unsupported=None):
        """The value of one NVML call; ``unsupported`` when NVML says the GPU or driver has no such thing
        (NotSupported, FunctionNotFound); None when it could not be read (other NVML errors, with a warning; a
        pynvml without the call)."""
        func = getattr(self.nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except self.nvml.NVMLError as err:
            if isinstance(err, self.quiet):
                return unsupported
            self.warnings.append(f"NVML {name} for {label} failed: {err}; the field is reported as null")
            return None

    def mig_modes(self, label: str, handle) -> tuple:
        """(current, pending); MIG_NOT_SUPPORTED where the GPU or driver has no MIG, (None, None) when unread."""
        modes = self.call(label, "nvmlDeviceGetMigMode", handle, unsupported=(MIG_NOT_SUPPORTED, MIG_NOT_SUPPORTED))
        if modes is None or modes[0] == MIG_NOT_SUPPORTED:
            return modes or (None, None)
        enable = getattr(self.nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        return tuple(MIG_ENABLED if mode == enable else MIG_DISABLED for mode in modes)

    def nvlink_states(self, label: str, handle) -> dict:
        """Link -> active, for each link of range(NVML_NVLINK_MAX_LINKS) that answers (a link the GPU lacks raises)."""
        states, failure = {}, None
        expected = (*self.quiet, *_nvml_errors(self.nvml, "NVMLError_InvalidArgument"))
        enabled = getattr(self.nvml, "NVML_FEATURE_ENABLED", 1)
        for link in range(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                states[link] = self.nvml.nvmlDeviceGetNvLinkState(handle, link) == enabled
            except self.nvml.NVMLError as err:
                if not isinstance(err, expected) and failure is None:
                    failure = err
        if failure is not None:
            self.warnings.append(f"NVML nvmlDeviceGetNvLinkState for {label} failed: {failure}")
        return states

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
                    return fabric_record(state=FABRIC_NOT_SUPPORTED)
                self.warnings.append(f"NVML {func_name} for {label} failed: {err}")
                return fabric_record()
            return self._fabric_from_struct(info)
        return fabric_record()

    def _fabric_from_struct(self, info) -> dict:
        state = _NVML_FABRIC_STATES.get(int(info.state), f"unknown ({int(info.state)})")
        if state == FABRIC_NOT_SUPPORTED:
            return fabric_record(state=state)
        status = int(info.status)
        if status == 0:
            status_text = "Success"
        else:
            try:
                status_text = str(self.nvml.NVMLError(status))
            except Exception:  # rendering the code is best effort: fall back to the number
                status_text = f"NVML error {status}"
        cluster = str(uuid.UUID(bytes=bytes(bytearray(info.clusterUuid))))
        clique = getattr(info, "cliqueId", getattr(info, "partitionId", None))
        return fabric_record(state=state, status=status_text, clique_id=clique, cluster_uuid=cluster)


def _nvml_cuda_version(calls: NvmlCalls) -> str | None:
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        value = calls.call("the system", name)
        if value:
            return cuda_version_from_int(value)
    return None


def _nvml_gpu(calls: NvmlCalls, index: int, per_gpu=None) -> dict:
    nvml = calls.nvml
    label = f"GPU {index}"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as err:
        calls.warnings.append(f"NVML nvmlDeviceGetHandleByIndex({index}) failed: {err}; only its index is reported")
        return gpu_record(index)
    pci = calls.call(label, "nvmlDeviceGetPciInfo", handle)
    memory = calls.call(label, "nvmlDeviceGetMemoryInfo", handle)
    persistence = calls.call(label, "nvmlDeviceGetPersistenceMode", handle)
    mig_mode, mig_pending = calls.mig_modes(label, handle)
    links = calls.nvlink_states(label, handle)
    record = gpu_record(
        index,
        name=value_or_none(calls.call(label, "nvmlDeviceGetName", handle)),
        uuid=value_or_none(calls.call(label, "nvmlDeviceGetUUID", handle)),
        pci_bus_id=canonical_bus_id(value_or_none(getattr(pci, "busId", None))),
        memory_total_mib=int(memory.total) // MIB if memory is not None else None,
        mig_mode=mig_mode,
        mig_mode_pending=mig_pending,
        persistence_mode=None if persistence is None else persistence == getattr(nvml, "NVML_FEATURE_ENABLED", 1),
        nvlink=sum(links.values()) if links else None,
        fabric=calls.fabric(label, handle),
    )
    if per_gpu is not None:
        record.update(per_gpu(calls, label, handle, links))
    return record


def _nvml_session(nvml, warnings: list, per_gpu=None) -> dict:
    """Everything through NVML in one session; nvmlShutdown always runs once nvmlInit succeeded.

    ``per_gpu(calls, label, handle, links)``, when given, is called for each GPU inside the session (``links``:
    ``NvmlCalls.nvlink_states``, read once); the keys it returns are added to the GPU's record.
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        expected = _nvml_errors(nvml, "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
        if not isinstance(err, expected):
            warnings.append(f"nvmlInit failed: {err}; falling back to the next backend")
        raise BackendUnavailable(f"nvmlInit failed: {err}") from err
    try:
        calls = NvmlCalls(nvml, warnings)
        driver = value_or_none(calls.call("the system", "nvmlSystemGetDriverVersion"))
        cuda = _nvml_cuda_version(calls)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            warnings.append(f"nvmlDeviceGetCount failed: {err}; falling back to the next backend")
            raise BackendUnavailable(f"nvmlDeviceGetCount failed: {err}") from err
        gpus = [_nvml_gpu(calls, index, per_gpu) for index in range(count)]
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            warnings.append(f"nvmlShutdown failed: {err}")
    return {"source": SOURCE_NVML, "driver_version": driver, "cuda_driver_version": cuda, "gpus": gpus}


# what a pynvml whose API differs from the one written against raises (renamed fields, changed signatures)
PYNVML_MISMATCH = (AttributeError, TypeError, ValueError, ctypes.ArgumentError)


def gather_nvml(nvml, warnings: list, per_gpu=None) -> dict:
    """``_nvml_session`` on the loaded pynvml ``nvml`` (``gpu_facts_common.load_pynvml``); BackendUnavailable when NVML
    does not answer, or the installed nvidia-ml-py's API differs (then nvidia-smi can still answer)."""
    try:
        return _nvml_session(nvml, warnings, per_gpu)
    except PYNVML_MISMATCH as err:
        warnings.append(f"the NVML backend raised {type(err).__name__}: {err}; falling back to nvidia-smi")
        raise BackendUnavailable(f"pynvml API mismatch ({type(err).__name__}: {err})") from err
