"""What NVML adds per host (issue 19), on a real GPU host: bench/run.py's table 4, where each backend gathers in a
fresh interpreter as one module run does.

Not a timed test: nothing passes or fails on a time. It checks that each backend answers in a fresh interpreter and
that all three find the same number of GPUs, and keeps the table under ``GPUOPS_LIVE_OUT`` (JSON) for review;
``make bench`` on the GPU host records the same table in bench/results.json. Skipped, with the reason, without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from .live import listed_nonempty
from .test_gpu_facts_live import NO_NVML

BENCH = Path(__file__).resolve().parents[2] / "bench"
needs_nvml = pytest.mark.skipif(NO_NVML is not None, reason=str(NO_NVML))


def _bench_run():
    """bench/run.py as a module (it imports bench/_meta.py from its own folder)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("gpuops_bench_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_nvml
def test_each_backend_answers_in_a_fresh_interpreter_and_finds_the_same_gpus():
    bench = _bench_run()
    ran = bench.bench_nvml()  # it asks no_gpu_reason() itself; a skip's note holds the reason
    table = bench.TABLES[-1]
    assert ran is True, table["note"]
    out = os.environ.get("GPUOPS_LIVE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "nvml_cost.json").write_text(json.dumps(table, indent=2))
    answers = {row[0]: row[1].split() for row in listed_nonempty(table["rows"], "row in the NVML cost table")}
    assert list(answers) == list(bench.NVML_BACKENDS)
    assert {backend: source for backend, (source, _count) in answers.items()} == {
        "pci": "pci",
        "nvidia-smi": "nvidia-smi",
        "nvml": "nvml",
    }
    counts = {count for _source, count in answers.values()}
    assert len(counts) == 1, answers
    assert counts != {"0"}, answers
