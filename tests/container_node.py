"""Helpers the container-host test folders share (tests/bad_input, tests/dnf) and bench/fleet.py: the environment
ansible-playbook runs with (over tests/ansible_env.py), docker calls, and one systemd node container started from a
gpuops image and booted."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from ansible_env import playbook_env

REPO = Path(__file__).resolve().parents[1]
# `docker run` options of a systemd node without --privileged: playbooks/tasks/node_container.yml's settings.
NODE_SETTINGS = ("--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp=unconfined",
                 "--security-opt", "apparmor=unconfined", "--cgroupns", "host", "--stop-signal", "SIGRTMIN+3",
                 "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp:exec",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw")


def ansible_env() -> dict[str, str]:
    """The environment `make` gives ansible-playbook: this checkout's config and collections, plain output; facts
    in memory only (the nodes are throwaway), results as YAML, the venv's bin first on PATH."""
    return playbook_env(
        REPO,
        cache="memory",
        bin_dir=REPO / ".venv" / "bin",
        extra={"ANSIBLE_FORCE_COLOR": "false", "NO_COLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "yaml"},
    )


def docker(*args: str, check: bool = True, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def start_systemd_node(name: str, image: str) -> str:
    """Start `name` from `image` as a systemd node (skip the test without docker or the image) and wait until it
    has booted; the caller removes it with `docker rm -f -v name`."""
    if not shutil.which("docker") or docker("info", check=False).returncode != 0:
        pytest.skip("docker is not available here")
    if docker("image", "inspect", image, check=False).returncode != 0:
        pytest.skip(f"image {image} is missing (make images)")
    docker("rm", "-f", name, check=False)
    docker("run", "-d", "--name", name, "--hostname", name, "--label", "gpuops.test-node=true", *NODE_SETTINGS,
           "-v", "/var/lib/docker", "-v", "/var/lib/containerd", image, "/lib/systemd/systemd")
    state = booted(name)
    if state not in BOOTED:
        pytest.fail(f"{name} did not finish booting (systemd state {state})")
    return name


BOOTED = ("running", "degraded")  # degraded is booted too: a unit that needs real hardware may have failed


def booted(name: str, timeout: int = 300) -> str:
    """systemd's state in ``name`` once booted (running or degraded), polled; after ``timeout`` seconds (a loaded CI
    host boots slowly), the state it is in and its first queued jobs."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = docker("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in BOOTED:
            return state
        time.sleep(2)
    jobs = docker("exec", name, "systemctl", "list-jobs", "--no-legend", check=False).stdout.strip().splitlines()
    return f"{state or 'unknown'} after {timeout} s (jobs: {'; '.join(jobs[:3]) or 'none'})"
