"""training_image: the CUDA base is checked against the driver pin, and the build context is right.

Runs the role's inputs entry point and install stage with ansible-playbook on the controller (no Docker), every case
a host of one run (``CASES``, case_hosts.py): a refusal stops its own host only. The image build itself runs in the
`compose` Molecule scenario when present there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from case_hosts import Case, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "training_image_render.yml"
DRIVER = {"nvidia_driver_version": "535.261.03"}
MINOR = {**DRIVER, "training_image_base": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"}
UNUSABLE = {
    "latest": ({**DRIVER, "training_image_base": "nvcr.io/nvidia/cuda:latest"},
               "expected an explicit tag other than latest"),
    "no_driver_pin": ({"training_image_base": "nvcr.io/nvidia/cuda:12.2.2-runtime-ubuntu22.04"},
                      "pin nvidia_driver_version"),
    "no_cuda_version": ({**DRIVER, "training_image_base": "registry.lan/team/base:1.0", "gpuops_cuda_version": ""},
                        "use a base tagged cuda:<version>"),
}
CASES = {
    "cuda_12_2": DRIVER,
    "too_new": {**DRIVER, "training_image_base": "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04"},
    "minor_compat": MINOR,
    "minor_compat_native": {**MINOR, "training_image_require_native": True},
    "no_cuda_tag": {**DRIVER, "gpuops_cuda_version": "12.1", "training_image_base": "registry.lan/team/base:1.0"},
    **{name: variables for name, (variables, _fragment) in UNUSABLE.items()},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Case]]:
    """The folder under which each case's build context is (``<case>/ctx``), and each case's outcome."""
    tmp_path = tmp_path_factory.mktemp("training_image")
    cases = {name: {"training_image_build_dir": str(tmp_path / name / "ctx"), **variables}
             for name, variables in CASES.items()}
    return tmp_path, run_cases(PLAYBOOK, cases, tmp_path).cases


def outcome(runs: tuple[Path, dict[str, Case]], case: str, *, refused: bool) -> tuple[Path, Case]:
    """The case's build context folder and outcome, once its host passed or failed as expected."""
    tmp_path, cases = runs
    assert cases[case].failed is refused, cases[case].text[-3000:]
    return tmp_path / case / "ctx", cases[case]


def test_every_case_ran_as_a_host_of_its_own(runs) -> None:
    assert set(runs[1]) == set(CASES)
    assert all(case.statuses for case in runs[1].values())


def test_cuda_12_2_on_driver_535_renders_a_multistage_non_root_context(runs) -> None:
    ctx, _case = outcome(runs, "cuda_12_2", refused=False)
    dockerfile = (ctx / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, flags=re.M)) == len(["deps", "runtime"])
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/cuda:12.2.2-cudnn8-runtime-ubuntu22.04" in dockerfile
    assert dockerfile.rstrip().splitlines()[-2] == "USER ${APP_UID}:${APP_GID}"
    assert 'org.gpuops.cuda-version="12.2.2"' in dockerfile
    assert "ARG APP_UID=1000" in dockerfile
    ignore = (ctx / ".dockerignore").read_text().splitlines()
    assert {"data", "datasets", "**/data", "**/datasets", "*.ckpt"} <= set(ignore)
    assert (ctx / "src" / "train.py").exists()
    assert (ctx / "config" / "train.yaml").exists()


def test_cuda_too_new_for_the_driver_fails_before_any_change(runs) -> None:
    ctx, case = outcome(runs, "too_new", refused=True)
    assert "carries CUDA 13.0.0, which does not run on driver 535.261.03" in case.text
    assert "Fix: choose a base with CUDA 12.2 or older" in case.text
    assert not ctx.exists()


def test_minor_version_compat_refused_when_native_required(runs) -> None:
    outcome(runs, "minor_compat", refused=False)
    _ctx, case = outcome(runs, "minor_compat_native", refused=True)
    assert "runs only in minor_version mode on driver 535.261.03" in case.text


def test_a_base_without_a_cuda_tag_carries_gpuops_cuda_version(runs) -> None:
    # the one CUDA release (gpuops_cuda_version, the plan's pins.cuda); a base's cuda:<version> tag is read first
    ctx, _case = outcome(runs, "no_cuda_tag", refused=False)
    assert 'org.gpuops.cuda-version="12.1"' in (ctx / "Dockerfile").read_text()


@pytest.mark.parametrize("case", list(UNUSABLE))
def test_unusable_inputs_are_refused(runs, case: str) -> None:
    _ctx, found = outcome(runs, case, refused=True)
    assert UNUSABLE[case][1] in found.text, found.text[-3000:]
