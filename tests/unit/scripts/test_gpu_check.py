"""scripts/gpu_check.py (`make gpu-check`): the report (each step with its exit code and seconds, the host, each skip
with its reason), its verdict and exit code, and the whole run on a machine without a GPU; bench/figures.py's
gpu-check block from a recorded report."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import figures
import pytest
from ci_skips import skip_by_design
from gpu import test_modules_live as module_live

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)

# what the probe answers on the H200 of issue 36 (../shared/data/nvidia-smi/h200-driver580/SOURCES.md)
H200 = {
    "gpu_model": "NVIDIA H200",
    "gpu_count": 1,
    "driver_version": "580.159.04",
    "cuda_version": "13.0",
    "nvml_version": "13.580.159.04",
    "source": "nvml",
    "no_gpu": None,
    "no_nvml": None,
}
NO_GPU = {**dict.fromkeys(gc.HOST_KEYS), "no_gpu": "no nvidia-smi in PATH"}
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="2" tests="3">
<testcase classname="tests.gpu.test_a" name="test_ok"/>
<testcase classname="tests.gpu.test_b" name="test_mps"><skipped message="not root: the MPS control daemon ..."/>
</testcase>
<testcase classname="tests.gpu.test_c" name="test_nccl"><skipped message="no all_reduce_perf (nccl-tests) in PATH"/>
</testcase>
</testsuite></testsuites>
"""


def ok(name: str, seconds: float = 1.0, *, gpu: bool = True) -> dict:
    return gc.step_record(name, gc.OK, 0, seconds, "exit 0", gpu=gpu)


def report(host: dict, steps: list) -> dict:
    return gc.build_report(host, steps, 1_700_000_000.0, 1_700_000_042.5)


def test_every_step_ok_on_a_gpu_host_passes_with_exit_0(tmp_path):
    steps = [ok("setup", gpu=False), ok("probe", gpu=False), ok("tests/gpu")]
    got = report(H200, steps)
    assert (got["passed"], gc.exit_code(got), got["why"]) == (True, 0, "every step passed")
    assert got["host"] == H200
    assert (got["seconds"], got["started"], got["ended"]) == (42, "2023-11-14T22:13:20Z", "2023-11-14T22:14:02Z")
    json_path, md_path = gc.write_report(got, tmp_path)
    assert json.loads(json_path.read_text()) == got
    text = md_path.read_text()
    assert text.startswith("# make gpu-check: PASSED")
    assert "| tests/gpu | ok | 0 | 1.0 | exit 0 |" in text
    assert "This `make gpu-check` ran on 1 x NVIDIA H200, driver 580.159.04, CUDA 13.0, NVML 13.580.159.04" in text
    no_nvml = report({**H200, "nvml_version": None, "no_nvml": "NVMLError: Not Supported"}, steps)
    assert "CUDA 13.0, NVML none (NVMLError: Not Supported)," in gc.markdown(no_nvml)


def test_a_failed_step_fails_the_run_naming_it_with_its_exit_code():
    bad = gc.step_record("preflight.yml", gc.FAILED, 2, 7.25, "exit 2: fatal: [localhost]: FAILED!", gpu=True)
    got = report(H200, [ok("setup", gpu=False), bad])
    assert (got["passed"], gc.exit_code(got), got["why"]) == (False, 1, "failed: preflight.yml")
    assert (got["steps"][1]["rc"], got["steps"][1]["seconds"]) == (2, 7.2)  # seconds to 0.1 s (7.25: round half even)
    assert "| preflight.yml | failed | 2 | 7.2 | exit 2: fatal: [localhost]: FAILED! |" in gc.markdown(got)


def test_without_a_gpu_the_run_fails_even_when_every_step_passed():
    got = report(NO_GPU, [ok("setup", gpu=False), ok("probe", gpu=False), ok("tests/gpu")])
    assert (got["passed"], gc.exit_code(got)) == (False, 1)
    assert got["why"] == "no GPU on this host (no nvidia-smi in PATH): a GPU acceptance run needs one"


