"""gpuops.cluster.gpu_facts_common: the normalisers every backend shares (CUDA version, bus ids, fabric state).

The other gpu_facts tests, one file per backend: test_gpu_facts_{nvml,smi,sysfs}.py, and test_gpu_facts.py
for the order the backends are tried in and the topology call.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts_common as common


@pytest.mark.parametrize(
    ("value", "want"),
    [(12040, "12.4"), (12070, "12.7"), (11080, "11.8"), (13000, "13.0"), (12020, "12.2"), (0, None), (None, None)],
)
def test_cuda_version_from_int(value, want):
    assert common.cuda_version_from_int(value) == want


@pytest.mark.parametrize(
    ("value", "canonical", "sysfs"),
    [
        ("00000000:18:00.0", "00000000:18:00.0", "0000:18:00.0"),
        ("0000:ab:00.0", "00000000:AB:00.0", "0000:ab:00.0"),
        ("00000001:c1:00.1", "00000001:C1:00.1", "0001:c1:00.1"),
        ("not-a-bus-id", None, None),
    ],
)
def test_bus_id_forms(value, canonical, sysfs):
    assert common.canonical_bus_id(value) == canonical
    assert common.sysfs_bus_id(value) == sysfs


@pytest.mark.parametrize(
    ("states", "want"),
    [
        (["Completed", "Completed"], "Completed"),
        (["Completed", "In Progress", "Completed"], "In Progress"),
        (["In Progress", "Not Started"], "Not Started"),
        (["Not Supported", "Not Supported"], "Not Supported"),
        (["Completed", "Degraded"], "Degraded"),  # an unknown string is shown, not hidden
        ([None, None], None),
        ([], None),
    ],
)
def test_aggregate_fabric_state(states, want):
    assert common.aggregate_fabric_state(states) == want
