"""burnin's node selection (roles/burnin/vars/main.yml): every node the plan holds GPUs on is burnt in and judged,
but only the nodes with GPUs found now are paired. A node that lost all its GPUs still fails by its own checks
(burnin.judge_node's count); paired, its PyTorchJobs would stay Pending until burnin_timeout on Kubernetes.
The role's Jinja is evaluated here as Ansible templates it (native types), with the collection's own filters,
without a playbook run."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.plugins.filter.core import combine
from ansible_collections.gpuops.cluster.plugins.filter.burnin import FilterModule
from jinja2.nativetypes import NativeEnvironment

VARS = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles" / "burnin" / "vars" / "main.yml").read_text())
CONFIG = {"burnin_namespace": "gpuops-burnin", "image": "gpuops/nccl-tests-mpi:2.19.6",
          "nccl_tests_dir": "/opt/nccl-tests", "burnin_min_bytes": "8M", "burnin_max_bytes": "1G",
          "burnin_ssh_port": 2222, "ssh_secret": "gpuops-burnin-ssh", "burnin_shm_size": "16Gi", "burnin_timeout": 1800}


def _selection(found: dict[str, int]) -> dict:
    """_burnin_node_gpus, _burnin_nodes and _burnin_pairs for nodes the plan holds 8 GPUs on, with ``found`` now."""
    environment = NativeEnvironment()
    environment.filters.update({"combine": combine, **{f"gpuops.cluster.{name}": f
                                                       for name, f in FilterModule().filters().items()}})
    values = {"ansible_play_hosts": list(found),
              "gpuops_plan": {"hosts": {n: {"gpu_count": 8, "topology": None} for n in found}},
              "hostvars": {n: {"ansible_facts": {"gpu": {"count": count, "gpus": [{"name": "NVIDIA H100"}] * count}}}
                           for n, count in found.items()}}
    for name in ("_burnin_node_gpus", "_burnin_nodes", "_burnin_pairs"):
        values[name] = environment.from_string(VARS[name]).render(**values)
    return values


def test_a_node_that_lost_all_its_gpus_is_judged_but_not_paired():
    selection = _selection({"gpu-1": 8, "gpu-2": 0, "gpu-3": 8, "gpu-4": 8})
    assert selection["_burnin_nodes"] == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    assert [n["planned"] for n in selection["_burnin_node_gpus"]] == [8, 8, 8, 8]
    assert selection["_burnin_pairs"] == [["gpu-1", "gpu-3"], ["gpu-3", "gpu-4"], ["gpu-1", "gpu-4"]]
    objects = FilterModule().filters()["burnin_objects"](selection["_burnin_node_gpus"], selection["_burnin_pairs"],
                                                         CONFIG)
    assert not [o["metadata"]["name"] for o in objects if "gpu-2" in o["metadata"]["name"]]


def test_every_node_with_gpus_is_paired():
    assert _selection({"gpu-1": 8, "gpu-2": 7})["_burnin_pairs"] == [["gpu-1", "gpu-2"]]
