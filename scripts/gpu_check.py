#!/usr/bin/env python3
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""`make gpu-check [WHEELS=DIR]`: the acceptance run for one GPU host, as one report.

Its steps, its set-up (``wheels DIR`` fills a WHEELS directory on a machine with network), its report and its verdict
are described once, in docs/testing.md ("make gpu-check"). ``probe``, which the run calls in the venv, prints the
host's GPUs, driver, CUDA and NVML versions as JSON. Standard library only, apart from the probe.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "bench"), str(REPO / "tests")]
from _meta import load1, run_stamp  # noqa: E402 -- the one stamp of a recorded figure, bench/_meta.py
from ansible_env import playbook_env  # noqa: E402 -- the tests' and benches' ansible environment, tests/ansible_env.py
from figures import gpu_check_block  # noqa: E402 -- the one rendering of a report, bench/figures.py
from test_summary import junit  # noqa: E402 -- the one JUnit reader, scripts/test_summary.py

VENV = REPO / ".venv"
OUT = REPO / "build" / "gpu-check"
HOST_KEYS = ("gpu_model", "gpu_count", "driver_version", "cuda_version", "nvml_version", "source", "no_gpu", "no_nvml")
TIMEOUT = 3600  # any one step, unless --step-timeout says otherwise
# What this run imports, of requirements.txt (versions from there): the controller (ansible-core; no step uses a
# collection of the `ansible` package), gpuops-run (ansible-runner), NVML's binding and pytest. The linters,
# Molecule and the 54 MB `ansible` package are not needed on a GPU host.
NEEDS = ("ansible-core", "ansible-runner", "jinja2", "nvidia-ml-py", "pytest", "pyyaml")
BUILD_BACKEND = "setuptools>=64"  # builds gpuops-run from this checkout (pyproject.toml)
OK, FAILED, SKIPPED = "ok", "failed", "skipped"


def step_record(
    name: str,
    status: str,
    rc: int | None,
    seconds: float,
    detail: str,
    *,
    gpu: bool,
    log: str | None = None,
) -> dict:
    """One step: ``status`` ok, failed or skipped; ``rc`` null when it did not run; ``skips`` set by judge_tests."""
    return {
        "name": name,
        "gpu": gpu,
        "status": status,
        "rc": rc,
        "seconds": round(seconds, 1),
        "detail": detail,
        "log": log,
        "skips": [],
    }


def skipped_step(name: str, reason: str, *, gpu: bool = True) -> dict:
    return step_record(name, SKIPPED, None, 0.0, reason, gpu=gpu)


def verdict(host: dict, steps: list) -> tuple[bool, str]:
    """(passed, why): a failed step fails the run, and so does a host without a GPU."""
    failed = [step["name"] for step in steps if step["status"] == FAILED]
    if failed:
        return False, f"failed: {', '.join(failed)}"
    if host.get("no_gpu"):
        return False, f"no GPU on this host ({host['no_gpu']}): a GPU acceptance run needs one"
    return True, "every step passed"


def build_report(host: dict, steps: list, started: float, ended: float, load_start: float | None = None) -> dict:
    passed, why = verdict(host, steps)
    skips = [
        {"step": step["name"], "test": None, "reason": step["detail"]} for step in steps if step["status"] == SKIPPED
    ]
    skips += [{"step": step["name"], **skip} for step in steps for skip in step["skips"]]
    return {
        **run_stamp("make gpu-check", started, ended, load_start),
        "host": {key: host.get(key) for key in HOST_KEYS},
        "passed": passed,
        "why": why,
        "steps": steps,
        "skips": skips,
    }


def markdown(report: dict) -> str:
    lines = gpu_check_block(report, "This `make gpu-check`")
    return "\n".join([f"# make gpu-check: {'PASSED' if report['passed'] else 'FAILED'}", "", *lines]) + "\n"


def write_report(report: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "report.json", out / "report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return json_path, md_path


def exit_code(report: dict) -> int:
    return 0 if report["passed"] else 1


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1].strip()[:300] if lines else "no output"


