"""gpu_health's assert stage: refusals that name the variable, the value, what is allowed and the fix, and the
choice of package source that keeps apt working (one source per repository URL).

Runs tests/unit/roles/playbooks/gpu_health_assert.yml on the controller (a Debian-family host, as the unit-test
machine and the containers are): the role's assert stage only, read-only, with apt's configuration directory
replaced by a fixture (_gpu_health_apt_dir) so that the sources another role or NVIDIA's cuda-keyring would have
written are under the test's control.

Every case is a host of one run (``CASES``: its variables and apt sources; each host connects locally): a failed
assertion stops that host only, so one ansible-playbook run answers every case, as a site's hosts each get their own
verdict (case_hosts.py). The json callback reports each host's results; a case's text is every string in them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from case_hosts import Case, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "gpu_health_assert.yml"
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
# What gpuops.cluster.nvidia_driver (nvidia_driver_source: nvidia) writes for NVIDIA's CUDA repository.
DRIVER_SOURCE = "Types: deb\nURIs: {url}\nSuites: /\nSigned-By: /etc/apt/keyrings/gpuops-nvidia-driver.gpg\n"
LEVELS = (4, -1)  # outside dcgmi diag's 0-3
VERSIONS = ("4", "4.6", "1:4.6.0-1", "latest")  # not exact; a case host is named by the index (":" is no host name)
FINGERPRINTS = ("3BF863CC", "not-hex-" * 5)  # not a full fingerprint
SOURCE_TASK = "gpuops.cluster.gpu_health : Assert | apt sources, other than ours, that already name the repository"


def _os_facts() -> tuple[str, str]:
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return release.get("ID", "").strip('"'), release.get("VERSION_ID", "").strip('"')


def _cuda_url() -> str:
    """NVIDIA's CUDA repository URL the role resolves on this machine (the cuda_repository filter)."""
    os_id, version = _os_facts()
    arch = "sbsa" if os.uname().machine == "aarch64" else os.uname().machine
    name = f"ubuntu{version.replace('.', '')}" if os_id == "ubuntu" else f"debian{version.split('.')[0]}"
    return f"{CUDA}/{name}/{arch}/"


def _cases() -> dict[str, tuple[dict[str, str], dict]]:
    """Case name -> (apt files under the fixture directory, the case's variables)."""
    url = _cuda_url()
    install = {"gpu_health_install_dcgm": True}
    cases: dict[str, tuple[dict[str, str], dict]] = {
        "defaults": ({}, {}),
        "version_4_without_install": ({}, {"gpu_health_dcgm_version": "4"}),
        "cuda_major_10": ({}, {**install, "test_cuda_major": 10}),  # the plan's, from a 418 driver (CUDA 10.1)
        "no_driver_known": ({}, {**install, "test_cuda_major": None}),
        "auto_unrelated_source": (
            {"sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"},
            install),
        "auto_driver_sources": (
            {"sources.list.d/gpuops-nvidia-driver.sources": DRIVER_SOURCE.format(url=url)}, install),
        "auto_cuda_list": ({"sources.list.d/cuda.list": f"deb {url.rstrip('/')} /\n"}, install),
        "our_own_source": (
            {"sources.list.d/gpuops-dcgm.sources": DRIVER_SOURCE.format(url=url).replace("nvidia-driver", "dcgm")},
            install),
        "nvidia_beside_another": ({"sources.list.d/gpuops-nvidia-driver.sources": DRIVER_SOURCE.format(url=url)},
                                  {**install, "gpu_health_dcgm_source": "nvidia"}),
        "configured_short_fingerprint": ({}, {**install, "gpu_health_dcgm_source": "configured",
                                              "gpu_health_dcgm_repo_key_fingerprint": "short"}),
    }
    for level in LEVELS:
        cases[f"level_{level}"] = ({}, {"gpu_health_sweep_dcgm_level": level})
    for index, version in enumerate(VERSIONS):
        cases[f"version_{index}"] = ({}, {**install, "gpu_health_dcgm_version": version})
    for index, fingerprint in enumerate(FINGERPRINTS):
        cases[f"fingerprint_{index}"] = ({}, {**install, "gpu_health_dcgm_repo_key_fingerprint": fingerprint})
    return cases


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    if _os_facts()[0] not in ("debian", "ubuntu"):
        pytest.skip("the apt cases need a Debian or Ubuntu controller")
    tmp_path = tmp_path_factory.mktemp("gpu_health_assert")
    hosts = {}
    for name, (sources, variables) in _cases().items():
        apt = tmp_path / name / "apt"
        (apt / "sources.list.d").mkdir(parents=True)
        for file, text in sources.items():
            (apt / file).write_text(text)
        # The plan's DCGM CUDA major (12 unless the case names another), as plan.dcgm_cuda_major gives it for the
        # host's driver.
        packages = {"dcgm_cuda_major": variables.pop("test_cuda_major", 12)}
        hosts[name] = {"gpu_health_test_apt_dir": str(apt), "gpuops_plan": {"hosts": {name: {"packages": packages}}},
                       **variables}
    # _gpu_health_apt_dir is a role variable (vars/main.yml): only an extra variable overrides it, templated per host.
    return run_cases(PLAYBOOK, hosts, tmp_path, extra_vars={"_gpu_health_apt_dir": "{{ gpu_health_test_apt_dir }}"},
                     cache_dir=tmp_path / "facts", extra={"ANSIBLE_FORKS": "10"}).cases


