"""``nvidia-smi -q`` text read whole, as the tests use it: the header's versions and each GPU's facts record.

Kept with the tests, not in module_utils: gpu_facts reads ``-q -x``, and gpu_health, the one module that reads
``-q`` text, takes each GPU section from ``split_nvidia_smi_q`` and builds its record with ``q_gpu`` without the
header. The tests' captures of real hosts are ``-q`` text, so they are read with those same two functions.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import int_or_none, value_or_none
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import q_get, q_gpu, split_nvidia_smi_q


def parse_nvidia_smi_q(text: str) -> dict:
    """``{driver_version, cuda_driver_version, attached_gpus, gpus}``: the shape of ``parse_nvidia_smi_xml``."""
    head, blocks = split_nvidia_smi_q(text)
    return {
        "driver_version": value_or_none(q_get(head, "Driver Version")),
        "cuda_driver_version": value_or_none(q_get(head, "CUDA Version")),
        "attached_gpus": int_or_none(q_get(head, "Attached GPUs")),
        "gpus": [q_gpu(index, bus, tree) for index, (bus, tree) in enumerate(blocks)],
    }
