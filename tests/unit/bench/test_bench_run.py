"""bench/run.py (make bench, part 1) runs through every table on small sizes: the names it calls in the collection
exist (3c4fd16 moved the nvidia-smi parsers out of gpu_facts, and `make bench` then failed on table 2 unseen).

No figure is checked: the tables are measured by `make bench`, not by a test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import run
from conftest import shared_path


@pytest.fixture
def small(monkeypatch):
    """One quick repeat of each measurement, on the smallest sizes."""
    for name, value in {"REPEAT": 1, "SPAWN_REPEAT": 1, "MIN_SECONDS": 0.0, "FLEET_GPUS": (1, 8), "FLEET_HOSTS": 8,
                        "SYNTHETIC_GPUS": (8,), "TABLES": []}.items():
        monkeypatch.setattr(run, name, value)
    return run.TABLES


def test_every_table_runs_on_small_sizes(small, monkeypatch):
    monkeypatch.setattr(run, "QUERY_XML", shared_path("nvidia-smi", "query", run.QUERY_XML.name))
    monkeypatch.setattr(run, "TOPO_DIR", shared_path("nvidia-smi", "topo"))
    run.bench_topology()
    run.bench_gather()
    run.bench_preflight()
    run.bench_nvml()
    titles = [table["title"].split(".", 1)[0] for table in small]
    assert titles == ["1a", "1b", "2", "3", "4"]
    assert [len(table["rows"]) for table in small[2:4]] == [2, 5], "table 2: one row per size; 3: four kinds + all"


def test_table_4_is_skipped_with_the_reason_without_a_gpu(small, monkeypatch):
    monkeypatch.setattr(run.live, "NO_GPU", "no nvidia-smi in PATH: not a GPU host")  # tests/gpu/live.py's
    assert run.bench_nvml() is False
    assert small[-1]["note"] == "skipped: no nvidia-smi in PATH: not a GPU host"


def test_run_py_imports_as_make_bench_starts_it():
    """`python bench/run.py` starts with only bench/ on its path: the collection and tests/gpu's probe must come from
    the paths it adds itself (here the test run has both on its path already)."""
    bench = str(run.REPO / "bench")
    code = f"import sys; sys.path[0] = {bench!r}; import run; print(run.live.__name__, run.GF.__name__)"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, check=False)
    assert proc.stdout.split() == ["gpu.live", "ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts"], (
        proc.stderr
    )
