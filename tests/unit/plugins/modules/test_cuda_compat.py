"""cuda_compat module: main() answers without changing anything, incompatible is an answer, a branch is refused."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.modules import cuda_compat as module
from module_helpers import run_main


def test_module_reports_without_changing(capsys):
    code, result = run_main(
        module, {"driver_version": "535.104.05", "cuda_version": "12.4", "_ansible_check_mode": True}, capsys
    )
    assert code == 0
    assert (result["changed"], result["compatible"], result["mode"]) == (False, True, "minor_version")
    assert result["fabric_manager_match"] is None


def test_module_incompatible_is_an_answer_not_a_failure(capsys):
    code, result = run_main(module, {"driver_version": "470.82.01", "cuda_version": "12.0"}, capsys)
    assert code == 0
    assert (result["compatible"], result["mode"]) == (False, "incompatible")
    assert "failed" not in result


def test_module_fails_on_a_bare_branch(capsys):
    code, result = run_main(module, {"driver_version": "550", "cuda_version": "12.4"}, capsys)
    assert code == 1
    assert result["failed"] is True
    assert result["msg"].startswith("driver_version '550' is a branch, not a version")
