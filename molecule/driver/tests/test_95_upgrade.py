"""playbooks/upgrade_driver.yml in the driver scenario's mirror (Debian's 535.261.03 and 535.309.01): it refuses while a
(stand-in) GPU process is reported; with the nodes in order and the second broken (deb13's mirror has no Debian
driver packages, and its stand-in driver set would be a downgrade) it moves the first to the new pin and holds it
again, and stops at the second, leaving it untouched; then a downgrade without allow_downgrade is refused. One full
role run in all (the scenario's slowest step); the file runs last (test_95), after the negative cases that read
converge's state. The downgrade path with allow_downgrade=true is the same role run in the other direction (checked
once by hand in this scenario, 535.309.01 -> 535.261.03, during development); its decision is unit-tested
(tests/unit/plugins/plugin_utils/test_driver_upgrade.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

testinfra_hosts = ["gpuops-driver-deb12"]

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "upgrade_driver.yml"
PIN, NEWER = "535.261.03", "535.309.01"
PACKAGES = ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1", "firmware-nvidia-gsp"]
PREF = "/etc/apt/preferences.d/gpuops-nvidia-driver.pref"
# The converge settings (image-bake mode: no module is loaded, so no reboot and no running-driver check).
SCENARIO_VARS = {
    "nvidia_driver_source": "distro",
    "nvidia_driver_kernel_module_type": "proprietary",
    "nvidia_driver_repo_url": "http://127.0.0.1:8089/debian",
    "nvidia_driver_repo_key_url": "http://127.0.0.1:8089/keys/gpuops-test-mirror.asc",
    "nvidia_driver_repo_suites": ["bookworm"],
    "nvidia_driver_repo_components": ["non-free"],
    "nvidia_driver_load_module": False,
    "upgrade_reboot": False,
    "gpuops_platform": "compose",
}
# TEST STAND-IN: an nvidia-smi earlier on PATH that reports one compute process, as a busy GPU would.
STANDIN = """#!/bin/sh
case "$*" in *--query-compute-apps*) echo "4242, /usr/bin/python3 train.py, 30512 MiB"; exit 0;; esac
exec /usr/bin/nvidia-smi "$@"
"""


def run_upgrade(target: str, limit: str | None = None, **extra) -> subprocess.CompletedProcess:
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    assert inventory, "MOLECULE_INVENTORY_FILE is not set: run these tests through `molecule verify -s driver`"
    args = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", inventory, str(PLAYBOOK),
            "-e", json.dumps(SCENARIO_VARS | {"nvidia_driver_version": target} | extra)]
    if limit:
        args += ["--limit", limit]
    return subprocess.run(args, capture_output=True, text=True, timeout=1200, check=False)


def versions(host) -> dict[str, str]:
    """Each of PACKAGES -> its installed version (one dpkg-query on the node; as testinfra's host.package(p).version,
    a package not selected for install or hold fails the test)."""
    out = host.check_output(f"dpkg-query -W -f '${{Package}} ${{Status}} ${{Version}}\\n' {' '.join(PACKAGES)}")
    found = {}
    for line in out.splitlines():
        package, want, _error, _state, version = line.split()
        assert want in ("install", "hold"), f"{package} is not installed: {line}"
        found[package] = version
    return {p: found[p] for p in PACKAGES}


def held(host) -> set[str]:
    return set(host.check_output("apt-mark showhold").split())


def upstream(version: str) -> str:
    """"535.309.01-0+deb12u1" -> "535.309.01" (the two versions carry different Debian revisions)."""
    return version.split("-", maxsplit=1)[0]


@pytest.fixture(scope="module")
def sequence(host):
    """Every run once, in order; each step records what the tests below check."""
    steps = {}
    host.run(f"cat > /usr/local/bin/nvidia-smi <<'EOF'\n{STANDIN}EOF\nchmod 0755 /usr/local/bin/nvidia-smi")
    try:
        busy = run_upgrade(NEWER, limit="gpuops-driver-deb12")
    finally:
        host.run("rm -f /usr/local/bin/nvidia-smi")
    steps["busy"] = (busy, versions(host))
    deb13_before = deb13_state()
    # deb12 then deb13 (deb12-cuda, the third node, would stop the run first: its stand-in set is newer).
    both = run_upgrade(NEWER, limit="gpuops-driver-deb12,gpuops-driver-deb13")
    steps["both"] = (both, versions(host), held(host), host.file(PREF).content_string, (deb13_before, deb13_state()))
    down_refused = run_upgrade(PIN, limit="gpuops-driver-deb12")
    steps["down_refused"] = (down_refused, versions(host))
    return steps


def deb13_state() -> str:
    """deb13's driver pin and packages (its own driver is the stand-in set of test_15)."""
    cmd = f"cat {PREF}; dpkg-query -W 'nvidia*' 'libnvidia*' 'libcuda*'; apt-mark showhold"
    return subprocess.run(["docker", "exec", "gpuops-driver-deb13", "sh", "-c", cmd],
                          capture_output=True, text=True, check=False).stdout


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def test_refuses_while_a_gpu_process_is_reported(sequence):
    proc, after = sequence["busy"]
    assert proc.returncode != 0
    assert "1 GPU process(es) running (4242, /usr/bin/python3 train.py, 30512 MiB)" in _out(proc)
    assert "force=true" in _out(proc)
    assert {upstream(v) for v in after.values()} == {PIN}, "refused before anything moved"


def test_first_node_moves_to_the_pin_and_holds_and_the_run_stops_at_the_broken_second(sequence):
    proc, after, holds, pref, (deb13_before, deb13_after) = sequence["both"]
    out = _out(proc)
    assert proc.returncode != 0
    assert "upgrade 535.261.03 -> 535.309.01" in out, "deb12 went first"
    assert {upstream(v) for v in after.values()} == {NEWER}, after
    assert set(PACKAGES) <= holds
    assert f"Pin: version {NEWER}" in pref
    assert PIN not in pref
    assert "upgrade stopped at gpuops-driver-deb13" in out
    assert "Pin-Priority: 1001" in deb13_before, "deb13's pin must exist, or the comparison proves nothing"
    assert deb13_before == deb13_after, "deb13 was refused before anything was written"


def test_downgrade_is_refused_unless_asked_for(sequence):
    proc, after = sequence["down_refused"]
    assert proc.returncode != 0
    assert "allow_downgrade=true" in _out(proc)
    assert {upstream(v) for v in after.values()} == {NEWER}
