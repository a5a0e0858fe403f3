"""The dnf path of roles/_pinned_packages, for real: probe, install, verify against a signed RPM repository.

One host for all cases: a Debian 12 systemd container (gpuops/debian12-systemd), started once. It is a LABELLED
stand-in for a RHEL host's package manager: the OS is Debian, but dnf 4, its versionlock plugin, rpm and the rpm
database are the real ones (Debian's dnf, dnf-plugins-core, rpm, createrepo-c). build-repo.sh builds, inside it,
two versions (1.0-1, 1.1-1) of three noarch RPMs - gpuops-demo-tool requires gpuops-demo-lib = its version,
gpuops-demo-lib requires gpuops-demo-data (any version) - signed with a throw-away key, in a createrepo_c
repository whose repomd.xml is signed too, served by python3 -m http.server on 127.0.0.1:8080 in the container.
pin.yml runs the role with pinned_packages_manager=dnf.

The cases run in this file's order on the same host (each leaves the state the next one starts from): the
refusals first on the untouched host, then converge, re-run, check mode, upgrades, a removed lock, a move.
Needs docker and the gpuops/debian12-systemd image (make images); skipped, with the reason, without them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from container_node import ansible_env, docker, start_systemd_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NODE = "gpuops-dnf-node"
IMAGE = os.environ.get("GPUOPS_DNF_IMAGE", "gpuops/debian12-systemd")
TOOLING = ["dnf", "dnf-plugins-core", "createrepo-c", "rpm", "gpg", "gpg-agent", "file", "python3"]
PINNED = {"gpuops-demo-tool": "1.0-1", "gpuops-demo-lib": "1.0-1", "gpuops-demo-data": "1.0-1"}
# A move: the old locks deleted, the new versions installed, the new locks added.
STEPS_OF_A_MOVE = 3
NEWER = {"gpuops-demo-tool": "1.1-1", "gpuops-demo-lib": "1.1-1", "gpuops-demo-data": "1.1-1"}


def sh(command: str, check: bool = True) -> subprocess.CompletedProcess:
    """A shell command in the node (LC_ALL=C)."""
    return docker("exec", "-e", "LC_ALL=C", NODE, "bash", "-c", command, check=check, timeout=300)


def play(node_state: dict, check_mode: bool = False, **extra) -> subprocess.CompletedProcess:
    """pin.yml with the fingerprint of the node's repository key and `extra` as extra vars."""
    variables = {"fingerprint": node_state["fingerprint"], "versions": {"gpuops-demo-tool": "1.0"}, **extra}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(variables, handle)
    try:
        return subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(HERE / "hosts.yml"), str(HERE / "pin.yml"),
             "-e", f"@{handle.name}", *(["--check"] if check_mode else [])],
            capture_output=True, text=True, env=ansible_env(), cwd=REPO, timeout=300, check=False,
        )
    finally:
        os.unlink(handle.name)


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    found = re.search(r"^\S+\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", result.stdout, re.M)
    assert found, result.stdout[-3000:] + result.stderr[-2000:]
    return dict(zip(["ok", "changed", "unreachable", "failed"], map(int, found.groups()), strict=True))


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


def installed() -> dict[str, str]:
    lines = sh("rpm -qa --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' 'gpuops-demo-*'").stdout.split("\n")
    return dict(line.split(" ", 1) for line in lines if line.strip())


def locks() -> list[str]:
    return sorted(sh("dnf -q versionlock list").stdout.split())


def host_state() -> dict[str, str]:
    """What the role may write: repository files, rpm keys and key files, the rpm database, the lock list."""
    return {
        "repos": sh("ls -la /etc/yum.repos.d; cat /etc/yum.repos.d/* 2>/dev/null || true").stdout,
        "keys": sh("ls -la /etc/pki/rpm-gpg 2>/dev/null || true").stdout,
        "rpmdb": sh("rpm -qa | sort").stdout,
        "locks": sh("cat /etc/dnf/plugins/versionlock.list").stdout,
    }


@pytest.fixture(scope="module")
def node():
    """The dnf stand-in, its tooling installed and the signed repository built and served (once)."""
    started = time.monotonic()
    start_systemd_node(NODE, IMAGE)
    try:
        sh("apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
           f"--no-install-recommends {' '.join(TOOLING)} >/tmp/tooling.log 2>&1 || {{ tail -20 /tmp/tooling.log; "
           "exit 1; }")
        # A RHEL host has /etc/yum.repos.d; Debian's dnf package does not create it.
        sh("mkdir -p /etc/yum.repos.d")
        docker("cp", str(HERE / "build-repo.sh"), f"{NODE}:/root/build-repo.sh")
        sh("/root/build-repo.sh")
        sh("systemd-run --unit gpuops-dnf-repo python3 -m http.server -d /srv/repo -b 127.0.0.1 8080 && "
           "for i in $(seq 50); do python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:8080/"
           "repodata/repomd.xml')\" 2>/dev/null && exit 0; sleep 0.2; done; exit 1")
        state = {"fingerprint": sh("cat /srv/repo/fingerprint").stdout.strip()}
        print(f"dnf stand-in ready in {time.monotonic() - started:.0f} s")
        yield state
    finally:
        docker("rm", "-f", "-v", NODE, check=False)


def test_a_wrong_key_fingerprint_is_refused_before_anything_is_written(node) -> None:
    before = host_state()
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    result = play(node, fingerprint=wrong)
    text = output(result)
    assert result.returncode != 0, text[-3000:]
    assert wrong in text, text[-3000:]
    assert node["fingerprint"] in text, text[-3000:]
    assert host_state() == before


