"""gpu_health's assert stage: refusals that name the variable, the value, what is allowed and the fix, and the
choice of package source that keeps apt working (one source per repository URL).

Runs tests/unit/roles/playbooks/gpu_health_assert.yml on localhost (a Debian-family host, as the unit-test machine
and the containers are): the role's assert stage only, read-only, with apt's configuration directory replaced by a
fixture (_gpu_health_apt_dir) so that the sources another role or NVIDIA's cuda-keyring would have written are
under the test's control.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ansible_env import playbook_env

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "gpu_health_assert.yml"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
PLAYBOOK_FAILED = 2  # ansible-playbook's exit status when a task failed
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
# What gpuops.cluster.nvidia_driver (nvidia_driver_source: nvidia) writes for NVIDIA's CUDA repository.
DRIVER_SOURCE = "Types: deb\nURIs: {url}\nSuites: /\nSigned-By: /etc/apt/keyrings/gpuops-nvidia-driver.gpg\n"


def _os_facts() -> tuple[str, str]:
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return release.get("ID", "").strip('"'), release.get("VERSION_ID", "").strip('"')


def _cuda_url() -> str:
    """NVIDIA's CUDA repository URL the role resolves on this machine (vars/Debian.yml, vars/Ubuntu.yml)."""
    os_id, version = _os_facts()
    arch = "sbsa" if os.uname().machine == "aarch64" else os.uname().machine
    name = f"ubuntu{version.replace('.', '')}" if os_id == "ubuntu" else f"debian{version.split('.')[0]}"
    return f"{CUDA}/{name}/{arch}/"


def run(tmp_path: Path, sources: dict[str, str] | None = None, **variables) -> subprocess.CompletedProcess:
    if _os_facts()[0] not in ("debian", "ubuntu"):
        pytest.skip("the apt cases need a Debian or Ubuntu controller")
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in (sources or {}).items():
        (apt / name).write_text(text)
    (tmp_path / "vars.json").write_text(json.dumps({"_gpu_health_apt_dir": str(apt), **variables}))
    playbook = BIN / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not found at {playbook} (run make venv)")
    env = playbook_env(REPO, cache_dir=tmp_path / "facts", extra={"ANSIBLE_LOCALHOST_WARNING": "false"})
    return subprocess.run([str(playbook), str(PLAYBOOK), "-e", f"@{tmp_path / 'vars.json'}"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def flat(out: subprocess.CompletedProcess) -> str:
    return " ".join(out.stdout.split())


def test_defaults_pass_and_install_nothing(tmp_path):
    out = run(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "gpu_health source: none" in out.stdout, "without gpu_health_install_dcgm no package source is decided"


@pytest.mark.parametrize("level", [4, -1])
def test_a_diag_level_outside_0_to_3_is_refused(tmp_path, level):
    out = run(tmp_path, gpu_health_dcgm_level=level)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = flat(out)
    assert f"gpu_health_dcgm_level is {level}; expected 0 (no diagnostics), 1" in text
    assert "Fix: set gpu_health_dcgm_level to one of 0, 1, 2, 3." in text


@pytest.mark.parametrize("version", ["4", "4.6", "1:4.6.0-1", "latest"])
def test_a_version_that_is_not_exact_is_refused_when_installing(tmp_path, version):
    out = run(tmp_path, gpu_health_install_dcgm=True, gpu_health_dcgm_version=version)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = flat(out)
    assert f'gpu_health_dcgm_version is "{version}"; expected an exact DCGM version such as 4.6.0' in text
    assert "Fix: pin the full version" in text


def test_a_version_that_is_not_exact_is_not_judged_without_install(tmp_path):
    out = run(tmp_path, gpu_health_dcgm_version="4")
    assert out.returncode == 0, out.stdout[-3000:]


def test_a_cuda_major_dcgm_4_is_not_built_for_is_refused(tmp_path):
    out = run(tmp_path, gpu_health_install_dcgm=True, gpu_health_dcgm_cuda_major=10)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    assert "gpu_health_dcgm_cuda_major is 10; DCGM 4 ships datacenter-gpu-manager-4-cuda11" in flat(out)


@pytest.mark.parametrize("fingerprint", ["3BF863CC", "not-hex-" * 5])
def test_a_fingerprint_that_is_not_full_is_refused_for_our_own_source(tmp_path, fingerprint):
    out = run(tmp_path, gpu_health_install_dcgm=True, gpu_health_dcgm_repo_key_fingerprint=fingerprint)
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = flat(out)
    assert f'gpu_health_dcgm_repo_key_fingerprint is "{fingerprint}"' in text
    assert "not 40 or 64 hex digits" in text
    assert "gpg --show-keys KEYFILE" in text


def test_auto_adds_a_source_of_its_own_where_none_names_the_repository(tmp_path):
    unrelated = {"sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"}
    out = run(tmp_path, unrelated, gpu_health_install_dcgm=True)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "gpu_health source: nvidia" in out.stdout


@pytest.mark.parametrize("name", ["sources.list.d/gpuops-nvidia-driver.sources", "sources.list.d/cuda.list"])
def test_auto_uses_the_repository_the_host_has_where_another_source_names_it(tmp_path, name):
    url = _cuda_url()
    text = DRIVER_SOURCE.format(url=url) if name.endswith(".sources") else f"deb {url.rstrip('/')} /\n"
    out = run(tmp_path, {name: text}, gpu_health_install_dcgm=True)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "gpu_health source: configured" in out.stdout


def test_our_own_source_does_not_count_as_another(tmp_path):
    url = _cuda_url()
    ours = {"sources.list.d/gpuops-dcgm.sources": DRIVER_SOURCE.format(url=url).replace("nvidia-driver", "dcgm")}
    out = run(tmp_path, ours, gpu_health_install_dcgm=True)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "gpu_health source: nvidia" in out.stdout, "a rerun keeps the source the first run wrote"


def test_nvidia_is_refused_where_another_source_names_the_repository(tmp_path):
    url = _cuda_url()
    other = {"sources.list.d/gpuops-nvidia-driver.sources": DRIVER_SOURCE.format(url=url)}
    out = run(tmp_path, other, gpu_health_install_dcgm=True, gpu_health_dcgm_source="nvidia")
    assert out.returncode == PLAYBOOK_FAILED, out.stdout[-3000:]
    text = flat(out)
    assert "gpu_health_dcgm_source is nvidia, but" in text
    assert "gpuops-nvidia-driver.sources" in text
    assert "Conflicting values set for option Signed-By" in text
    assert "Fix: set gpu_health_dcgm_source: configured (or auto)" in text


def test_configured_reads_no_apt_source_and_skips_the_fingerprint(tmp_path):
    out = run(tmp_path, gpu_health_install_dcgm=True, gpu_health_dcgm_source="configured",
              gpu_health_dcgm_repo_key_fingerprint="short")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "gpu_health source: configured" in out.stdout
    grep = out.stdout.split("apt sources, other than ours, that already name the repository]")[1].split("TASK [")[0]
    assert grep.strip().splitlines()[-1].startswith("skipping:"), "configured reads no apt source"