def test_the_tests_step_lists_each_skip_with_its_reason_and_is_skipped_when_nothing_ran(tmp_path):
    junit = tmp_path / "tests-gpu.xml"
    junit.write_text(JUNIT)
    step = gc.judge_tests(gc.step_record("tests/gpu", gc.OK, 0, 3.0, "exit 0", gpu=True), junit)
    assert (step["status"], step["detail"]) == ("ok", "1 passed, 0 failed, 2 skipped")
    assert step["skips"] == [
        {"test": "tests.gpu.test_b::test_mps", "reason": "not root: the MPS control daemon ..."},
        {"test": "tests.gpu.test_c::test_nccl", "reason": "no all_reduce_perf (nccl-tests) in PATH"},
    ]
    got = report(H200, [step])
    assert [(s["step"], s["test"], s["reason"]) for s in got["skips"]] == [
        ("tests/gpu", "tests.gpu.test_b::test_mps", "not root: the MPS control daemon ..."),
        ("tests/gpu", "tests.gpu.test_c::test_nccl", "no all_reduce_perf (nccl-tests) in PATH"),
    ]
    assert "- tests/gpu: no all_reduce_perf (nccl-tests) in PATH (`tests.gpu.test_c::test_nccl`)" in gc.markdown(got)
    junit.write_text(
        JUNIT.replace('<testcase classname="tests.gpu.test_a" name="test_ok"/>', "").replace('tests="3"', 'tests="2"')
    )
    step = gc.judge_tests(gc.step_record("tests/gpu", gc.OK, 0, 3.0, "exit 0", gpu=True), junit)
    assert (step["status"], step["detail"]) == ("skipped", "no test ran: 2 skipped, each with its reason below")
    failed = gc.judge_tests(gc.step_record("tests/gpu", gc.FAILED, 1, 3.0, "exit 1: 1 failed", gpu=True), junit)
    assert (failed["status"], failed["detail"]) == ("failed", "0 passed, 0 failed, 2 skipped (exit 1: 1 failed)")


def test_a_command_that_fails_is_recorded_with_its_exit_code_and_last_line(tmp_path):
    step = gc.run_commands(
        "setup",
        [["true"], [sys.executable, "-c", "print('pip: no matching distribution'); raise SystemExit(3)"], ["false"]],
        tmp_path,
        dict(os.environ),
        gpu=False,
    )
    assert (step["status"], step["rc"], step["detail"]) == ("failed", 3, "exit 3: pip: no matching distribution")
    assert "false" not in (tmp_path / step["log"]).read_text().splitlines()[-1]  # stopped at the first failure


def test_wheels_set_up_installs_with_no_index_from_the_directory():
    commands = gc.setup_commands(Path("/srv/wheels"))
    installs = [argv for argv in commands if "install" in argv]
    assert [argv[-1] for argv in installs] == [gc.BUILD_BACKEND, "."]
    for argv in installs:
        assert argv[argv.index("--no-index") + 1 : argv.index("--no-index") + 3] == [
            "--find-links",
            Path("/srv/wheels"),
        ]
    assert "ansible-core==2.19.14" in installs[0]
    assert "--no-deps" in installs[1]
    assert gc.setup_commands(None) == [["make", "--no-print-directory", "venv"]]


def test_the_wheels_set_up_takes_requirements_txt_pins_of_what_the_run_needs_only(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# pins\nansible==12.3.0\nansible-core==2.19.14  # the controller\nmolecule-plugins[docker]==1\n"
    )
    assert gc.pins(("ansible-core", "molecule-plugins"), requirements) == [
        "ansible-core==2.19.14",
        "molecule-plugins[docker]==1",
    ]
    with pytest.raises(SystemExit, match="pytest not pinned"):
        gc.pins(("pytest",), requirements)
    needed = gc.pins()  # the real requirements.txt pins every package the run needs, and not `ansible`
    assert len(needed) == len(gc.NEEDS)
    assert not any(pin.startswith("ansible==") for pin in needed)


def test_without_ensurepip_the_venv_is_made_without_pip_and_filled_by_the_hosts_pip(monkeypatch, tmp_path):
    monkeypatch.setattr(gc, "VENV", tmp_path / "venv")
    commands = gc.setup_commands(Path("/srv/wheels"), ensurepip=False)
    assert commands[0][1:] == ["-m", "venv", "--without-pip", tmp_path / "venv"]
    for argv in commands[1:]:
        assert argv[:5] == [sys.executable, "-m", "pip", "--python", tmp_path / "venv" / "bin" / "python"]


def test_make_gpu_check_on_this_machine_without_a_gpu_runs_end_to_end_and_exits_non_zero(tmp_path):
    """The whole run, as `make gpu-check` starts it (about 5 s here): non-zero, every GPU step skipped with the
    reason, the report written. On a GPU host this is the acceptance run itself, not a unit test."""
    if shutil.which("nvidia-smi") or Path("/proc/driver/nvidia/version").exists():
        skip_by_design("a GPU host: `make gpu-check` is the acceptance run there, not a unit test")
    out = tmp_path / "gpu-check"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    got = json.loads((out / "report.json").read_text())
    no_gpu = "no nvidia-smi in PATH: not a GPU host"  # tests/gpu/live.py's reason: one probe for the tests and the run
    assert (got["passed"], got["host"]["gpu_model"], got["host"]["no_gpu"]) == (False, None, no_gpu)
    assert got["cores"] == os.cpu_count()
    assert all(isinstance(got[key], float) for key in ("load_start", "load_end")), "the stamp: load at start and end"
    by_name = {step["name"]: step for step in got["steps"]}
    assert [by_name[name]["status"] for name in ("setup", "probe")] == ["ok", "ok"]
    gpu = [step for step in got["steps"] if step["gpu"]]
    assert [(step["name"], step["status"]) for step in gpu] == [("tests/gpu", "skipped")]
    assert by_name["tests/gpu"]["skips"], "tests/gpu ran and skipped each test with its reason"
    assert (out / "report.md").read_text().startswith("# make gpu-check: FAILED")


