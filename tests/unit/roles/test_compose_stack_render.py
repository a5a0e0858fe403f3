"""compose_stack renders the compose project we mean, and refuses bad plans before any change.

Runs the role's own assert/install/render task files with ansible-playbook on the controller
(tests/unit/roles/playbooks/compose_render.yml) into a temporary directory; no Docker needed. The render and every
refusal are the hosts of one run (``cases``, case_hosts.py; each its own folders): a refusal stops its own host only.
The topology is a real capture (HGX H100, 8 GPUs, 2 NUMA nodes) read by the collection's parser.
The running stack is tested by the `compose` Molecule scenario.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_env import run_playbook as run_localhost
from case_hosts import Case, Run, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "compose_render.yml"
# The review entry point: the same templates without the install stage (for tests that read only compose.yaml).
REVIEW_PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "compose_review.yml"


def role_variables(tmp_path: Path, extra: dict) -> dict:
    variables = {
        "compose_stack_project_dir": str(tmp_path / "project"),
        "compose_stack_data_dir": str(tmp_path / "data"),
        "compose_stack_scratch_dir": str(tmp_path / "scratch"),
        "compose_stack_datasets_dir": str(tmp_path / "datasets"),
        "compose_stack_credentials_dir": str(tmp_path / "credentials"),
        "compose_stack_service_uid": 10100,
        "compose_stack_service_gid": 10100,
        "compose_stack_member_memory_pool_mb": 819200,
        "gpuops_platform": "compose",
        **extra,
    }
    if os.geteuid() != 0:
        pytest.skip("the role's install stage chowns directories to member uids: run as root (as make unit does)")
    return variables


def run_playbook(tmp_path: Path, extra: dict, playbook_file: Path) -> subprocess.CompletedProcess:
    return run_localhost(playbook_file, role_variables(tmp_path, extra), tmp_path, extra={"NO_COLOR": "1"})


@pytest.fixture(scope="module")
def h100_topology() -> dict:
    capture = REPO.parent / "shared" / "data" / "nvidia-smi" / "topo" / "h100x8_sxm_2numa_noNIC.txt"
    if not capture.exists():
        pytest.skip(f"real third-party data not present: {capture}")
    return parse_topology(capture.read_text())


ALICE_UID = 2001
PASSWORD_LENGTH = 32
MEMBERS = [
    {"name": "alice", "uid": 2001, "gpus": [0, 1]},
    {"name": "bob", "uid": 2002, "gpus": [4], "image": "docker.io/team/bob:1.0", "mounts": ["/srv/code/bob:/code:rw"]},
    {"name": "carol", "uid": 2003, "shared_gpus": [{"gpu": 5, "memory": "20g"}], "cpus": 4},
    {"name": "dave", "uid": 2004, "shared_gpus": [{"gpu": 5, "memory": "30g"}]},
]
WORKSPACES = ("alice", "bob", "carol", "dave")
BOB_VAULT_PASSWORD = "bobs-password-from-vault"


# The refusals of bad member MLflow passwords or names: case -> (the case's variables beside MEMBERS, the refusal).
BAD_MLFLOW = {
    "password_not_a_string": ({"compose_stack_mlflow_member_passwords": {"alice": 123456789012345}},
                              "compose_stack_mlflow_member_passwords.alice is of type int, not a string "
                              "(the value is not shown)"),
    "password_too_short": ({"compose_stack_mlflow_member_passwords": {"alice": "hunter2"}},
                           "compose_stack_mlflow_member_passwords.alice is 7 characters long (the value is not shown)"),
    "password_for_no_member": ({"compose_stack_mlflow_member_passwords": {"mallory": "a-long-enough-password"}},
                               "compose_stack_mlflow_member_passwords.mallory is given for no member of gpuops_members "
                               "(alice, bob"),
    "member_named_admin": ({"gpuops_members": [*MEMBERS, {"name": "admin", "uid": 2009, "gpus": [7]}]},
                           "a member is named admin, the MLflow admin user"),
}


def cases(tmp_path: Path, topology: dict, nfs_port: int) -> dict[str, dict]:
    """Case (a host of the one run) -> its variables, its folders under ``tmp_path / case``."""
    found = {
        "rendered": {
            "gpuops_members": MEMBERS,
            "compose_stack_datasets": [{"name": "imagenet", "src": ""}],
            "gpuops_registry_mirror": "registry.lan:5000",
            "compose_stack_gpu_enabled": False,
            "compose_stack_grafana_enabled": False,
            "compose_stack_prometheus_rule_for_max": "10s",
            "compose_stack_member_cpus_pool": 208,
            "compose_stack_mps_dir": str(tmp_path / "rendered" / "mps"),
            "compose_stack_mlflow_member_passwords": {"bob": BOB_VAULT_PASSWORD},
        },
        "gpu_lacked": {"gpuops_members": [{"name": "alice", "uid": 2001, "gpus": [0, 1]},
                                          {"name": "bob", "uid": 2002, "gpus": [9]}]},
        "nfs_probe": {"gpuops_members": [{"name": "alice", "uid": 2001, "gpus": [0]}],
                      "compose_stack_datasets": [{"name": "v6", "src": "[::1]:/export/v6",
                                                  "opts": f"ro,hard,port={nfs_port}"}]},
        "unpinned_image": {"gpuops_members": [{"name": "alice", "uid": 2001, "gpus": [0],
                                               "image": "team/alice:latest"}]},
        **{name: {"gpuops_members": MEMBERS, **extra} for name, (extra, _message) in BAD_MLFLOW.items()},
    }
    return {name: role_variables(tmp_path / name, {"gpuops_gpu_topology": topology, **variables})
            for name, variables in found.items()}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, h100_topology: dict) -> tuple[Path, Run, int]:
    """The folder under which each case's folders are (``<case>/project``, ...), the run, and the NFS case's port."""
    tmp_path = tmp_path_factory.mktemp("render")
    with socket.socket(socket.AF_INET6) as closed:  # a port nothing listens on once this block ends
        closed.bind(("::1", 0))
        port = closed.getsockname()[1]
    return tmp_path, run_cases(PLAYBOOK, cases(tmp_path, h100_topology, port), tmp_path, extra={"NO_COLOR": "1"}), port


def refused(run: tuple[Path, Run, int], case: str) -> tuple[Path, Case]:
    """The case's folder and outcome, once its host was refused."""
    tmp_path, found, _port = run
    assert found.cases[case].failed, found.cases[case].text[-3000:]
    return tmp_path / case, found.cases[case]


