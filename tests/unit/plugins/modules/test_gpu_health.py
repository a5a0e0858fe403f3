"""gpu_health module: main() with kernel_log_text and state_text (no GPU here) -- the held-out real lines, a real
nvidia-smi -q capture, the agreed result keys, check mode, and its refusals. No host command runs: every binary is
absent (get_bin_path answers None) and pynvml is not importable."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_state
from ansible_collections.gpuops.cluster.plugins.modules import gpu_health
from conftest import shared_path
from kernel_log_samples import HELD_OUT
from module_helpers import run_main

INTERFACE_KEYS = {"events", "cursor", "log_source", "gpus", "findings", "verdict", "state_source", "read_ok", "dcgm"}
EVENT_KEYS = {"kind", "code", "pci", "gpu", "immediate_action", "line", "time"}
GPU_KEYS = {"index", "pci", "uuid", "name", "verdict", "findings", "state"}
FINDING_KEYS = {"gpu", "check", "severity", "evidence", "action"}
A100 = ("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt")


@pytest.fixture(autouse=True)
def no_host(monkeypatch):
    def no_command(self, argv, **kwargs):
        raise AssertionError(f"gpu_health ran {argv} on the test machine")

    def no_pynvml():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", no_command)
    monkeypatch.setattr(gpu_health_state, "import_pynvml", no_pynvml)


def test_held_out_real_lines_give_kind_code_pci_and_action(capsys):
    text = "\n".join(sample.line for sample in HELD_OUT)
    rc, result = run_main(gpu_health, {"kernel_log_text": text, "dcgm_level": 0}, capsys)
    assert rc == 0, result
    expected = [(s.kind, s.code, s.pci, s.action) for s in HELD_OUT if s.kind is not None]
    got = [(e["kind"], e["code"], e["pci"], e["immediate_action"]) for e in result["events"]]
    assert got == expected
    assert (result["log_source"], result["cursor"]) == ("text", f"text:{len(text.splitlines())}")


def test_result_has_the_agreed_keys_and_a_real_capture_maps_events_to_gpus(capsys):
    state = shared_path(*A100).read_text()
    log = (
        "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:9e:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.\n"
    )
    args = {"kernel_log_text": log, "state_text": state, "dcgm_level": 0, "expected_gpus": 4}
    rc, result = run_main(gpu_health, args, capsys)
    assert rc == 0, result
    assert set(result) >= INTERFACE_KEYS
    assert (result["changed"], result["state_source"], result["read_ok"], result["verdict"]) == (
        False,
        "nvidia-smi",
        True,
        "failed",
    )
    (event,) = result["events"]
    assert set(event) >= EVENT_KEYS
    by_pci = {gpu["pci"]: gpu for gpu in result["gpus"]}
    sick = by_pci["00000000:9E:00.0"]
    assert event["gpu"] == sick["index"]
    assert all(set(gpu) >= GPU_KEYS for gpu in result["gpus"])
    # the real capture's GPU 9E also has a row remap pending: both findings are its own
    assert [(f["check"], f["severity"], f["action"]) for f in sick["findings"]] == [
        ("xid", "failed", "RESTART_BM"),
        ("row_remap_pending", "degraded", "RESET_GPU"),
    ]
    assert all(set(finding) >= FINDING_KEYS for finding in result["findings"])
    assert sorted(gpu["verdict"] for gpu in result["gpus"]) == ["failed", "healthy", "healthy", "healthy"]
    assert result["dcgm"]["ran"] is False


def test_an_xid_13_is_degraded_not_failed(capsys):
    log = "kernel: NVRM: Xid (PCI:0000:68:00): 13, pid=1234, name=python3, Graphics Exception"
    rc, result = run_main(
        gpu_health, {"kernel_log_text": log, "state_text": shared_path(*A100).read_text(), "dcgm_level": 0}, capsys
    )
    assert rc == 0, result
    assert [(f["gpu"], f["action"], f["severity"]) for f in result["findings"]] == [
        (0, "RESTART_APP", "degraded"),
        (1, "RESET_GPU", "degraded"),  # the capture's own row remap pending (GPU 9E is index 1)
    ]
    assert result["verdict"] == "degraded"


def test_fewer_gpus_than_expected(capsys):
    state = shared_path("nvidia-smi", "query", "h800-sxm_x8_nvidia-smi-q-i0_fabric-completed.txt").read_text()
    rc, result = run_main(
        gpu_health, {"kernel_log_text": "", "state_text": state, "expected_gpus": 8, "dcgm_level": 0}, capsys
    )
    assert rc == 0, result
    assert [(f["check"], f["gpu"], f["severity"]) for f in result["findings"]] == [("gpu_missing", None, "failed")]
    assert "expected 8 GPUs (expected_gpus), the driver lists 1" in result["findings"][0]["evidence"]


def test_replayed_text_since_its_cursor_reads_only_what_is_new(capsys):
    first = "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
    rc, result = run_main(gpu_health, {"kernel_log_text": first, "dcgm_level": 0}, capsys)
    assert rc == 0, result
    later = f"{first}\nNVRM: Xid (PCI:0000:01:00): 13, x"
    rc, again = run_main(
        gpu_health, {"kernel_log_text": later, "since_cursor": result["cursor"], "dcgm_level": 0}, capsys
    )
    assert [event["code"] for event in again["events"]] == [13]


def test_no_state_backend_answers_read_ok_false(capsys):
    rc, result = run_main(gpu_health, {"kernel_log_text": "", "dcgm_level": 1, "_ansible_check_mode": True}, capsys)
    assert rc == 0, result
    assert (result["changed"], result["read_ok"], result["state_source"], result["gpus"]) == (False, False, "none", [])
    assert result["verdict"] == "healthy"
    assert any(note.startswith("state: nvml:") for note in result["notes"])
    assert any("dcgmi is not installed" in note for note in result["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"expected_gpus": -1}, "expected_gpus is -1: it must be 0 or more"),
        ({"dcgm_level": 5}, "value of dcgm_level must be one of: 0, 1, 2, 3"),
        ({"backend": "nvml"}, "backend nvml cannot answer on this host"),
        ({"state_text": "not nvidia-smi output"}, "could not parse nvidia-smi -q output"),
    ],
)
def test_refusals_name_the_option_and_the_fix(capsys, args, message):
    rc, result = run_main(gpu_health, {"kernel_log_text": "", **args}, capsys)
    assert rc == 1
    assert message in result["msg"]
