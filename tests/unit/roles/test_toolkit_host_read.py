"""nvidia_container_toolkit's one read of the host (roles/nvidia_container_toolkit/tasks/assert.yml) and the CDI default
(vars/main.yml). The probe prints the runtime programs found on PATH and whether the nvidia driver is loaded; the
role variables derive from its lines which runtimes are installed and, for nvidia_container_toolkit_cdi: auto,
whether to generate the CDI spec: the plan's gpus_present (issue 37: the plan decides whether a host has a GPU, no
gpu_facts call in the role) and the driver loaded now. The inputs pass (tasks/inputs.yml) reads the host only for
nvidia_container_toolkit_missing_runtime: fail. The role's YAML is templated as Ansible templates it (ansible-core's
Templar, on the files as Ansible loads them) and the probe's shell runs here, on a PATH and a /proc file of the test's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_container_toolkit"
VERSION_FILE = "/proc/driver/nvidia/version"
LOADER = DataLoader()
ASSERT = LOADER.load_from_file(str(ROLE / "tasks" / "assert.yml"))
PROBE = next(task for task in ASSERT if task.get("register") == "__nvidia_container_toolkit_host")
# The role's defaults and vars, with the shared ones every play imports (_gpuops_vars: gpuops_plan_host).
ROLE_VARS = {**LOADER.load_from_file(str(ROLE.parent / "_gpuops_vars" / "vars" / "main.yml")),
             **LOADER.load_from_file(str(ROLE / "defaults" / "main.yml")),
             **LOADER.load_from_file(str(ROLE / "vars" / "main.yml"))}


def _trusted(value):
    """``value`` with its strings trusted as templates, as Ansible trusts a role's vars files."""
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    return trust_as_template(value) if isinstance(value, str) else value


def _templar(**variables) -> Templar:
    return Templar(loader=LOADER, variables={**_trusted(ROLE_VARS), "inventory_hostname": "gpu1", **variables})


def _probe(tmp_path: Path, programs: list[str], driver_loaded: bool, runtimes: list[str]) -> list[str]:
    """The probe's lines on a PATH holding only ``programs``, with the driver's version file there or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in programs:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    version = tmp_path / "version"
    if driver_loaded:
        version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03\n")
    argv = _templar(nvidia_container_toolkit_runtimes=runtimes).template(
        trust_as_template(PROBE["ansible.builtin.command"]["argv"]))
    assert VERSION_FILE in argv[2], "the probe reads whether the nvidia driver is loaded"
    argv[:3] = [shutil.which("sh"), argv[1], argv[2].replace(VERSION_FILE, str(version))]
    run = subprocess.run(argv, capture_output=True, text=True, check=True, env={"PATH": str(bin_dir)})
    return run.stdout.splitlines()


def _plan(gpus_present: bool | None) -> dict:
    return {"source": "preflight", "hosts": {"gpu1": {"gpus_present": gpus_present}}}


def test_the_probe_finds_each_runtime_and_the_loaded_driver(tmp_path: Path) -> None:
    lines = _probe(tmp_path, ["dockerd", "docker", "containerd"], True, ["docker", "containerd"])
    assert sorted(lines) == ["containerd", "docker", "dockerd", "nvidia-driver-loaded"]
    installed = _templar(__nvidia_container_toolkit_host={"stdout_lines": lines}).template(
        trust_as_template("{{ _nvidia_container_toolkit_installed }}"))
    assert installed == {"docker": True, "containerd": True}


def test_docker_needs_the_daemon_and_the_cli_and_no_driver_shows_none(tmp_path: Path) -> None:
    lines = _probe(tmp_path, ["dockerd"], False, ["docker", "containerd"])
    assert lines == ["dockerd"]
    installed = _templar(__nvidia_container_toolkit_host={"stdout_lines": lines}).template(
        trust_as_template("{{ _nvidia_container_toolkit_installed }}"))
    assert installed == {"docker": False, "containerd": False}


@pytest.mark.parametrize(("cdi", "gpus_present", "driver_loaded", "enabled"), [
    ("auto", True, True, True),
    ("auto", True, False, False),  # the driver is not loaded (yet): nothing for nvidia-ctk to list
    ("auto", False, True, False),  # the plan says no GPU: the driver's state does not overrule it
    ("auto", None, True, True),  # not read (a plan from the inventory alone): the loaded module shows a GPU
    ("auto", None, False, False),
    (True, False, False, True),
    (False, True, True, False),
])
def test_the_cdi_default_is_the_plans_gpu_and_the_loaded_driver(cdi, gpus_present, driver_loaded, enabled) -> None:
    lines = ["dockerd", "docker"] + (["nvidia-driver-loaded"] if driver_loaded else [])
    decided = _templar(gpuops_plan=_plan(gpus_present), nvidia_container_toolkit_cdi=cdi,
                       __nvidia_container_toolkit_host={"stdout_lines": lines},
                       ansible_facts={"gpu": {"present": not gpus_present, "driver_loaded": not driver_loaded}},
                       ).template(trust_as_template("{{ _nvidia_container_toolkit_cdi_enabled }}"))
    assert decided is enabled


def test_no_gpu_facts_call_in_the_role() -> None:
    calls = [str(path.relative_to(ROLE)) for part in ("tasks", "vars", "defaults") for path in (ROLE / part).rglob("*")
             if "gpu_facts" in path.read_text(encoding="utf-8")]
    assert calls == [], f"{calls} call or read gpu_facts; the plan holds gpus_present, the probe reads the driver"


@pytest.mark.parametrize(("inputs_pass", "missing_runtime", "probes"), [
    (True, "skip", False),
    (True, "fail", True),
    (False, "skip", True),
    (False, "fail", True),
])
def test_the_inputs_pass_reads_the_host_only_for_missing_runtime_fail(inputs_pass, missing_runtime, probes) -> None:
    inputs = LOADER.load_from_file(str(ROLE / "tasks" / "inputs.yml"))
    imported = next(task for task in inputs if task.get("ansible.builtin.import_tasks") == "assert.yml")
    variables = {**(imported.get("vars") or {} if inputs_pass else {}),
                 "nvidia_container_toolkit_missing_runtime": missing_runtime}
    assert _templar(**variables).evaluate_conditional(trust_as_template(PROBE["when"])) is probes
