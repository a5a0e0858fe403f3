"""gpu_facts imports a backend's code only when it tries that backend, and the topology parser only when it reads a
matrix (not to check a job size): a module run compiles each imported module_utils file from the payload, so a host
without a GPU (every node preflight asks) must not pay for parsers it never calls. Each case runs in a fresh
interpreter, so what it imports is what sys.modules shows after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts

REPO = Path(__file__).resolve().parents[4]
PKG = gpu_facts.__name__.rsplit(".", 1)[0]  # the module_utils package the fresh interpreter imports from
LAZY = ("gpu_facts_nvml", "gpu_facts_smi", "topology")

_SCRIPT = """
import json, sys
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
def no_pynvml():
    raise ImportError("No module named 'pynvml'")
case = sys.argv[1]
if case == "gather":
    smi = "/usr/bin/nvidia-smi" if sys.argv[2] == "smi" else None
    def run(argv):
        return 9, "", "NVIDIA-SMI has failed"
    gf.gather_gpu_facts(nvml_loader=no_pynvml, run=run, which=lambda name: smi if name == "nvidia-smi" else None,
                        sysfs_root=sys.argv[3], proc_root=sys.argv[3], topology=True,
                        gpus_per_job=int(sys.argv[4]) if sys.argv[5:] else None)
print(json.dumps(sorted(name.rsplit(".", 1)[1] for name in sys.modules if name.startswith(sys.argv[-1]))))
"""


def _imported(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "collections")}  # collections/ansible_collections/gpuops/cluster
    out = subprocess.run([sys.executable, "-c", _SCRIPT, *args, PKG + "."], check=False, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1])) & set(LAZY)


def test_loading_gpu_facts_imports_no_backend_parser() -> None:
    assert _imported("load") == set()


def test_a_host_without_pynvml_and_nvidia_smi_imports_none(tmp_path: Path) -> None:
    assert _imported("gather", "none", str(tmp_path)) == set()


def test_nvidia_smi_found_imports_its_parsers_only(tmp_path: Path) -> None:
    assert _imported("gather", "smi", str(tmp_path)) == {"gpu_facts_smi"}


def test_a_job_size_is_checked_without_the_topology_parser(tmp_path: Path) -> None:
    assert _imported("gather", "none", str(tmp_path), "2") == set()
