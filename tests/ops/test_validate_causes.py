"""validate.yml names the cause of a failed container step, with the fix, on hosts that each lack one part.

One ansible-playbook run of playbooks/validate.yml (compose platform, validate_fail_on_failed=false) over two hosts:

- ``no-docker``: a gpuops/debian12-systemd container (Debian 12, no Docker installed), reached over the
  community.docker.docker connection: every container step must say "Docker not installed";
- ``localhost`` (connection local): this machine's own Docker, which has no NVIDIA runtime and no CDI. The CUDA
  image is an image present here (gpuops/debian12-systemd), so `docker run --gpus all` fails on the GPU alone:
  "NVIDIA runtime not configured"; the vectorAdd image is on a registry at 127.0.0.1 where nothing listens:
  "image not present and registry not reachable", naming the registry and the setting to change.

Neither host has a GPU: both get a stand-in nvidia-smi, first on PATH, that replays the real H200 captures read in
place from ../shared/data/nvidia-smi/h200-driver580 (SOURCES.md there: `-q -x`, `-L`, `topo -m`; the
`--query-gpu=index,uuid` answer is `-L`'s index and UUID), so gpu_facts counts one GPU and validate runs its
container steps; they need no GPU to fail as they do here. The results are read from <host>.validate.json.
The same outputs, recorded, drive the unit tests of the classification
(tests/unit/plugins/plugin_utils/fixtures/validate_docker).

Without docker, the image or ../shared/data the test skips with the reason (under CI=true that skip fails:
tests/ci_skips.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from container_node import ansible_env, docker

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
# ../shared/data, or GPUOPS_SHARED_DATA, as tests/unit/conftest.py finds it.
CAPTURES = (
    Path(os.environ.get("GPUOPS_SHARED_DATA", ROOT.parent / "shared" / "data")) / "nvidia-smi" / "h200-driver580"
).resolve()
IMAGE = "gpuops/debian12-systemd"
NODE = "gpuops-validate-no-docker"
STAND_IN = f"""#!/bin/bash
# Stand-in nvidia-smi (tests/ops/test_validate_causes.py): replays the real H200 captures in {CAPTURES}.
D={CAPTURES}
case "$*" in
  "-q -x") cat "$D/q.xml" ;;
  "-L") cat "$D/L.txt" ;;
  "topo -m") cat "$D/topo-m.pipe.txt" ;;
  "--query-gpu=index,uuid --format=csv,noheader")
    sed -E 's/^GPU ([0-9]+): .*\\(UUID: (GPU-[^)]+)\\)$/\\1, \\2/' "$D/L.txt" ;;
  *) echo "stand-in nvidia-smi: no capture for: $*" >&2; exit 2 ;;
esac
"""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def no_docker_node(tmp_path_factory):
    """The container without Docker, with the stand-in nvidia-smi and the captures it reads, mounted read-only."""
    if docker("info", check=False).returncode != 0:
        pytest.skip("docker is not available here")
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.skip(f"image {IMAGE} is missing (make images)")
    if not (CAPTURES / "q.xml").is_file():
        pytest.skip(f"../shared/data is not available here ({CAPTURES})")
    bin_dir = tmp_path_factory.mktemp("stand-in")
    (bin_dir / "nvidia-smi").write_text(STAND_IN)
    (bin_dir / "nvidia-smi").chmod(0o755)
    docker("rm", "-f", NODE, check=False)
    docker(
        "run",
        "-d",
        "--name",
        NODE,
        "--label",
        "gpuops.test-node=true",
        "-v",
        f"{bin_dir / 'nvidia-smi'}:/usr/local/bin/nvidia-smi:ro",
        "-v",
        f"{CAPTURES}:{CAPTURES}:ro",
        IMAGE,
        "sleep",
        "infinity",
    )
    try:
        yield bin_dir
    finally:
        docker("rm", "-f", "-v", NODE, check=False)


def test_each_failed_container_step_names_its_cause(no_docker_node, tmp_path):
    port = closed_port()
    unreachable = f"127.0.0.1:{port}/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    (tmp_path / "hosts.yml").write_text(
        json.dumps(
            {
                "all": {
                    "vars": {"gpuops_platform": "compose"},
                    "children": {
                        "gpu_nodes": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": str(VENV_BIN / "python"),
                                    "validate_cuda_image": IMAGE,
                                    "validate_cuda_check_image": unreachable,
                                },
                                "no-docker": {
                                    "ansible_connection": "community.docker.docker",
                                    "ansible_host": NODE,
                                    "ansible_python_interpreter": "/usr/bin/python3",
                                },
                            }
                        }
                    },
                }
            }
        )
    )
    reports = tmp_path / "reports"
    env = ansible_env()
    env["PATH"] = f"{no_docker_node}:{env['PATH']}"  # the stand-in nvidia-smi for localhost
    run = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "hosts.yml"),
            str(ROOT / "playbooks" / "validate.yml"),
            "-e",
            json.dumps({"validate_fail_on_failed": False, "gpuops_report_dir": str(reports)}),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    [report] = list((reports / "validate").iterdir())

    def rows(host: str) -> dict:
        found = json.loads((report / f"{host}.validate.json").read_text())
        return {r["step"]: r for r in found["validate"]}

    container_steps = ("CUDA container runs nvidia-smi", "CUDA kernel launch (vectorAdd)")
    node = rows("no-docker")
    for step in container_steps:
        assert node[step]["status"] == "failed", node[step]
        assert node[step]["detail"].startswith("Docker not installed: no docker command on PATH ("), node[step]
        assert "Fix: install Docker Engine" in node[step]["detail"], node[step]
    assert node["NCCL all_reduce_perf"]["status"] == "skipped"  # one GPU

    local = rows("localhost")
    smi, vector_add = (local[step] for step in container_steps)
    assert smi["status"] == vector_add["status"] == "failed"
    assert smi["detail"].startswith("NVIDIA runtime not configured: docker cannot give the container a GPU ("), smi
    assert "no nvidia" in smi["detail"], smi
    assert "Fix: rerun the nvidia_container_toolkit role" in smi["detail"], smi
    assert vector_add["detail"].startswith(
        f"image not present and registry not reachable: {unreachable} is not "
        f"on this host and its registry 127.0.0.1:{port} cannot be reached"
    ), vector_add
    assert "set validate_cuda_check_image" in vector_add["detail"], vector_add
    for rows_ in (node, local):
        assert not [r for r in rows_.values() if "no output" in r["detail"]], rows_
    assert "Docker not installed" in run.stdout  # the printed table says it too
    # <host>.validate.md is the table as printed: each step's row, with its status and detail
    table = (report / "no-docker.validate.md").read_text()
    row = f"| CUDA container runs nvidia-smi | failed | {node[container_steps[0]]['detail']} |"
    assert row in table, table
    assert row in run.stdout.replace("\\n", "\n"), run.stdout[-3000:]
