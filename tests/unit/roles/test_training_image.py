"""training_image: the CUDA base is checked against the driver pin, and the build context is right.

Runs the role's inputs entry point and install stage with ansible-playbook on localhost (no Docker);
the image build itself runs in the `compose` Molecule scenario when present there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ansible_env import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "training_image_render.yml"


def run(tmp_path: Path, extra: dict) -> subprocess.CompletedProcess:
    variables = {"training_image_build_dir": str(tmp_path / "ctx"), **extra}
    return run_playbook(PLAYBOOK, variables, tmp_path)


def test_cuda_12_2_on_driver_535_renders_a_multistage_non_root_context(tmp_path: Path) -> None:
    result = run(tmp_path, {"nvidia_driver_version": "535.261.03"})
    assert result.returncode == 0, result.stdout[-3000:]
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, flags=re.M)) == len(["deps", "runtime"])
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/cuda:12.2.2-cudnn8-runtime-ubuntu22.04" in dockerfile
    assert dockerfile.rstrip().splitlines()[-2] == "USER ${APP_UID}:${APP_GID}"
    assert 'org.gpuops.cuda-version="12.2.2"' in dockerfile
    assert "ARG APP_UID=1000" in dockerfile
    ignore = (tmp_path / "ctx" / ".dockerignore").read_text().splitlines()
    assert {"data", "datasets", "**/data", "**/datasets", "*.ckpt"} <= set(ignore)
    assert (tmp_path / "ctx" / "src" / "train.py").exists()
    assert (tmp_path / "ctx" / "config" / "train.yaml").exists()


def test_cuda_too_new_for_the_driver_fails_before_any_change(tmp_path: Path) -> None:
    result = run(tmp_path, {"nvidia_driver_version": "535.261.03",
                            "training_image_base": "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04"})
    assert result.returncode != 0
    assert "carries CUDA 13.0.0, which does not run on driver 535.261.03" in result.stdout
    assert "Fix: choose a base with CUDA 12.2 or older" in result.stdout
    assert not (tmp_path / "ctx").exists()


def test_minor_version_compat_refused_when_native_required(tmp_path: Path) -> None:
    base = "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    assert run(tmp_path / "a", {"nvidia_driver_version": "535.261.03", "training_image_base": base}).returncode == 0
    result = run(tmp_path / "b", {"nvidia_driver_version": "535.261.03", "training_image_base": base,
                                  "training_image_require_native": True})
    assert result.returncode != 0
    assert "runs only in minor_version mode on driver 535.261.03" in result.stdout


def test_a_base_without_a_cuda_tag_carries_gpuops_cuda_version(tmp_path: Path) -> None:
    # the one CUDA release (gpuops_cuda_version, the plan's pins.cuda); a base's cuda:<version> tag is read first
    result = run(tmp_path, {"nvidia_driver_version": "535.261.03", "gpuops_cuda_version": "12.1",
                            "training_image_base": "registry.lan/team/base:1.0"})
    assert result.returncode == 0, result.stdout[-3000:]
    assert 'org.gpuops.cuda-version="12.1"' in (tmp_path / "ctx" / "Dockerfile").read_text()


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"nvidia_driver_version": "535.261.03", "training_image_base": "nvcr.io/nvidia/cuda:latest"},
         "expected an explicit tag other than latest"),
        ({"training_image_base": "nvcr.io/nvidia/cuda:12.2.2-runtime-ubuntu22.04"}, "pin nvidia_driver_version"),
        ({"nvidia_driver_version": "535.261.03", "training_image_base": "registry.lan/team/base:1.0",
          "gpuops_cuda_version": ""}, "use a base tagged cuda:<version>"),
    ],
)
def test_unusable_inputs_are_refused(tmp_path: Path, extra: dict, fragment: str) -> None:
    result = run(tmp_path, extra)
    assert result.returncode != 0
    assert fragment in result.stdout, result.stdout[-3000:]
