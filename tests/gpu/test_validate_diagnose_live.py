"""validate.yml and diagnose.yml on this GPU host, through gpuops-run (`make gpu-test`).

The host is its own inventory (gpu_nodes: localhost, local connection, compose platform). validate must
list every GPU from a CUDA container and launch a CUDA kernel (Docker with the NVIDIA runtime and the
images reachable, or overridden with -e through GPUOPS_VALIDATE_EXTRA, a JSON dict); with more than one GPU
nccl-tests runs too and its row must be ok with a measured bus bandwidth, with one GPU it is skipped saying so.
On a GPU host without Docker, validate must name that as the cause ("Docker ... not installed"); the test checks
that, then skips the CUDA-container checks with that reason. diagnose must find no broken node link (nvidia-smi,
driver, Fabric Manager), whether the walk stops above them (they are then listed below the first broken link) or
not. Skipped, with the reason, where no NVIDIA kernel module is loaded.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from .live import LISTED, NO_GPU, gpuops_run, listed_nonempty

PROC_VERSION = "/proc/driver/nvidia/version"
pytestmark = pytest.mark.skipif(
    not os.path.exists(PROC_VERSION), reason=f"no NVIDIA kernel module loaded ({PROC_VERSION} absent): not a GPU host"
)


def test_validate_runs_cuda_on_every_gpu(inventory, tmp_path):
    assert LISTED, f"the NVIDIA kernel module is loaded but `nvidia-smi -L` lists no GPU ({NO_GPU})"
    reports = tmp_path / "reports"
    run = gpuops_run(
        "validate",
        inventory,
        tmp_path / "a",
        "-e",
        f"gpuops_report_dir={reports}",
        "-e",
        "validate_fail_on_failed=false",
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    [run_dir] = list((reports / "validate").iterdir())
    report = json.loads((run_dir / "localhost.validate.json").read_text())["validate"]
    rows = {r["step"]: r for r in listed_nonempty(report, "row in validate's report")}
    if shutil.which("docker") is None:
        container = rows["CUDA container runs nvidia-smi"]
        said = container["detail"].lower()
        assert container["status"] != "ok", container
        named = ("docker" in said, "not installed" in said)
        assert named == (True, True), f"validate does not name the missing Docker as the cause: {container}"
        pytest.skip(
            "Docker not installed on this GPU host: validate names it as the cause (checked above); the "
            "CUDA container, CUDA kernel and NCCL checks need it"
        )
    assert rows["CUDA container runs nvidia-smi"]["status"] == "ok", rows
    assert rows["CUDA kernel launch (vectorAdd)"]["status"] == "ok", rows
    nccl = rows["NCCL all_reduce_perf"]
    if len(LISTED) > 1:  # the row holds the measured bus bandwidth (every report holds an <svg>: no proof of NCCL)
        assert (nccl["status"], "peak busbw" in nccl["detail"]) == ("ok", True), nccl
    else:
        assert (nccl["status"], "one GPU" in nccl["detail"]) == ("skipped", True), nccl


def test_diagnose_finds_no_broken_node_link(inventory, tmp_path):
    run = gpuops_run("diagnose", inventory, tmp_path / "a", "-e", "diagnose_fail_on_broken=false")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    stdout = (tmp_path / "a" / "runner" / "artifacts" / "run" / "stdout").read_text()
    for link in ("nvidia-smi", "driver", "fabric manager"):
        assert f"ok       {link}" in stdout, f"{link} link not ok:\n{stdout[-4000:]}"