@pytest.fixture(scope="module")
def rendered(run: tuple[Path, Run, int]) -> Path:
    tmp_path, found, _port = run
    assert not found.cases["rendered"].failed, found.cases["rendered"].text[-4000:]
    return tmp_path / "rendered"


def test_every_case_ran_as_a_host_of_its_own(run) -> None:
    assert set(run[1].cases) == {"rendered", "gpu_lacked", "nfs_probe", "unpinned_image", *BAD_MLFLOW}
    assert all(case.statuses for case in run[1].cases.values())


def compose(rendered: Path) -> dict:
    return yaml.safe_load((rendered / "project" / "compose.yaml").read_text())


def test_members_get_exactly_their_gpus_and_numa_local_cpus(rendered: Path) -> None:
    services = compose(rendered)["services"]
    alice, bob = services["ws-alice"], services["ws-bob"]
    assert alice["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": ["gpu"]}]
    assert bob["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["4"]
    assert alice["cpuset"] == "0-25,104-129"  # half of NUMA 0 (2 of its 4 GPUs), with HT siblings
    assert bob["cpuset"] == "52-64,156-168"  # a quarter of NUMA 1
    assert alice["mem_limit"] == alice["memswap_limit"] == "204800m"  # 2 of 8 GPUs: a quarter of 819200 MiB
    assert bob["mem_limit"] == "102400m"
    assert (alice["cpus"], bob["cpus"]) == (52.0, 26.0)  # a quarter and an eighth of 208 CPUs
    assert alice["labels"]["org.gpuops.member"] == "alice"  # what health, validate and upgrade filter on


def test_a_shared_gpu_gets_one_mps_daemon_and_each_sharer_its_cap(rendered: Path) -> None:
    services = compose(rendered)["services"]
    daemon, carol, dave = services["mps-gpu5"], services["ws-carol"], services["ws-dave"]
    assert daemon["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": ["5"], "capabilities": ["gpu", "compute", "utility"]}]
    assert daemon["network_mode"] == "none"
    assert daemon["init"] is True, "docker's init as PID 1: a stop is not the 10 s grace period, MPS servers reaped"
    assert daemon["ipc"] == "shareable"
    assert "set_default_device_pinned_mem_limit 0 20G" in daemon["command"][-1]  # the smallest cap
    assert daemon["environment"] == {"CUDA_MPS_PIPE_DIRECTORY": "/run/gpuops-mps/pipe",
                                     "CUDA_MPS_LOG_DIRECTORY": "/run/gpuops-mps/log"}
    for ws, cap in ((carol, "0=20G"), (dave, "0=30G")):
        assert ws["environment"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == cap
        assert ws["environment"]["CUDA_MPS_PIPE_DIRECTORY"] == "/run/gpuops-mps/pipe"
        assert ws["ipc"] == "service:mps-gpu5"
        assert "shm_size" not in ws, "a sharer's /dev/shm is the daemon's"
        assert f"{rendered}/mps/gpu5/pipe:/run/gpuops-mps/pipe:rw" in ws["volumes"]
        assert ws["depends_on"] == {"mps-gpu5": {"condition": "service_healthy"}}
        assert ws["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["5"]
        assert ws["cpuset"] == "65-77,169-181"  # GPU 5's quarter of NUMA 1, the same for both sharers
    assert (carol["cpus"], dave["cpus"]) == (4.0, 13.0)  # carol's own; dave: half a GPU of 208 CPUs / 8
    assert carol["mem_limit"] == dave["mem_limit"] == "51200m"  # half a GPU's share of 819200 MiB
    assert "CUDA_MPS_PIPE_DIRECTORY" not in services["ws-alice"]["environment"]
    assert not [v for v in services["ws-alice"]["volumes"] if "gpuops-mps" in v]
    assert oct((rendered / "mps" / "gpu5" / "log").stat().st_mode & 0o777) == "0o700"
    assert oct((rendered / "mps" / "gpu5" / "pipe").stat().st_mode & 0o777) == "0o755"


def test_members_run_as_themselves_with_nccl_limits_and_read_only_data(rendered: Path) -> None:
    services = compose(rendered)["services"]
    for name, uid in (("alice", 2001), ("bob", 2002), ("carol", 2003), ("dave", 2004)):
        ws = services[f"ws-{name}"]
        assert ws["user"] == f"{uid}:{uid}"
        assert ws["init"] is True, "docker's init as PID 1: the command gets SIGTERM, orphans are reaped"
        assert ws.get("shm_size", services["mps-gpu5"]["shm_size"]) == "16g"
        assert ws["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
        assert f"{rendered}/datasets/imagenet:/datasets/imagenet:ro" in ws["volumes"]
        assert f"{rendered}/scratch/{name}:/scratch:rw" in ws["volumes"]
        assert f"{rendered}/data/artifacts/{name}:/artifacts:rw" in ws["volumes"]
        assert "no-new-privileges:true" in ws["security_opt"]
    assert "/srv/code/bob:/code:rw" in services["ws-bob"]["volumes"]
    assert (rendered / "scratch" / "alice").stat().st_uid == ALICE_UID
    assert oct((rendered / "scratch" / "alice").stat().st_mode & 0o777) == "0o700"
    assert (rendered / "data" / "artifacts" / "alice").stat().st_uid == ALICE_UID
    assert oct((rendered / "data" / "artifacts" / "alice").stat().st_mode & 0o777) == "0o700"


def test_no_service_runs_as_root_except_dcgm_exporter_and_the_mps_daemon(rendered: Path) -> None:
    for name, service in compose(rendered)["services"].items():
        if name == "dcgm-exporter":
            assert service["cap_drop"] == ["ALL"]
            continue
        if name.startswith("mps-gpu"):  # starts an MPS server as each client's uid; no network at all
            assert service["network_mode"] == "none"
            continue
        assert "user" in service, f"{name} has no user"
        assert not str(service["user"]).startswith("0:"), f"{name} runs as root"


def test_every_port_binds_to_loopback(rendered: Path) -> None:
    for name, service in compose(rendered)["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port}"


def test_every_image_goes_through_the_mirror_and_is_pinned(rendered: Path) -> None:
    for name, service in compose(rendered)["services"].items():
        assert service["image"].startswith("registry.lan:5000/"), f"{name}: {service['image']}"
        assert re.search(r":[\w.-]+$", service["image"])
        assert not service["image"].endswith(":latest")
    assert compose(rendered)["services"]["ws-bob"]["image"] == "registry.lan:5000/team/bob:1.0"


def test_grafana_declared_but_disabled_by_profile(rendered: Path) -> None:
    grafana = compose(rendered)["services"]["grafana"]
    assert grafana["profiles"] == ["grafana"]
    assert grafana["image"].endswith("grafana/grafana:11.6.0")


def test_no_gpu_override_resets_only_gpu_reservations(rendered: Path) -> None:
    text = (rendered / "project" / "compose.no-gpu.yaml").read_text()
    assert "NO-GPU TEST MODE" in text
    reset = {"dcgm-exporter", "mps-gpu5"} | {f"ws-{n}" for n in WORKSPACES}
    assert set(re.findall(r"^  ([\w-]+):$", text, flags=re.M)) == reset
    assert text.count("deploy: !reset {}") == len(reset)


def test_rules_are_the_shipped_rules_with_capped_for(rendered: Path) -> None:
    rules = yaml.safe_load((rendered / "project" / "prometheus" / "rules" / "gpu.rules.yml").read_text())
    shipped = yaml.safe_load((REPO / "roles" / "monitoring_assets" / "files" / "prometheus" / "rules"
                              / "gpu.rules.yml").read_text())
    got = [r for g in rules["groups"] for r in g["rules"]]
    want = [r for g in shipped["groups"] for r in g["rules"]]
    assert [r.get("expr") for r in got] == [r.get("expr") for r in want]
    assert {r.get("for") for r in got if "for" in r} <= {"10s", "0m"}
    assert "{{ $labels.gpu }}" in json.dumps(got), "Prometheus templates must not be rendered by Ansible"


def test_secrets_are_private_and_never_a_default(rendered: Path) -> None:
    for path in (rendered / "credentials").iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
        assert len(path.read_text().strip()) >= PASSWORD_LENGTH
    ini = (rendered / "project" / "secrets" / "mlflow_basic_auth.ini").read_text()
    password = (rendered / "credentials" / "mlflow_admin_password").read_text().strip()
    assert f"admin_password = {password}" in ini
    for secret in ("mlflow_basic_auth.ini", "mlflow.env", "grafana_admin_password"):
        assert oct((rendered / "project" / "secrets" / secret).stat().st_mode & 0o777) == "0o600", secret
    key = (rendered / "credentials" / "mlflow_flask_secret_key").read_text().strip()
    assert (rendered / "project" / "secrets" / "mlflow.env").read_text() == f"MLFLOW_FLASK_SERVER_SECRET_KEY={key}\n"
    for path in (rendered / "project").rglob("*"):
        if path.is_file():
            assert "password1234" not in path.read_text(), path
    assert password not in (rendered / "project" / "compose.yaml").read_text()


def test_a_gpu_the_host_lacks_fails_before_any_change(run) -> None:
    """What depends on the host is the plan's (a GPU given twice is the team's rule: test_team, tests/bad_input)."""
    folder, out = refused(run, "gpu_lacked")
    assert "member bob is given GPU 9, but this host has GPUs 0, 1, 2, 3, 4, 5, 6, 7" in out.text
    assert "Nothing was changed" in out.text
    assert not (folder / "project").exists()
    assert not (folder / "credentials").exists()


def test_the_nfs_probe_takes_the_plans_host_and_port_before_any_change(run) -> None:
    """The role probes the server preflight probed (the plan's nfs_servers: port= of opts, an IPv6 src's host), not
    port 2049 of the text before src's first colon."""
    folder, out = refused(run, "nfs_probe")
    port = run[2]
    assert f"dataset v6: NFS server ::1 (compose_stack_datasets) did not answer on port {port} within 10 s" in (
        out.text), out.text[-3000:]
    assert not (folder / "datasets").exists()


def test_unpinned_image_fails(run) -> None:
    folder, out = refused(run, "unpinned_image")
    assert 'member alice is "team/alice:latest"' in out.text, out.text[-3000:]
    assert not (folder / "project").exists()


def test_each_workspace_has_a_network_of_its_own_shared_with_mlflow_only(rendered: Path) -> None:
    project = compose(rendered)
    networks = {name: set(service.get("networks") or []) for name, service in project["services"].items()}
    assert set(project["networks"]) == {"monitoring"} | {f"ws-{n}" for n in WORKSPACES}
    for name in WORKSPACES:
        assert networks[f"ws-{name}"] == {f"ws-{name}"}
        on_it = {service for service, nets in networks.items() if f"ws-{name}" in nets}
        assert on_it == {f"ws-{name}", "mlflow"}, f"only {name}'s workspace and MLflow (it has a login) are on it"
    assert networks["mlflow"] == {"monitoring"} | {f"ws-{n}" for n in WORKSPACES}


def test_compose_file_holds_no_secret_in_clear(rendered: Path) -> None:
    text = (rendered / "project" / "compose.yaml").read_text()
    for secret in (rendered / "credentials").iterdir():
        assert secret.read_text().strip() not in text, secret.name
    services = compose(rendered)["services"]
    assert services["mlflow"]["env_file"] == ["./secrets/mlflow.env"]
    grafana = services["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    assert not [k for s in services.values() for k in (s.get("environment") or {})
                if re.search(r"PASSWORD$|SECRET|TOKEN", k)]


def test_an_authenticated_service_may_be_exposed_explicitly(tmp_path: Path, h100_topology: dict) -> None:
    result = run_playbook(tmp_path, {
        "gpuops_gpu_topology": h100_topology,
        "gpuops_members": MEMBERS,
        "compose_stack_expose_publicly": True,
        # and IPv6 loopback for Prometheus: Compose reads an IPv6 host address in brackets only
        "compose_stack_service_bind_address": {"mlflow": "0.0.0.0", "prometheus": "::1"},
    }, REVIEW_PLAYBOOK)
    assert result.returncode == 0, result.stdout[-3000:]
    ports = {name: service.get("ports", []) for name, service in compose(tmp_path)["services"].items()}
    assert ports["mlflow"] == ["0.0.0.0:5000:5000"]
    assert ports["prometheus"] == ["[::1]:9090:9090"]
    assert all(p.startswith("127.0.0.1:") for name, ps in ports.items() if name not in ("mlflow", "prometheus")
               for p in ps)


def test_each_workspace_mounts_only_its_own_mlflow_login_read_only(rendered: Path) -> None:
    """~/.mlflow/credentials (HOME is /scratch) from the member's own 0700 directory, read-only; no password in the
    environment; a password from vault is used as given, the others generated on the controller (0600)."""
    services = compose(rendered)["services"]
    for name, uid in zip(WORKSPACES, (2001, 2002, 2003, 2004)):
        mounts = {service: [v for v in spec.get("volumes", []) if "/mlflow-credentials" in v]
                  for service, spec in services.items()}
        assert {s: m for s, m in mounts.items() if m} == {
            f"ws-{n}": [f"{rendered}/data/mlflow-credentials/{n}:/scratch/.mlflow:ro"] for n in WORKSPACES}
        assert services[f"ws-{name}"]["environment"]["HOME"] == "/scratch"
        assert not [k for k in services[f"ws-{name}"]["environment"] if k.startswith("MLFLOW_TRACKING_USER")]
        for private in (rendered / "data" / "mlflow-credentials" / name, rendered / "scratch" / name / ".mlflow"):
            assert (private.stat().st_uid, oct(private.stat().st_mode & 0o777)) == (uid, "0o700"), private
    root = (rendered / "data" / "mlflow-credentials").stat()
    assert (root.st_uid, oct(root.st_mode & 0o777)) == (0, "0o700")
    generated = sorted(p.name for p in (rendered / "credentials").glob("mlflow_member_*"))
    assert generated == ["mlflow_member_alice", "mlflow_member_carol", "mlflow_member_dave"], "bob's is from vault"
    for path in (rendered / "credentials").glob("mlflow_member_*"):
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert BOB_VAULT_PASSWORD not in (rendered / "project" / "compose.yaml").read_text()


@pytest.mark.parametrize("case", list(BAD_MLFLOW))
def test_a_bad_member_mlflow_password_or_name_fails_before_any_change(run, case: str) -> None:
    folder, out = refused(run, case)
    assert BAD_MLFLOW[case][1] in out.text, out.text[-3000:]
    assert "hunter2" not in run[1].stdout, "the value is never shown"
    assert "123456789012345" not in run[1].stdout, "the value is never shown"
    assert not (folder / "project").exists()
    assert not (folder / "credentials").exists()
