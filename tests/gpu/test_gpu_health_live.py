"""gpu_health on a real GPU host (issue 20): a sweep of a healthy GPU reads every NVML field and says healthy.

Skipped, with the reason, where there is no GPU (no ``nvidia-smi`` in PATH, or NVML cannot initialise). The kernel
log is replaced by an empty text so that an old event on a lent machine does not decide the verdict; DCGM is not
run (level 0): the machine need not have it. Set ``GPUOPS_LIVE_OUT=<dir>`` to keep each sweep (JSON) for review,
with the seconds the NVML sweep took (what NVML adds per host, issue 19).
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_state import COUNTERS, empty_state

from .live import keep, listed_nonempty, run
from .test_gpu_facts_live import NO_NVML, NO_SMI

needs_smi = pytest.mark.skipif(NO_SMI is not None, reason=str(NO_SMI))
needs_nvml = pytest.mark.skipif(NO_NVML is not None, reason=str(NO_NVML))

# Fields NVML gives on every data-centre GPU unless it answers NotSupported (page retirement on A100 and newer,
# issue 36); the NVLink counters only where the GPU has links.
NVLINK_FIELDS = {key for key in empty_state() if key.startswith("nvlink_")}
ALWAYS_FIELDS = set(empty_state()) - NVLINK_FIELDS - {"throttle_sw_power_cap"}


def sweep(backend: str) -> dict:
    started = time.perf_counter()
    result = gpu_health.sweep(run, shutil.which, kernel_log_text="", dcgm_level=0, backend=backend)
    seconds = time.perf_counter() - started
    keep(f"gpu_health_{backend}.json", {"backend": backend, "seconds": round(seconds, 3), "result": result})
    return result


@needs_nvml
def test_a_healthy_gpu_is_healthy_with_every_nvml_field_read():
    result = sweep("nvml")
    assert result["state_source"] == "nvml"
    assert result["read_ok"] is True
    for gpu in listed_nonempty(result["gpus"], "GPU in the NVML sweep"):
        assert gpu["unread"] == [], f"GPU {gpu['index']}: error counters not read: {gpu['unread']}"
        unread = sorted(
            key for key in ALWAYS_FIELDS if gpu["state"].get(key) is None and key not in gpu["not_supported"]
        )
        assert unread == [], f"GPU {gpu['index']}: NVML fields neither read nor not supported: {unread}"
        links = gpu["state"]["nvlink_links_active"]
        if links:  # a GPU with active NVLink links reports their error counters too
            assert all(gpu["state"][key] is not None for key in NVLINK_FIELDS), gpu["state"]
    assert result["verdict"] == "healthy", json.dumps(result["findings"], indent=1)
    assert result["events"] == []


@needs_smi
@needs_nvml
def test_nvml_and_nvidia_smi_agree_on_the_counters_that_decide_a_verdict():
    nvml = {gpu["index"]: gpu for gpu in sweep("nvml")["gpus"]}
    smi = {gpu["index"]: gpu for gpu in sweep("nvidia-smi")["gpus"]}
    listed_nonempty(nvml, "GPU in the NVML sweep")
    assert set(nvml) == set(smi)
    for index, gpu in nvml.items():
        for key in ("ecc_uncorrectable_aggregate", "row_remap_failure", "row_remap_pending", "persistence_mode"):
            got = (gpu["state"][key], smi[index]["state"][key])
            assert got[0] == got[1], f"GPU {index} {key}: NVML {got[0]!r}, nvidia-smi {got[1]!r}"
        # the two backends agree on which error counters the GPU does not have (page retirement on Hopper)
        got = [sorted(set(COUNTERS) & set(entry["not_supported"])) for entry in (gpu, smi[index])]
        assert got[0] == got[1], f"GPU {index} not supported: NVML {got[0]}, nvidia-smi {got[1]}"
