"""gpu_topology module: main() with a given matrix or a faked nvidia-smi, check mode, and its refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.modules import gpu_topology
from conftest import shared_path
from module_helpers import assert_warnings, run_main


def capture(name: str) -> str:
    return shared_path("nvidia-smi", "topo", f"{name}.txt").read_text(encoding="utf-8")


def run_module(monkeypatch, capsys, args: dict, *, bin_path: str | None = "/usr/bin/nvidia-smi",
               command=None) -> SimpleNamespace:
    """Run gpu_topology.main() (module_helpers.run_main) with a fake get_bin_path/run_command: ``failed``, ``result``
    (without what exit_json adds: ansible's ``invocation`` echo, and ``warnings``, whose form is ansible-core's; the
    module returns them as ``topology_warnings``) and the commands it ran, each with its effective environment."""
    calls: list[tuple] = []

    def fake_run_command(self, argv, **kwargs):
        calls.append((argv, {**self.run_command_environ_update, **kwargs.get("environ_update", {})}))
        return command if command is not None else (127, "", "not expected to run")

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
    code, result = run_main(gpu_topology, args, capsys)
    result.pop("invocation")
    result.pop("warnings", None)
    return SimpleNamespace(failed=code == 1, result=result, calls=calls)


def expected_module_result(text: str, per_job: int | None) -> dict:
    facts = parse_topology(text, per_job)
    facts["topology_warnings"] = facts.pop("warnings")
    return {"changed": False, **facts}


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check_mode"])
def test_module_reads_given_matrix(monkeypatch, capsys, check_mode):
    text = capture("dgx-a100_8gpu_10nic_nps4-numa_dgx05")
    outcome = run_module(monkeypatch, capsys, {"matrix": text, "gpus_per_job": 2, "_ansible_check_mode": check_mode})
    assert not outcome.failed
    assert outcome.result == expected_module_result(text, 2)
    assert outcome.result["placements"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert outcome.calls == []


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check_mode"])
def test_module_runs_nvidia_smi(monkeypatch, capsys, check_mode):
    text = capture("h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453")
    outcome = run_module(monkeypatch, capsys, {"_ansible_check_mode": check_mode}, command=(0, text, ""))
    assert not outcome.failed
    assert outcome.result == expected_module_result(text, None)
    assert outcome.result["topology_warnings"]  # this capture is truncated
    [(argv, environ)] = outcome.calls
    assert argv == ["/usr/bin/nvidia-smi", "topo", "-m"]
    assert environ["LC_ALL"] == "C"


def test_module_reads_driver580_underlined_header_h200(monkeypatch, capsys):
    """What failed on the H200 ("no `nvidia-smi topo -m` matrix found"): driver 580 underlines the header even into
    a pipe (../shared/data/nvidia-smi/h200-driver580/topo-m.pipe.txt, as recorded)."""
    text = shared_path("nvidia-smi", "h200-driver580", "topo-m.pipe.txt").read_text(encoding="utf-8")
    assert "\x1b[4mGPU0" in text
    outcome = run_module(monkeypatch, capsys, {}, command=(0, text, ""))
    assert not outcome.failed
    assert [(g["index"], g["cpu_affinity"], g["numa_node"]) for g in outcome.result["gpus"]] == [(0, "0-15", 0)]
    assert outcome.result["topology_warnings"] == []


def test_module_without_nvidia_smi_reports_no_gpus(monkeypatch, capsys):
    outcome = run_module(monkeypatch, capsys, {}, bin_path=None)
    assert not outcome.failed
    assert outcome.result["gpus"] == []
    assert outcome.result["nvlink_all_to_all"] is False
    assert_warnings(outcome.result["topology_warnings"], ["nvidia-smi is not on the PATH"])
    assert outcome.calls == []


def test_module_fails_when_nvidia_smi_fails(monkeypatch, capsys):
    output = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    outcome = run_module(monkeypatch, capsys, {}, command=(9, output, ""))
    assert outcome.failed
    assert "rc=9" in outcome.result["msg"]
    assert output in outcome.result["msg"]


def test_module_fails_on_text_without_matrix(monkeypatch, capsys):
    outcome = run_module(monkeypatch, capsys, {"matrix": "No devices were found"})
    assert outcome.failed
    assert "no `nvidia-smi topo -m` matrix found" in outcome.result["msg"]
    assert "Raw text: No devices were found" in outcome.result["msg"]


def test_module_empty_matrix_is_a_warning(monkeypatch, capsys):
    outcome = run_module(monkeypatch, capsys, {"matrix": ""})
    assert not outcome.failed
    assert outcome.result["gpus"] == []
    assert_warnings(outcome.result["topology_warnings"], ["empty input"])


@pytest.mark.parametrize("per_job", [0, -2])
def test_module_rejects_gpus_per_job_below_one(monkeypatch, capsys, per_job):
    outcome = run_module(monkeypatch, capsys, {"matrix": "x", "gpus_per_job": per_job})
    assert outcome.failed
    assert f"gpus_per_job is {per_job}" in outcome.result["msg"]