def verdict(outcomes: dict[str, Case], case: str, *, refused: bool) -> Case:
    """The case's outcome, once its host passed (refused=False) or failed (refused=True) as expected."""
    out = outcomes[case]
    assert out.failed is refused, out.text[-3000:]
    return out


def test_every_case_ran_as_a_host_of_its_own(outcomes):
    assert set(outcomes) == set(_cases())
    assert all(o.statuses for o in outcomes.values()), {n: o.statuses for n, o in outcomes.items()}


def test_defaults_pass_and_install_nothing(outcomes):
    out = verdict(outcomes, "defaults", refused=False)
    assert "gpu_health source: none" in out.text, "without gpu_health_install_dcgm no package source is decided"


@pytest.mark.parametrize("level", LEVELS)
def test_a_diag_level_outside_0_to_3_is_refused(outcomes, level):
    out = verdict(outcomes, f"level_{level}", refused=True)
    assert f"value of gpu_health_sweep_dcgm_level must be one of: 0, 1, 2, 3, got: {level}" in out.text


@pytest.mark.parametrize(("index", "version"), list(enumerate(VERSIONS)))
def test_a_version_that_is_not_exact_is_refused_when_installing(outcomes, index, version):
    out = verdict(outcomes, f"version_{index}", refused=True)
    assert f'gpu_health_dcgm_version is "{version}"; expected an exact DCGM version such as 4.6.0' in out.text
    assert "Fix: pin the full version" in out.text


def test_a_version_that_is_not_exact_is_not_judged_without_install(outcomes):
    verdict(outcomes, "version_4_without_install", refused=False)


@pytest.mark.parametrize(("case", "major"), [("cuda_major_10", "10"), ("no_driver_known", "null")])
def test_a_cuda_major_dcgm_4_is_not_built_for_is_refused(outcomes, case, major):
    out = verdict(outcomes, case, refused=True)
    assert f"(packages.dcgm_cuda_major, from its driver) is {major}; DCGM 4 ships datacenter-gpu-manager-4-cuda11" in (
        out.text)
    assert "Fix: pin nvidia_driver_version to a driver of branch 450 or later and rerun preflight" in out.text


@pytest.mark.parametrize(("index", "fingerprint"), list(enumerate(FINGERPRINTS)))
def test_a_fingerprint_that_is_not_full_is_refused_for_our_own_source(outcomes, index, fingerprint):
    out = verdict(outcomes, f"fingerprint_{index}", refused=True)
    assert f'gpu_health_dcgm_repo_key_fingerprint is "{fingerprint}"' in out.text
    assert "not 40 or 64 hex digits" in out.text
    assert "gpg --show-keys KEYFILE" in out.text


def test_auto_adds_a_source_of_its_own_where_none_names_the_repository(outcomes):
    out = verdict(outcomes, "auto_unrelated_source", refused=False)
    assert "gpu_health source: nvidia" in out.text


@pytest.mark.parametrize("case", ["auto_driver_sources", "auto_cuda_list"])
def test_auto_uses_the_repository_the_host_has_where_another_source_names_it(outcomes, case):
    out = verdict(outcomes, case, refused=False)
    assert "gpu_health source: configured" in out.text


def test_our_own_source_does_not_count_as_another(outcomes):
    out = verdict(outcomes, "our_own_source", refused=False)
    assert "gpu_health source: nvidia" in out.text, "a rerun keeps the source the first run wrote"


def test_nvidia_is_refused_where_another_source_names_the_repository(outcomes):
    out = verdict(outcomes, "nvidia_beside_another", refused=True)
    assert "gpu_health_dcgm_source is nvidia, but" in out.text
    assert "gpuops-nvidia-driver.sources" in out.text
    assert "Conflicting values set for option Signed-By" in out.text
    assert "Fix: set gpu_health_dcgm_source: configured (or auto)" in out.text


def test_configured_reads_no_apt_source_and_skips_the_fingerprint(outcomes):
    out = verdict(outcomes, "configured_short_fingerprint", refused=False)
    assert "gpu_health source: configured" in out.text
    assert set(out.statuses.get(SOURCE_TASK, [])) == {"skipped"}, ("configured reads no apt source", out.statuses)