def test_the_run_starts_with_the_hosts_python_before_the_venv_has_ansible():
    """`make gpu-check` starts with the host's python3: gpu_check.py and what it imports (bench/_meta.py, figures,
    test_summary, tests/ansible_env.py for its environment) need no ansible, blocked here as if absent."""
    code = (
        "import runpy, sys; sys.modules['ansible'] = None; sys.argv = ['gpu_check.py', '--help']; "
        f"runpy.run_path({str(REPO / 'scripts' / 'gpu_check.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("usage: gpu_check.py")


def test_record_gpu_check_keeps_only_a_gpu_check_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figures, "GPU_CHECK", tmp_path / "kept.json")
    source = tmp_path / "report.json"
    assert figures.main(["record-gpu-check", str(source)]) == 1
    assert "Fix: run `make gpu-check` first" in capsys.readouterr().err
    source.write_text(json.dumps({"format": 1, "command": "make test", "steps": []}))
    assert figures.main(["record-gpu-check", str(source)]) == 1
    assert "is not a format-1 `make gpu-check` record (missing ['commit', 'ended'," in capsys.readouterr().err
    source.write_text(json.dumps({**report(NO_GPU, [ok("setup", gpu=False)]), "commit": None}))
    assert figures.main(["record-gpu-check", str(source)]) == 1
    assert "names no commit" in capsys.readouterr().err
    assert not (tmp_path / "kept.json").exists()
    source.write_text(json.dumps(report(NO_GPU, [ok("setup", gpu=False)])))
    assert figures.main(["record-gpu-check", str(source)]) == 0
    assert json.loads((tmp_path / "kept.json").read_text())["host"]["no_gpu"] == "no nvidia-smi in PATH"


def test_the_figures_block_says_plainly_when_the_run_had_no_gpu(tmp_path):
    no_gpu = gc.skipped_step("tests/gpu", "no GPU: no nvidia-smi in PATH")
    steps = [ok("setup", gpu=False), ok("probe", gpu=False), no_gpu]
    text = "\n".join(figures.gpu_check_block(report(NO_GPU, steps)))
    assert "ran **without a GPU**" in text
    assert "proves nothing about a GPU host" in text
    assert "| tests/gpu | skipped |  | 0.0 |" in text
    assert "- tests/gpu: no GPU: no nvidia-smi in PATH" in text
    tests = ok("tests/gpu", 12.0)
    tests["skips"] = [{"test": "t::nvlink_a", "reason": "1 GPU"}, {"test": "t::fm", "reason": "no NVSwitch"},
                      {"test": "t::nvlink_b", "reason": "1 GPU"}]
    on_gpu = "\n".join(figures.gpu_check_block(report(H200, [tests])))
    assert "ran on 1 x NVIDIA H200, driver 580.159.04, CUDA 13.0, NVML 13.580.159.04" in on_gpu
    assert on_gpu.endswith("- tests/gpu: 1 GPU (`2 tests`)\n- tests/gpu: no NVSwitch (`t::fm`)"), "as make test's"
    assert "without a GPU" not in on_gpu
    assert "No `make gpu-check` is recorded yet" in figures.gpu_check_block(None)[0]


def test_the_live_module_check_runs_ad_hoc_ansible_and_reads_the_result_it_prints(tmp_path):
    """cuda_compat needs no GPU: tests/gpu's real ``ansible`` call (ansible-core's own output; the json callback is
    ansible.posix's, absent on a GPU host set up from NEEDS), read back, and a module failure failing the check."""
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                     f"      ansible_python_interpreter: {sys.executable}\n")
    result = module_live.module("cuda_compat", hosts, "driver_version=580.159.04 cuda_version=13.0")
    assert (result["compatible"], result["mode"], result["min_driver"]) == (True, "native", "580.65.06")
    with pytest.raises(AssertionError, match="newer than the compatibility table"):
        module_live.module("cuda_compat", hosts, "driver_version=580.159.04 cuda_version=99.0")


def test_a_failed_set_up_skips_every_later_step_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "setup_commands", lambda wheels, ensurepip: [["false"]])
    got = gc.run(None, tmp_path / "out")
    assert [(s["name"], s["status"], s["gpu"]) for s in got["steps"][:2]] == [
        ("setup", "failed", False),
        ("probe", "skipped", False),
    ]
    later = got["steps"][2:]
    assert [s["name"] for s in later] == ["tests/gpu"]
    why = "the set-up failed (exit 1: $ false)"  # the log's last line is the command itself: it printed nothing
    assert {(s["status"], s["gpu"], s["detail"]) for s in later} == {("skipped", True, why)}
    assert (got["passed"], got["why"]) == (False, "failed: setup")
    assert "This `make gpu-check` ran before its probe, at commit " in gc.markdown(got)
