"""The gpuops_* variables: described once (roles/_gpuops_vars/meta/argument_specs.yml), checked by the boilerplate play.

Runs playbooks/boilerplate.yml on the controller against a one-host inventory (the play reads no host: its checks
are assert and validate_argument_spec, which run on the controller). An inventory that sets every described variable
to a good value passes; one that sets bad values is refused with every problem in one message, each naming the
variable, the value, what is allowed and the fix; the known names in a typo's refusal are the spec's options.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_env import playbook_env

REPO = Path(__file__).resolve().parents[3]
SPEC = REPO / "roles" / "_gpuops_vars" / "meta" / "argument_specs.yml"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
HOST = "gpu-a"
TEAM = {"gpuops_teams": [{"name": "research", "gpu_quota": 4}],
        "gpuops_members": [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0, 1]},
                           {"name": "bob", "uid": 2002, "team": "research", "gpus": [2, 3]}]}
GOOD = {**TEAM, "gpuops_platform": "compose", "gpuops_team_size": 2, "gpuops_gpu_count": 0,
        "gpuops_multi_node_training": False, "gpuops_registry_mirror": "harbor.lan:5000/proxy",
        "gpuops_cuda_version": "12.4.1", "gpuops_report_dir": "/tmp/reports", "gpuops_pool": "training",
        "gpuops_monitoring_assets_dir": "/srv/monitoring",
        "gpuops_gpu_topology": {"nvlink_domains": [], "numa_groups": [], "placements": []},
        "gpuops_kube_skip_api_stages": "a stand-in kubeadm", "gpuops_kubectl_host": "cp-01",
        "gpuops_mps_context_reserve": 576, "gpuops_mps_min_usable": 0, "kube_version": "1.34.2",
        "kube_pod_cidr": "10.32.0.0/16", "kube_service_cidr": "10.100.0.0/16", "kube_dns_domain": "gpu.lan",
        "kube_image_repository": "registry.lan:5000", "kube_config_dir": "/etc/kubernetes/site",
        "gpu_operator_namespace": "nvidia-gpu-operator", "training_stack_namespace": "training-operator",
        "kube_monitoring_namespace": "prometheus", "kube_monitoring_release_name": "prom",
        "training_stack_mlflow_namespace": "experiments",
        "gpu_health_textfile_dir": "/srv/node-exporter/textfile", "gpu_health_state_dir": "/srv/gpu-health",
        "kube_control_plane_credentials_dir": "/srv/creds",
        "kube_control_plane_endpoint": "cp.lan:6443", "kube_control_plane_bind_port": 8443,
        "compose_stack_bind_address": "127.0.0.2", "compose_stack_service_bind_address": {"mlflow": "0.0.0.0"},
        "compose_stack_ports": {"prometheus": 19090}, "compose_stack_data_dir": "/srv/gpuops",
        "docker_engine_data_root": "/srv/docker"}


def _options() -> dict:
    return yaml.safe_load(SPEC.read_text())["argument_specs"]["main"]["options"]


# The names a typo's refusal lists: the spec's gpuops_* options (not the cluster networks described beside them).
KNOWN = [name for name in _options() if name.startswith("gpuops_")]


def boilerplate(tmp_path: Path, variables: dict, play: str = "boilerplate.yml") -> tuple[int, str]:
    playbook = BIN / "ansible-playbook"
    if not playbook.exists():
        pytest.skip(f"ansible-playbook not found at {playbook} (run make venv)")
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": {HOST: {"ansible_connection": "local"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = playbook_env(REPO, cache="memory", extra={"ANSIBLE_LOCALHOST_WARNING": "false"})
    run = subprocess.run([str(playbook), "-i", str(tmp_path / "hosts.yml"), str(REPO / "playbooks" / play),
                          "-e", f"@{tmp_path / 'vars.json'}"], cwd=REPO, env=env, capture_output=True, text=True,
                         check=False, timeout=300)
    return run.returncode, run.stdout + run.stderr


def test_every_described_variable_is_accepted_with_a_good_value(tmp_path: Path) -> None:
    assert set(GOOD) == set(_options()), "GOOD gives a good value to each described variable, and nothing else"
    code, out = boilerplate(tmp_path, GOOD)
    assert code == 0, out[-3000:]


def test_bad_values_are_refused_all_at_once_in_words(tmp_path: Path) -> None:
    bad = {**TEAM, "gpuops_plattform": "compose", "gpuops_platform": "swarm", "gpuops_gpu_count": "4",
           "gpuops_team_size": -2, "gpuops_multi_node_training": "yes", "gpuops_gpu_topology": [1],
           "gpuops_registry_mirror": "http://registry.lan", "gpuops_cuda_version": "12", "compose_stack_members": [],
           "gpuops_mps_context_reserve": "576M", "kube_pod_cidr": 10,
           "validate_nccl_tests_url": "https://mirror.lan/nccl-tests/v2.13.11.tar.gz"}
    code, out = boilerplate(tmp_path, bad)
    assert code != 0, out[-3000:]
    flat = " ".join(out.split())
    expected = [
        f"unknown variable(s) gpuops_plattform on {HOST}; known: {', '.join(KNOWN)}. Fix: correct the name",
        "gpuops_platform is 'swarm'; expected one of auto, compose, kubernetes. Fix: set it to auto",
        f'gpuops_gpu_count is "4" (str) on {HOST}; expected a non-negative integer. Fix: write a whole number',
        f'gpuops_team_size is "-2" (int) on {HOST}; expected a non-negative integer.',
        f'gpuops_multi_node_training is "yes" (str) on {HOST}; expected a bool. Fix: write true or false, unquoted.',
        f'gpuops_gpu_topology is "[1]" (list) on {HOST}; expected a dict. Fix: write a YAML mapping',
        f'gpuops_registry_mirror is "http://registry.lan" on {HOST}; expected host[:port] of a registry',
        f'gpuops_cuda_version is "12" on {HOST}; expected a CUDA release as major.minor',
        f"compose_stack_members is set on {HOST} to []; it is no longer read. Fix: move it to gpuops_members",
        f'gpuops_mps_context_reserve is "576M" (str) on {HOST}; expected a non-negative integer.',
        f'kube_pod_cidr is "10" (int) on {HOST}; expected a str. Fix: write a quoted string.',
        f'validate_nccl_tests_url is set on {HOST} to "https://mirror.lan/nccl-tests/v2.13.11.tar.gz"; it is no longer '
        "read. Fix: move it to burnin_nccl_tests_url, with burnin_nccl_tests_checksum for a mirror's copy",
    ]
    missing = [fragment for fragment in expected if fragment not in flat]
    assert not missing, f"missing {missing} in:\n{out[-4000:]}"


def test_the_team_and_its_size_are_checked(tmp_path: Path) -> None:
    members = [*TEAM["gpuops_members"], {"name": "carol", "uid": 2003, "team": "research", "gpus": [3]}]
    code, out = boilerplate(tmp_path, {**TEAM, "gpuops_members": members, "gpuops_team_size": 2})
    assert code != 0, out[-3000:]
    flat = " ".join(out.split())
    assert f"the team in group_vars/all/team.yml cannot be used on {HOST}: GPU 3 is given twice" in flat, out[-3000:]
    assert "gpuops_team_size is 2 but gpuops_members lists 3 people" in flat, out[-3000:]


def test_a_shared_gpus_cap_is_judged_with_the_mps_settings(tmp_path: Path) -> None:
    """The team check judges each shared_gpus cap with gpuops_mps_* (the role's defaults where the inventory sets
    none): 1g leaves less than the least usable memory after the default reserve; with no reserve it passes."""
    bob = {"name": "bob", "uid": 2002, "team": "research", "shared_gpus": [{"gpu": 2, "memory": "1g"}]}
    members = [TEAM["gpuops_members"][0], bob]
    code, out = boilerplate(tmp_path, {**TEAM, "gpuops_members": members})
    assert code != 0, out[-3000:]
    flat = " ".join(out.split())
    assert "member bob's MPS cap on GPU 2 (gpuops_members[1].shared_gpus memory '1g') is 1024 MiB" in flat, out[-3000:]
    code, out = boilerplate(tmp_path, {**TEAM, "gpuops_members": members, "gpuops_mps_context_reserve": 0})
    assert code == 0, out[-3000:]


def test_preflight_run_alone_checks_the_team_where_one_is_declared(tmp_path: Path) -> None:
    """preflight.yml run on its own runs the same check in its first play, before it reads any host: the team rule
    (a GPU given twice) where gpuops_members is set, which preflight's per-host check no longer repeats; without a
    team, none is asked for, and a retired name is still refused."""
    twice = {**TEAM, "gpuops_members": [{"name": "alice", "uid": 2001, "team": "research", "gpus": [0, 1]},
                                        {"name": "bob", "uid": 2002, "team": "research", "gpus": [1]}]}
    code, out = boilerplate(tmp_path, twice, "preflight.yml")
    flat = " ".join(out.split())
    assert code != 0, out[-3000:]
    assert f"the team in group_vars/all/team.yml cannot be used on {HOST}: GPU 1 is given twice: to alice and to bob" \
        in flat, out[-3000:]
    assert "Gather facts in one remote call" not in out
    code, out = boilerplate(tmp_path, {"preflight_gpu_assignments": [{"name": "alice", "gpus": [0]}]}, "preflight.yml")
    flat = " ".join(out.split())
    assert code != 0, out[-3000:]
    assert (f"preflight_gpu_assignments is set on {HOST} to [{{\"name\": \"alice\", \"gpus\": [0]}}]; it is no longer "
            "read. Fix: move it to gpuops_members in group_vars/all/team.yml") in flat, out[-3000:]
    assert "gpuops_teams is" not in flat
    assert "Gather facts in one remote call" not in out
