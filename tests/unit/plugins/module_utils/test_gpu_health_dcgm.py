"""gpu_health_dcgm: ``dcgmi diag -r <level> -j`` output read into flat results.

fixtures/dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt is the output NVIDIA's DCGM repository quotes as real ``dcgmi diag``
JSON (DCGM 3.1.0, 8 GPUs, every test PASS, ``null`` entries between tests and a warning line before the JSON) in its
unit test ``TEST_CASE("JsonResult: Deserialize real output")`` (NVIDIA/DCGM, Apache-2.0; search-index file id
43597584485), re-indented. The shape (``gpu_ids``, ``status`` PASS|FAIL|WARN|SKIP, optional ``warnings``) is the one
DCGM's nvvs JsonOutput documents; the failing cases below edit that real document in that shape.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_health_dcgm as dcgm
from gpu_facts_helpers import Commands

PASS_OUTPUT = (Path(__file__).resolve().parent / "fixtures" / "dcgmi-diag-r1-j_dcgm-3.1.0_8gpu-pass.txt").read_text()
GPUS = 8


def test_real_output_parses_every_result():
    parsed = dcgm.parse_dcgm_json(PASS_OUTPUT)
    assert parsed["version"] == "3.1.0"
    deployment = [item for item in parsed["results"] if item["category"] == "Deployment"]
    software = [item for item in parsed["results"] if item["test"] == "software"]
    assert [item["test"] for item in deployment][:2] == ["Denylist", "NVML Library"]
    assert all(item["gpus"] == list(range(GPUS)) for item in deployment)
    assert [item["gpus"] for item in software] == [[gpu] for gpu in range(GPUS)]
    assert {item["status"] for item in parsed["results"]} == {"pass"}


def _failing_output() -> str:
    document = json.loads(PASS_OUTPUT[PASS_OUTPUT.index("{") :])
    software = document["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"]
    software[3] = {"gpu_ids": 3, "status": "FAIL", "warnings": ["GPU 3 has uncorrectable memory errors"]}
    software[5] = {
        "gpu_ids": "5",
        "status": "Warn",
        "warnings": [{"warning": "Clocks are being throttled", "error_id": 9}],
    }
    return json.dumps(document)


def test_failures_and_warnings_keep_their_text():
    results = [item for item in dcgm.parse_dcgm_json(_failing_output())["results"] if item["status"] != "pass"]
    assert [(item["gpus"], item["status"], item["warnings"]) for item in results] == [
        ([3], "fail", ["GPU 3 has uncorrectable memory errors"]),
        ([5], "warn", ["Clocks are being throttled"]),
    ]


def test_run_dcgm_reads_the_json_even_when_dcgmi_exits_non_zero():
    commands = Commands({"dcgmi diag -r 2 -j": (226, _failing_output(), "")}, binaries=("dcgmi",))
    outcome = dcgm.run_dcgm(2, commands.run, commands.which)
    assert (outcome["ran"], outcome["level"], outcome["version"]) == (True, 2, "3.1.0")
    assert "exited 226" in outcome["reason"]


def test_reasons_when_diagnostics_do_not_run():
    absent = Commands(binaries=())
    no_engine = Commands(
        {"dcgmi diag -r 1 -j": (255, "Error: unable to establish a connection to the specified host: localhost", "")},
        binaries=("dcgmi",),
    )
    assert "dcgm_level is 0" in dcgm.run_dcgm(0, absent.run, absent.which)["reason"]
    assert "not installed" in dcgm.run_dcgm(1, absent.run, absent.which)["reason"]
    outcome = dcgm.run_dcgm(1, no_engine.run, no_engine.which)
    assert outcome["ran"] is False
    assert "nv-hostengine" in outcome["reason"]
    assert "unable to establish a connection" in outcome["reason"]
    assert absent.ran == []


def test_later_dcgm_root_and_top_level_tests_are_read():
    """Tolerance only: no real DCGM 4 output is captured here, so this document is written for the test."""
    text = json.dumps(
        {
            "DCGM Diagnostic": {
                "version": "4.2.3",
                "tests": [
                    {"name": "memory", "results": [{"entity_id": 1, "status": "Fail", "info": ["not enough memory"]}]}
                ],
            }
        }
    )
    (result,) = dcgm.parse_dcgm_json(text)["results"]
    assert (result["category"], result["test"], result["gpus"], result["status"]) == (None, "memory", [1], "fail")
