"""gpu_facts on a real GPU host: the NVML and nvidia-smi backends, each on its own, must agree.

Skipped, with the reason, where there is no GPU: no ``nvidia-smi`` in PATH, or NVML cannot initialise.
Set ``GPUOPS_LIVE_OUT=<dir>`` to keep the facts each backend gathered (JSON) for review.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_smi as smi
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    FABRIC_ACTIVE_STATES,
    FABRIC_NOT_SUPPORTED,
)

from .live import keep, listed_nonempty, run
from .nvidia_smi_list import parse_nvidia_smi_list
from .nvidia_smi_q import parse_nvidia_smi_q

DOTTED = re.compile(r"^\d+\.\d+(\.\d+)?$")
BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


def _nvml_unavailable() -> str | None:
    """Why NVML cannot be used here, or None when it initialises."""
    try:
        pynvml = gf.import_pynvml()
    except ImportError as err:
        return f"pynvml (nvidia-ml-py) not importable: {err}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return f"NVML init failed ({err}): no GPU driver on this host"
    pynvml.nvmlShutdown()
    return None


NO_SMI = None if shutil.which("nvidia-smi") else "no nvidia-smi in PATH: not a GPU host"
NO_NVML = NO_SMI or _nvml_unavailable()
needs_smi = pytest.mark.skipif(NO_SMI is not None, reason=str(NO_SMI))
needs_nvml = pytest.mark.skipif(NO_NVML is not None, reason=str(NO_NVML))


def gather(backend: str) -> dict:
    facts, warnings = gf.gather_gpu_facts(backend=backend, run=run, which=shutil.which)
    keep(f"gpu_facts_{backend}.json", {"facts": facts, "warnings": warnings})
    assert warnings == [], warnings
    return facts


def check_shape(facts: dict, source: str) -> None:
    assert facts["source"] == source
    assert facts["present"] is True
    assert facts["count"] == len(facts["gpus"]) >= 1
    assert facts["driver_loaded"] is True
    assert DOTTED.match(facts["driver_version"] or ""), facts["driver_version"]
    assert DOTTED.match(facts["cuda_driver_version"] or ""), facts["cuda_driver_version"]
    for index, gpu in enumerate(listed_nonempty(facts["gpus"], f"GPU from {source}")):
        assert gpu["index"] == index
        assert gpu["name"]
        assert (gpu["uuid"] or "").startswith("GPU-"), gpu["uuid"]
        assert BUS_ID.match(gpu["pci_bus_id"] or ""), gpu["pci_bus_id"]
        assert gpu["memory_total_mib"] > 0
        assert gpu["mig_mode"] in ("Enabled", "Disabled", "N/A")
        assert gpu["persistence_mode"] in (True, False, None)
        assert gpu["numa_node"] is None or gpu["numa_node"] >= 0
        assert gpu["fabric"]["state"] in (None, *FABRIC_ACTIVE_STATES, FABRIC_NOT_SUPPORTED)
    fabric_manager = facts["fabric_manager"]
    assert isinstance(fabric_manager["required"], bool)
    assert fabric_manager["nvswitch_count"] >= 0
    json.dumps(facts)


@pytest.fixture(scope="module")
def nvml_facts() -> dict:
    return gather("nvml")


@pytest.fixture(scope="module")
def smi_facts() -> dict:
    return gather("nvidia-smi")


@needs_nvml
def test_nvml_backend(nvml_facts):
    check_shape(nvml_facts, "nvml")


@needs_smi
def test_nvidia_smi_backend(smi_facts):
    check_shape(smi_facts, "nvidia-smi")


@needs_nvml
def test_backends_agree(nvml_facts, smi_facts):
    listed_nonempty(nvml_facts["gpus"], "GPU from NVML")
    listed_nonempty(smi_facts["gpus"], "GPU from nvidia-smi")
    for key in ("count", "driver_version", "cuda_driver_version"):
        assert nvml_facts[key] == smi_facts[key], key
    for key in ("uuid", "pci_bus_id", "name", "mig_mode", "mig_mode_pending", "persistence_mode"):
        assert [gpu[key] for gpu in nvml_facts["gpus"]] == [gpu[key] for gpu in smi_facts["gpus"]], key
    assert [gpu["fabric"]["state"] for gpu in nvml_facts["gpus"]] == [
        gpu["fabric"]["state"] for gpu in smi_facts["gpus"]
    ]
    assert nvml_facts["fabric_manager"]["required"] == smi_facts["fabric_manager"]["required"]


@needs_nvml
def test_nvlink_counts_agree(nvml_facts, smi_facts):
    """NVML link states and `nvidia-smi nvlink -s` bandwidth lines count the same active links."""
    listed_nonempty(nvml_facts["gpus"], "GPU from NVML")
    assert [gpu["nvlink"] for gpu in nvml_facts["gpus"]] == [gpu["nvlink"] for gpu in smi_facts["gpus"]]


@needs_nvml
def test_auto_prefers_nvml(nvml_facts):
    facts, _warnings = gf.gather_gpu_facts(run=run, which=shutil.which)
    assert facts["source"] == "nvml"
    assert [gpu["uuid"] for gpu in facts["gpus"]] == [gpu["uuid"] for gpu in nvml_facts["gpus"]]


@needs_smi
def test_nvidia_smi_list_parses_this_host(smi_facts):
    """`nvidia-smi -L` on this host parses, and names the same GPUs (MIG devices listed under theirs)."""
    rc, out, err = run(["nvidia-smi", "-L"])
    assert rc == 0, err
    listed = listed_nonempty(parse_nvidia_smi_list(out), "GPU parsed from `nvidia-smi -L`")
    assert [gpu["uuid"] for gpu in listed] == [gpu["uuid"] for gpu in smi_facts["gpus"]]
    for gpu, facts_gpu in zip(listed, smi_facts["gpus"]):
        assert bool(gpu["mig_devices"]) <= (facts_gpu["mig_mode"] == "Enabled")


@needs_smi
def test_text_and_xml_forms_agree_on_this_host():
    """Plain `nvidia-smi -q` and `nvidia-smi -q -x` parse to the same GPUs on this driver."""
    rc_text, text, err_text = run(["nvidia-smi", "-q"])
    rc_xml, xml, err_xml = run(["nvidia-smi", "-q", "-x"])
    assert (rc_text, rc_xml) == (0, 0), (err_text, err_xml)
    from_text, from_xml = parse_nvidia_smi_q(text), smi.parse_nvidia_smi_xml(xml)
    listed_nonempty(from_text["gpus"], "GPU parsed from `nvidia-smi -q`")
    listed_nonempty(from_xml["gpus"], "GPU parsed from `nvidia-smi -q -x`")
    for key in ("driver_version", "cuda_driver_version", "attached_gpus"):
        assert from_text[key] == from_xml[key], key
    for key in ("uuid", "pci_bus_id", "name", "memory_total_mib", "mig_mode", "persistence_mode"):
        assert [gpu[key] for gpu in from_text["gpus"]] == [gpu[key] for gpu in from_xml["gpus"]], key
    assert [gpu["fabric"]["state"] for gpu in from_text["gpus"]] == [gpu["fabric"]["state"] for gpu in from_xml["gpus"]]