def run_commands(name: str, commands: list, out: Path, env: dict, *, gpu: bool) -> dict:
    """Run ``commands`` (argv lists) in order into one log, stopping at the first that fails; each command may take
    ``env["GPU_CHECK_STEP_TIMEOUT"]`` seconds (--step-timeout), else TIMEOUT."""
    timeout = int(env.get("GPU_CHECK_STEP_TIMEOUT") or TIMEOUT)
    log = out / "logs" / f"{name.replace('/', '_').replace(' ', '_')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started, rc = time.monotonic(), 0
    with log.open("w") as handle:
        for argv in commands:
            handle.write(f"$ {' '.join(map(str, argv))}\n")
            handle.flush()
            try:
                rc = subprocess.run(
                    [str(part) for part in argv],
                    cwd=REPO,
                    env=env,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                handle.write(f"gpu-check: timed out after {timeout} s\n")
                rc = 124
            except OSError as err:
                handle.write(f"gpu-check: cannot run {argv[0]}: {err}\n")
                rc = 127
            if rc != 0:
                break
    seconds = time.monotonic() - started
    detail = "exit 0" if rc == 0 else f"exit {rc}: {_last_line(log)}"
    return step_record(name, OK if rc == 0 else FAILED, rc, seconds, detail, gpu=gpu, log=str(log.relative_to(out)))


def pins(names: tuple = NEEDS, requirements: Path = REPO / "requirements.txt") -> list[str]:
    """requirements.txt's ``name==version`` line for each of ``names`` (one source for the versions)."""
    lines = {}
    for line in requirements.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            lines[spec.split("==", 1)[0].split("[", 1)[0].strip().lower()] = spec
    missing = [name for name in names if name not in lines]
    if missing:
        raise SystemExit(f"gpu-check: {', '.join(missing)} not pinned in {requirements}")
    return [lines[name] for name in names]


def setup_commands(wheels: Path | None, *, ensurepip: bool = True) -> list:
    """The set-up's commands: ``make venv``; or, with ``wheels``, a venv filled from that directory only. Without
    ensurepip in the host's Python the venv is made ``--without-pip`` and the host's pip installs into it."""
    if wheels is None:
        return [["make", "--no-print-directory", "venv"]]
    commands = []
    if not (VENV / "bin" / "python").exists():
        commands.append([sys.executable, "-m", "venv", *([] if ensurepip else ["--without-pip"]), VENV])
    pip = [VENV / "bin" / "pip"] if ensurepip else [sys.executable, "-m", "pip", "--python", VENV / "bin" / "python"]
    install = [*pip, "install", "-q", "--disable-pip-version-check", "--no-index", "--find-links", wheels]
    return [*commands, [*install, *pins(), BUILD_BACKEND], [*install, "--no-deps", "."]]


def has_ensurepip() -> bool:
    try:
        import ensurepip  # noqa: F401, PLC0415 -- Debian splits it into python3-venv; some images drop it
    except ImportError:
        return False
    return True


def download_wheels(directory: Path, python_version: str) -> int:
    """Fill ``directory`` with the set-up's wheels for an x86-64 Linux host running ``python_version``."""
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in (17, 28, 34)] + ["manylinux2014_x86_64"]
    argv = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(directory)]
    argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", python_version]
    argv += [arg for platform in platforms for arg in ("--platform", platform)]
    return subprocess.run([*argv, *pins(), BUILD_BACKEND], check=False).returncode


def probe_step(out: Path, env: dict) -> tuple[dict, dict]:
    step = run_commands(
        "probe", [[VENV / "bin" / "python", Path(__file__), "probe", "--to", out / "host.json"]], out, env, gpu=False
    )
    try:
        host = json.loads((out / "host.json").read_text())
    except (OSError, ValueError):
        host = {"no_gpu": f"the probe did not answer ({step['detail']})"}
    if step["status"] == OK:
        step["detail"] = (
            f"no GPU: {host['no_gpu']}"
            if host.get("no_gpu")
            else f"{host.get('gpu_count')} x {host.get('gpu_model')}, driver {host.get('driver_version')}"
        )
    return step, host


def judge_tests(step: dict, junit_file: Path) -> dict:
    """The tests/gpu step from its JUnit file: counts in the detail, every skip with its reason; skipped as a whole
    when no test passed or failed."""
    passed, failed, step["skips"] = junit([str(junit_file)])
    skipped = len(step["skips"])
    step["detail"] = f"{passed} passed, {failed} failed, {skipped} skipped" + (
        "" if step["rc"] == 0 else f" ({step['detail']})"
    )
    if step["rc"] == 0 and passed + failed == 0:
        step["status"] = SKIPPED
        step["detail"] = f"no test ran: {skipped} skipped, each with its reason below"
    return step