def test_a_version_not_offered_is_refused_listing_the_offered_versions(node) -> None:
    before = host_state()
    result = play(node, versions={"gpuops-demo-tool": "2.0"})
    text = output(result)
    assert result.returncode != 0, text[-3000:]
    assert "gpuops-demo-tool 2.0 is not offered (offered: 1.0-1, 1.1-1)" in text, text[-3000:]
    assert "pinned_packages_versions" in text, text[-3000:]
    assert host_state() == before


def test_repository_metadata_signed_by_another_key_is_refused_before_anything_is_written(node) -> None:
    """repo_gpgcheck is real: the right key, but repomd.xml signed by another one (a tampered mirror)."""
    before = host_state()
    sh("cp /srv/repo/repodata/repomd.xml.asc /srv/repomd.xml.asc.good && cp /srv/impostor.asc "
       "/srv/repo/repodata/repomd.xml.asc")
    try:
        result = play(node)
    finally:
        sh("cp /srv/repomd.xml.asc.good /srv/repo/repodata/repomd.xml.asc")
    text = output(result)
    assert result.returncode != 0, text[-3000:]
    assert "dnf could not read http://127.0.0.1:8080/" in text, text[-3000:]
    assert "repomd.xml GPG signature verification error" in text, text[-3000:]
    assert host_state() == before


def test_check_mode_on_a_fresh_host_reports_the_repository_and_changes_nothing(node) -> None:
    before = host_state()
    result = play(node, check_mode=True)
    assert result.returncode == 0, output(result)[-3000:]
    assert recap(result)["changed"] > 0
    assert "is not on the host yet" in result.stdout
    assert host_state() == before


def test_converge_installs_the_exact_versions_and_locks_the_whole_closure(node) -> None:
    result = play(node)
    assert result.returncode == 0, output(result)[-4000:]
    assert installed() == PINNED
    assert locks() == sorted(f"{name}-0:{version}.*" for name, version in PINNED.items())
    repo = sh("cat /etc/yum.repos.d/gpuops-demo.repo").stdout
    assert "\ngpgcheck = 1" in repo, repo
    assert "repo_gpgcheck = 1" in repo, repo
    assert "gpgkey = file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpuops-gpuops-demo" in repo, repo


def test_a_rerun_changes_nothing(node) -> None:
    result = play(node)
    assert result.returncode == 0, output(result)[-3000:]
    assert recap(result)["changed"] == 0, result.stdout[-4000:]


def test_check_mode_on_the_converged_host_reports_no_change(node) -> None:
    result = play(node, check_mode=True)
    assert result.returncode == 0, output(result)[-3000:]
    assert recap(result)["changed"] == 0, result.stdout[-4000:]


def test_check_mode_reports_a_move_to_a_new_pin_and_changes_nothing(node) -> None:
    before = host_state()
    result = play(node, check_mode=True, versions={"gpuops-demo-tool": "1.1"})
    assert result.returncode == 0, output(result)[-3000:]
    reported = [line.split("] => ")[0] for line in result.stdout.splitlines() if line.startswith("changed: ")]
    assert len(reported) >= STEPS_OF_A_MOVE, result.stdout[-4000:]
    assert host_state() == before


def test_dnf_upgrade_does_not_move_the_locked_set(node) -> None:
    simulated = sh("dnf -q --assumeno upgrade", check=False)
    assert "gpuops-demo" not in simulated.stdout + simulated.stderr
    sh("dnf -y -q upgrade")
    sh("dnf -y -q distro-sync")
    assert installed() == PINNED
    result = play(node, entries=["probe", "verify"])
    assert result.returncode == 0, output(result)[-3000:]


def test_control_without_its_lock_dnf_upgrade_does_move_a_package(node) -> None:
    """Proves the upgrade test above could fail: the lock, not the repository, keeps the version."""
    sh("dnf -q versionlock delete gpuops-demo-data")
    result = play(node, entries=["probe", "verify"])
    text = output(result)
    assert result.returncode != 0, text[-3000:]
    assert "not version-locked (dnf versionlock list): gpuops-demo-data." in text, text[-3000:]
    assert "would move: gpuops-demo-data 1.0-1 -> 1.1-1 (dnf upgrade, distro-sync)." in text, text[-3000:]
    sh("dnf -y -q upgrade")
    assert installed()["gpuops-demo-data"] == "1.1-1"


def test_verify_names_the_package_installed_at_another_version_and_a_downgrade_needs_its_variable(node) -> None:
    result = play(node, entries=["probe", "verify"], allow_downgrade=True)
    text = output(result)
    assert result.returncode != 0, text[-3000:]
    assert "gpuops-demo-data: installed 1.1-1, pinned 1.0-1" in text, text[-3000:]
    refused = play(node)
    assert refused.returncode != 0
    assert "would downgrade gpuops-demo-data 1.1-1 -> 1.0-1" in output(refused), output(refused)[-3000:]
    assert "pinned_packages_allow_downgrade=true" in output(refused)
    repaired = play(node, allow_downgrade=True)
    assert repaired.returncode == 0, output(repaired)[-4000:]
    assert installed() == PINNED
    assert locks() == sorted(f"{name}-0:{version}.*" for name, version in PINNED.items())


def test_a_new_pin_moves_the_whole_closure_and_locks_it_again(node) -> None:
    result = play(node, versions={"gpuops-demo-tool": "1.1"})
    assert result.returncode == 0, output(result)[-4000:]
    assert installed() == NEWER
    assert locks() == sorted(f"{name}-0:{version}.*" for name, version in NEWER.items())
    again = play(node, versions={"gpuops-demo-tool": "1.1"})
    assert recap(again)["changed"] == 0, again.stdout[-4000:]
