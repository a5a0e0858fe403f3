"""nvidia_container_toolkit: a TEST STAND-IN package (pin and hold), real dockerd and containerd."""

from __future__ import annotations

import json
import re

# The toolkit nodes (gpuops-driver-deb12-cuda has the driver stand-ins only).
testinfra_hosts = ["gpuops-driver-deb12", "gpuops-driver-deb13"]

PIN_APT = "1.17.8-1"
NEWER = "1.18.0-1"
DOCKER_JSON = "/etc/docker/daemon.json"
RUNTIME = "/usr/bin/nvidia-container-runtime"
STANDIN_LOG = "/var/log/gpuops-nvidia-runtime-standin.log"
IMAGE = "gpuops-test/busybox:1"


# The role's default package list: NVIDIA's four toolkit packages (nvidia-repo-structure.yml, [S4]).
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]


def test_every_toolkit_package_is_pinned_held_and_labelled_as_stand_in(host):
    held = host.check_output("apt-mark showhold").split()
    upgrades = host.check_output("apt-get -s upgrade") + host.check_output("apt-get -s dist-upgrade")
    for name in PACKAGES:
        assert host.package(name).version == PIN_APT, name
        assert "TEST STAND-IN" in host.check_output(f"dpkg-query -W -f '${{Description}}' {name}")
        assert NEWER in host.check_output(f"apt-cache madison {name}"), f"the mirror offers a newer {name}"
        assert name in held
        assert not re.search(rf"^Inst {re.escape(name)} ", upgrades, re.M), upgrades
        assert f"Candidate: {PIN_APT}" in host.check_output(f"apt-cache policy {name}")
    # The runtime and nvidia-ctk come from -base, as in NVIDIA's packaging (the top package only depends on it).
    assert host.check_output("dpkg -S /usr/bin/nvidia-ctk").startswith("nvidia-container-toolkit-base:")


def test_docker_lists_the_nvidia_runtime_as_default(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["Runtimes"]["nvidia"]["path"] == RUNTIME
    assert info["DefaultRuntime"] == "nvidia"
    # The pre-existing key survived the merge and is live in the daemon.
    assert info["LoggingDriver"] == "json-file"


def test_daemon_json_was_merged_and_backed_up(host):
    merged = json.loads(host.file(DOCKER_JSON).content_string)
    assert merged["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert merged["default-shm-size"] == "1G"
    assert merged["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": -1, "Hard": -1}
    backups = host.check_output("ls /etc/docker").split()
    originals = [b for b in backups if b.startswith("daemon.json.") and b.endswith("~")]
    assert originals, backups
    first = json.loads(host.file(f"/etc/docker/{sorted(originals)[0]}").content_string)
    assert "runtimes" not in first
    assert first["log-driver"] == "json-file"


def test_docker_runs_a_container_through_the_nvidia_runtime(host):
    # No registry is reachable: a one-binary image from Debian's busybox-static, imported locally.
    host.check_output(
        f"docker image inspect {IMAGE} >/dev/null 2>&1 || (d=$(mktemp -d) && mkdir -p $d/bin"
        f" && cp /bin/busybox $d/bin/ && tar -C $d -c . | docker import - {IMAGE})"
    )
    calls = int(host.check_output(f"cat {STANDIN_LOG} 2>/dev/null | wc -l"))
    # The role's default-ulimits memlock=-1 needs CAP_SYS_RESOURCE, which these test node containers cannot be
    # given (see playbooks/tasks/node_container.yml); on a real host dockerd has it. Cap memlock at the
    # node's own hard limit for the test containers; everything else comes from the merged daemon.json.
    hard = host.check_output("awk '/Max locked memory/ {print $5}' /proc/1/limits")
    run = f"docker run --rm --network none --ulimit memlock={hard}:{hard} {{}} {IMAGE} /bin/busybox echo gpuops-ok"
    assert host.check_output(run.format("")) == "gpuops-ok"
    assert int(host.check_output(f"cat {STANDIN_LOG} | wc -l")) > calls, "the default runtime did not go through nvidia"
    assert host.check_output(run.format("--runtime nvidia")) == "gpuops-ok"