def tests_step(out: Path, env: dict) -> dict:
    junit_file = out / "tests-gpu.xml"
    # the report lists each skip with its reason; CI=true would turn them into failures (tests/ci_skips.py), and
    # this run's verdict is its own: a failure, or no GPU
    live_env = {key: value for key, value in env.items() if key != "CI"}
    live_env["GPUOPS_LIVE_OUT"] = str(out / "live")
    step = run_commands(
        "tests/gpu",
        [[VENV / "bin" / "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/gpu", f"--junitxml={junit_file}"]],
        out,
        live_env,
        gpu=True,
    )
    return judge_tests(step, junit_file)


def run(wheels: Path | None, out: Path, step_timeout: int | None = None) -> dict:
    started, load_start = time.time(), load1()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # the locale: module doc; PY_COLORS keeps pytest's colour out of the logs
    env = playbook_env(bin_dir=VENV / "bin", extra={"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PY_COLORS": "0"})
    if step_timeout:
        env["GPU_CHECK_STEP_TIMEOUT"] = str(step_timeout)
    steps = [run_commands("setup", setup_commands(wheels, ensurepip=has_ensurepip()), out, env, gpu=False)]
    if steps[0]["status"] == FAILED:
        host = {"no_gpu": None}
        reason = f"the set-up failed ({steps[0]['detail']})"
        steps += [skipped_step("probe", reason, gpu=False), skipped_step("tests/gpu", reason)]
    else:
        probe, host = probe_step(out, env)
        steps += [probe, tests_step(out, env)]
    return build_report(host, steps, started, time.time(), load_start)


def probe_host() -> dict:
    """The host's GPUs and versions: ``nvidia-smi -L`` decides whether there is a GPU, as it decides for tests/gpu
    (tests/gpu/live.py); gpu_facts (NVML, else nvidia-smi) names the model, driver and CUDA version; nvidia-ml-py the
    NVML version."""
    sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests")]
    from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf  # noqa: PLC0415
    from gpu import live  # noqa: PLC0415 -- tests/gpu's probe and runner

    host = dict.fromkeys(HOST_KEYS)
    if live.NO_GPU:
        return {**host, "no_gpu": live.NO_GPU}
    facts, _warnings = gf.gather_gpu_facts(run=live.run, which=shutil.which)
    names = sorted({gpu["name"] for gpu in facts["gpus"] if gpu.get("name")})
    host.update(
        gpu_model=", ".join(names) or None,
        gpu_count=len(live.LISTED),
        driver_version=facts.get("driver_version"),
        cuda_version=facts.get("cuda_driver_version"),
        source=facts.get("source"),
    )
    try:
        pynvml = gf.import_pynvml()
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetNVMLVersion()
        finally:
            pynvml.nvmlShutdown()
        host["nvml_version"] = version.decode() if isinstance(version, bytes) else version
    except Exception as err:  # reported, not raised: the other versions stand
        host["no_nvml"] = f"{type(err).__name__}: {err}"
    return host


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="what")
    probe = sub.add_parser("probe")
    probe.add_argument("--to", type=Path)
    wheels = sub.add_parser("wheels", help="download the --wheels set-up's wheels into DIR (needs network)")
    wheels.add_argument("dir", type=Path)
    wheels.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--wheels", type=Path, help="a local wheel directory: set-up with pip --no-index")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--step-timeout", type=int, help=f"seconds any one command may take (default {TIMEOUT})")
    args = parser.parse_args(argv)
    if args.what == "wheels":
        return download_wheels(args.dir, args.python_version)
    if args.what == "probe":
        host = probe_host()
        text = json.dumps(host, indent=2)
        if args.to:
            args.to.write_text(text + "\n")
        print(text)
        return 0
    if args.wheels is not None and not args.wheels.is_dir():
        print(
            f"gpu-check: WHEELS={args.wheels} is not a directory. Fix: fill one on a machine with network "
            "(python3 scripts/gpu_check.py wheels DIR), copy it here, give its path",
            file=sys.stderr,
        )
        return 2
    report = run(args.wheels.resolve() if args.wheels else None, args.out.resolve(), args.step_timeout)
    json_path, md_path = write_report(report, args.out)
    print(markdown(report))
    print(f"gpu-check: {'PASSED' if report['passed'] else 'FAILED'}: {report['why']}; report {json_path}, {md_path}")
    return exit_code(report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
