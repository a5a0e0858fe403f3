"""The compose platform, running for real on a Debian 13 node (docker.io 26, Compose v2).

What is real: Docker Engine, Compose, Prometheus 2.53.3, Alertmanager 0.28.1, node-exporter 1.9.0
(Debian packages), MLflow 3.17.2 with basic-auth (PyPI), the local registry the images are pulled
through. Stand-ins: dcgm-exporter (serves the real metric names, values set by the test), the
member image (no CUDA), the MPS control daemon of the shared GPU (records its arguments, environment and
commands), no GPUs (compose_stack_gpu_enabled: false), Grafana not started.

The last test removes the stack (compose_stack_state: absent): run `molecule converge` again
before re-running `molecule verify`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory"))
SCENARIO = Path(__file__).resolve().parents[1]
STACK = "/opt/gpuops/stack"
COMPOSE = "docker compose --project-directory /opt/gpuops/stack -p gpuops"
SERVICES = {"dcgm-exporter", "node-exporter", "prometheus", "alertmanager", "mlflow", "ws-alice", "ws-bob", "ws-carol",
            "ws-dave", "mps-gpu4"}
GIB = 1024**3
MIB = 1024**2
# molecule.yml: alice's own limits (memory 512m, cpus 0.5); bob's default share of 2048 MiB and 2 CPUs for his 2 of
# the 5 GPUs; carol and dave share GPU 4 (half a GPU each) through MPS, capped at 6g and 8g of its memory.
LIMITS = {"alice": (512 * MIB, 0.5), "bob": (2048 * 2 // 5 * MIB, 0.8), "carol": (2048 // 10 * MIB, 0.2),
          "dave": (2048 // 10 * MIB, 0.2)}
MPS_CAPS = {"carol": "0=6G", "dave": "0=8G"}
MPS_LOG = "/run/gpuops-mps/gpu4/log/standin-calls.jsonl"
KILLED = 128 + 9  # exit status of a process killed by SIGKILL (the OOM killer)
MEMLOCK = 8388608  # compose_stack_member_memlock in molecule.yml (the node's own hard limit)
OK, UNAUTHORIZED = 200, 401
PRIVATE = 0o600
SERVICE_UID = 10100  # compose_stack_service_uid

sys.path.insert(0, str(PROJECT / "tests" / "unit" / "roles"))
import test_monitoring_assets as assets  # noqa: E402  (shared metric-name extraction, one source)


def sh(host, command: str) -> str:
    result = host.run(command)
    assert result.rc == 0, f"{command!r} failed (rc={result.rc}): {result.stdout}{result.stderr}"
    return result.stdout


def get(host, url: str, user: str | None = None, password: str | None = None) -> tuple[int, str]:
    auth = f"-u '{user}:{password}'" if user else ""
    out = sh(host, f"curl -sS -o /tmp/body -w '%{{http_code}}' {auth} '{url}'; echo; cat /tmp/body")
    code, _, body = out.partition("\n")
    return int(code), body


def get_json(host, url: str) -> dict:
    code, body = get(host, url)
    assert code == OK, f"{url}: HTTP {code}: {body[:500]}"
    return json.loads(body)


def mlflow_password() -> str:
    return (EPHEMERAL / "credentials" / "mlflow_admin_password").read_text().strip()


def member_password(name: str) -> str:
    """The member's MLflow password, as generated on the controller (compose_stack_credentials_dir)."""
    return (EPHEMERAL / "credentials" / f"mlflow_member_{name}").read_text().strip()


def call(host, method: str, path: str, user: str, password: str, body: dict | None = None) -> tuple[int, str]:
    """One MLflow REST call from the node (published on loopback) as ``user``; (status, body)."""
    data = f"-H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}" if body is not None else ""
    out = sh(host, f"curl -sS -o /tmp/body -w '%{{http_code}}' -X {method} -u {shlex.quote(f'{user}:{password}')} "
                   f"{data} 'http://127.0.0.1:5000/api/2.0/mlflow/{path}'; echo; cat /tmp/body")
    code, _, text = out.partition("\n")
    return int(code), text


def gpu0_temperature_command(value: int) -> str:
    """The command that sets the dcgm-exporter stand-in's reading of GPU 0's temperature (°C)."""
    body = json.dumps({"metric": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "value": value})
    return f"curl -sS -f -X POST -d '{body}' http://127.0.0.1:9400/set"


def test_docker_engine_pinned_held_and_configured(host) -> None:
    held = sh(host, "apt-mark showhold").split()
    assert {"docker.io", "docker-cli", "docker-compose"} <= set(held)
    assert host.package("docker.io").version == "26.1.5+dfsg1-9+deb13u1+b1"
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon["log-opts"] == {"max-size": "50m", "max-file": "5"}
    assert daemon["live-restore"] is True
    info = json.loads(sh(host, "docker info --format '{{json .}}'"))
    assert info["LiveRestoreEnabled"] is True
    assert info["LoggingDriver"] == "json-file"
    assert sh(host, "docker compose version --short").startswith("2.")


def test_docker_group_is_exactly_the_allowed_users(host) -> None:
    members = sh(host, "getent group docker").strip().split(":")[3].split(",")
    assert members == ["opsadmin"], "mallory was added in prepare and must have been removed"


def test_every_service_is_running_and_healthy(host) -> None:
    rows = [json.loads(line) for line in sh(host, f"{COMPOSE} ps --all --format json").splitlines() if line.strip()]
    state = {row["Service"]: (row["State"], row.get("Health")) for row in rows}
    assert set(state) == SERVICES, "grafana must not run in test mode; every other service must"
    for service, (status, health) in state.items():
        assert (status, health) == ("running", "healthy"), f"{service}: {status}/{health}"


def test_images_were_pulled_through_the_mirror(host) -> None:
    images = {json.loads(line)["Service"]: json.loads(line)["Image"]
              for line in sh(host, f"{COMPOSE} ps --format json").splitlines() if line.strip()}
    for service, image in images.items():
        assert image.startswith("127.0.0.1:5001/"), f"{service} runs {image}"
    assert images["prometheus"] == "127.0.0.1:5001/prometheus/prometheus:v2.53.3"


def test_prometheus_ready_targets_up_rules_loaded(host) -> None:
    assert get(host, "http://127.0.0.1:9090/-/ready")[0] == OK
    targets = get_json(host, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
    health = {t["labels"]["job"]: t["health"] for t in targets}
    assert health == dict.fromkeys(("prometheus", "alertmanager", "node-exporter", "dcgm-exporter"), "up"), health
    groups = get_json(host, "http://127.0.0.1:9090/api/v1/rules")["data"]["groups"]
    loaded = {r["name"] for g in groups for r in g["rules"]}
    shipped = {r.get("alert") or r.get("record") for r in assets.load_rules()}
    assert shipped == loaded


def test_every_metric_the_assets_use_has_a_series(host) -> None:
    """The real node-exporter and Prometheus emit the non-DCGM names the rules and dashboards use."""
    names = set(assets.NODE_AND_PROMETHEUS_METRICS) | assets.recorded_names()
    for path in assets.DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for expr in assets.dashboard_exprs(dashboard):
            names |= assets.metric_names(expr)
    missing = []
    for name in sorted(names - {"ALERTS"}):  # ALERTS exists only while an alert is pending or firing
        data = get_json(host, f"http://127.0.0.1:9090/api/v1/series?match[]={name}")["data"]
        if not data:
            missing.append(name)
    assert not missing, f"no series in Prometheus for {missing}"


def test_mlflow_refuses_anonymous_and_default_password(host) -> None:
    url = "http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1"
    assert get(host, url)[0] == UNAUTHORIZED
    assert get(host, url, "admin", "password1234")[0] == UNAUTHORIZED
    assert get(host, url, "admin", mlflow_password())[0] == OK


def test_mlflow_client_logs_and_reads_back_a_run(host) -> None:
    script = (
        "import json, mlflow\n"
        "from mlflow.tracking import MlflowClient\n"
        "mlflow.set_tracking_uri('http://127.0.0.1:5000')\n"
        "mlflow.set_experiment('gpuops-molecule')\n"
        "with mlflow.start_run() as run:\n"
        "    mlflow.log_param('lr', '0.01')\n"
        "    mlflow.log_metric('loss', 0.25)\n"
        "got = MlflowClient().get_run(run.info.run_id)\n"
        "print(json.dumps({'params': got.data.params, 'metrics': got.data.metrics}))\n"
    )
    command = (f"{COMPOSE} exec -T -e MLFLOW_TRACKING_USERNAME=admin -e MLFLOW_TRACKING_PASSWORD={mlflow_password()} "
               f"mlflow python3 -c {shlex.quote(script)}")
    out = sh(host, command).strip().splitlines()[-1]
    assert json.loads(out) == {"params": {"lr": "0.01"}, "metrics": {"loss": 0.25}}


def test_members_reach_mlflow_by_name_and_must_authenticate(host) -> None:
    probe = ("import urllib.request, urllib.error\n"
             "try:\n    urllib.request.urlopen('http://mlflow:5000/api/2.0/mlflow/experiments/search?max_results=1')\n"
             "except urllib.error.HTTPError as e:\n    print(e.code)\n")
    assert sh(host, f"{COMPOSE} exec -T ws-alice python3 -c {shlex.quote(probe)}").strip() == "401"


MEMBER_UIDS = {"alice": 2001, "bob": 2002, "carol": 2003, "dave": 2004}
CREDENTIALS = "/var/lib/gpuops/mlflow-credentials"
# The real MLflow client (the MLflow image's), run with alice's workspace's view: her uid, her network, her mounts
# (so her ~/.mlflow/credentials, HOME=/scratch) - the workspace test image carries no MLflow client.
ALICE_LOGS_A_RUN = """
import json, mlflow
mlflow.set_tracking_uri("http://mlflow:5000")
mlflow.set_experiment("alice-molecule")
with mlflow.start_run() as run:
    mlflow.log_param("lr", "0.01")
print(json.dumps({"experiment_id": run.info.experiment_id, "run_id": run.info.run_id}))
"""


def test_each_workspace_holds_only_its_members_mlflow_login(host) -> None:
    """~/.mlflow/credentials is the member's own login (their uid, 0400, read-only mount); no other workspace holds it
    or the password; no password is in `docker inspect`; the admin login is in no workspace."""
    for name, uid in MEMBER_UIDS.items():
        on_host = host.file(f"{CREDENTIALS}/{name}/credentials")
        assert (on_host.uid, on_host.mode) == (uid, 0o400), name
        assert (host.file(f"{CREDENTIALS}/{name}").uid, host.file(f"{CREDENTIALS}/{name}").mode) == (uid, 0o700)
        probe = "stat -c '%u %a' /scratch/.mlflow/credentials; cat /scratch/.mlflow/credentials; " \
                "touch /scratch/.mlflow/x 2>&1 || true"
        out = sh(host, f"{COMPOSE} exec -T ws-{name} sh -c {shlex.quote(probe)}").splitlines()
        assert out[0] == f"{uid} 400"
        assert out[1:4] == ["[mlflow]", f"mlflow_tracking_username = {name}",
                            f"mlflow_tracking_password = {member_password(name)}"]
        assert "Read-only file system" in out[4]
        inspect = sh(host, f"docker inspect gpuops-ws-{name}-1")
        for secret in [mlflow_password()] + [member_password(n) for n in MEMBER_UIDS]:
            assert secret not in inspect, f"a password is in docker inspect of ws-{name}"
        sources = [m["Source"] for m in json.loads(inspect)[0]["Mounts"] if "mlflow-credentials" in m["Source"]]
        assert sources == [f"{CREDENTIALS}/{name}"], sources

    # bob's workspace: no file it can read holds alice's password or the admin's; his own is found (the control)
    def readable_in_bobs_workspace(secret: str) -> list[str]:
        found = host.run(f"{COMPOSE} exec -T ws-bob grep -rlsF -e {shlex.quote(secret)} /scratch /artifacts /datasets "
                         "/etc /tmp /run")
        return found.stdout.split()

    assert readable_in_bobs_workspace(member_password("bob")) == ["/scratch/.mlflow/credentials"]
    assert readable_in_bobs_workspace(member_password("alice")) == []
    assert readable_in_bobs_workspace(mlflow_password()) == []
    # and on the node, bob's uid cannot read alice's file (mode 0400, alice's)
    denied = host.run(f"setpriv --reuid 2002 --regid 2002 --clear-groups cat {CREDENTIALS}/alice/credentials")
    assert denied.rc != 0, denied.stdout
    assert "Permission denied" in denied.stderr


def test_a_members_run_is_theirs_teammates_read_it_but_cannot_change_it(host) -> None:
    """alice's login, from her workspace, logs a run; the server made her the experiment's manager (she may tag it, bob
    may not: MLflow records the creator's login, while a run's user_id is only what the client says); bob reads the
    run (the default permission READ) but is refused (403) renaming or deleting the experiment or logging to the run;
    a wrong password gets 401."""
    workspace = sh(host, f"{COMPOSE} ps -q ws-alice").strip()
    image = sh(host, f"docker inspect -f '{{{{.Config.Image}}}}' $({COMPOSE} ps -q mlflow)").strip()
    workspace_env = json.loads(sh(host, f"docker inspect {workspace}"))[0]["Config"]["Env"]
    env = " ".join(f"-e {shlex.quote(e)}" for e in workspace_env
                   if e.split("=", 1)[0] in ("HOME", "USER", "LOGNAME", "MLFLOW_TRACKING_URI"))
    out = sh(host, f"docker run --rm --user 2001:2001 --network gpuops_ws-alice --volumes-from {workspace} {env} "
                   "-e MLFLOW_DISABLE_TELEMETRY=true "
                   f"--entrypoint python3 {image} -c {shlex.quote(ALICE_LOGS_A_RUN)}")
    run = json.loads(out.strip().splitlines()[-1])
    experiment, run_id = run["experiment_id"], run["run_id"]
    alice, bob = ("alice", member_password("alice")), ("bob", member_password("bob"))
    code, body = call(host, "GET", f"runs/get?run_id={run_id}", *alice)
    assert code == OK, body
    assert json.loads(body)["run"]["info"]["user_id"] == "alice", body
    tag = {"experiment_id": experiment, "key": "owner-check", "value": "x"}
    assert call(host, "POST", "experiments/set-experiment-tag", *alice, tag)[0] == OK, "alice manages her experiment"
    code, body = call(host, "GET", f"runs/get?run_id={run_id}", *bob)
    assert code == OK, body
    assert json.loads(body)["run"]["data"]["params"] == [{"key": "lr", "value": "0.01"}], body
    refused = {
        "tag": call(host, "POST", "experiments/set-experiment-tag", *bob, tag),
        "rename": call(host, "POST", "experiments/update", *bob, {"experiment_id": experiment, "new_name": "bobs"}),
        "delete": call(host, "POST", "experiments/delete", *bob, {"experiment_id": experiment}),
        "log": call(host, "POST", "runs/log-parameter", *bob, {"run_id": run_id, "key": "by", "value": "bob"}),
    }
    assert {k: v[0] for k, v in refused.items()} == dict.fromkeys(refused, 403), refused
    code, body = call(host, "GET", f"experiments/get?experiment_id={experiment}", *alice)
    assert code == OK, body
    assert json.loads(body)["experiment"]["lifecycle_stage"] == "active", body
    assert call(host, "GET", f"runs/get?run_id={run_id}", "alice", "not-alices-password")[0] == UNAUTHORIZED


# Every probe at once (a thread each): an address the workspace's network drops waits out its 5 s timeout, and
# one after the other those waits added up.
WORKSPACE_PROBE = """
import json, socket, sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor
def probe(label, url, data):
    try:
        req = urllib.request.Request(url, data=data.encode() if data else None, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
        return label, urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        return label, e.code
    except (urllib.error.URLError, OSError) as e:
        return label, "unreachable: " + type(getattr(e, "reason", e)).__name__
probes = json.loads(sys.argv[1])
with ThreadPoolExecutor(len(probes)) as pool:
    print(json.dumps(dict(pool.map(lambda args: probe(*args), probes))))
"""


@pytest.mark.parametrize("member", ["alice", "bob"])
def test_from_a_workspace_the_monitoring_admin_apis_are_unreachable_and_mlflow_is_not(host, member: str) -> None:
    """A member cannot silence the team's alerts or delete metrics: by name, by container IP, or via the host."""
    fmt = "'{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.Gateway}} {{end}}'"
    ips = {s: sh(host, f"docker inspect -f {fmt} gpuops-{s}-1").split()[0] for s in ("prometheus", "alertmanager")}
    gateway = sh(host, f"docker inspect -f {fmt} gpuops-ws-{member}-1").split()[1]  # the node, seen from the workspace
    silence = json.dumps({"matchers": [{"name": "alertname", "value": ".*", "isRegex": True}],
                          "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z",
                          "createdBy": f"mallory-via-{member}", "comment": "shh"})
    probes = [
        ("alertmanager silence by name", "http://alertmanager:9093/api/v2/silences", silence),
        ("alertmanager silence by IP", f"http://{ips['alertmanager']}:9093/api/v2/silences", silence),
        ("alertmanager via the host", f"http://{gateway}:9093/api/v2/silences", silence),
        ("prometheus admin by name", "http://prometheus:9090/api/v1/admin/tsdb/snapshot", "{}"),
        ("prometheus admin by IP", f"http://{ips['prometheus']}:9090/api/v1/admin/tsdb/snapshot", "{}"),
        ("prometheus via the host", f"http://{gateway}:9090/api/v1/status/config", ""),
        ("mlflow by name", "http://mlflow:5000/health", ""),
    ]
    out = json.loads(sh(host, f"{COMPOSE} exec -T ws-{member} python3 -c {shlex.quote(WORKSPACE_PROBE)} "
                              f"{shlex.quote(json.dumps(probes))}"))
    assert out.pop("mlflow by name") == OK, out
    reached = {k: v for k, v in out.items() if not str(v).startswith("unreachable")}
    assert not reached, f"a workspace reached the monitoring services: {reached}"
    silences = get_json(host, "http://127.0.0.1:9093/api/v2/silences")
    assert not [s for s in silences if s.get("createdBy") == f"mallory-via-{member}"]


CONNECT_PROBE = """
import json, socket, sys
out = {}
for label, host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=3).close()
        out[label] = "connected"
    except OSError as e:
        out[label] = "failed: " + type(e).__name__
print(json.dumps(out))
"""


def _ip(host, container: str) -> str:
    return sh(host, f"docker inspect -f '{{{{range .NetworkSettings.Networks}}}}{{{{.IPAddress}}}} {{{{end}}}}' "
                    f"{container}").split()[0]


@pytest.mark.parametrize(("member", "other"), [("alice", "bob"), ("bob", "alice")])
def test_a_member_cannot_reach_another_members_workspace_but_reaches_mlflow(host, member: str, other: str) -> None:
    """Each workspace is on a network of its own: a server in the other member's workspace (which its owner and the
    node do reach, so the listener is up) cannot be reached from this one, by address or by name; MLflow answers."""
    port = 8765
    sh(host, f"{COMPOSE} exec -d -T ws-{other} timeout 120 python3 -m http.server {port} --bind 0.0.0.0")
    target = _ip(host, f"gpuops-ws-{other}-1")
    control = [("own", target, port)]
    for _ in range(20):  # the server starts in the background
        own = json.loads(sh(host, f"{COMPOSE} exec -T ws-{other} python3 -c {shlex.quote(CONNECT_PROBE)} "
                                  f"{shlex.quote(json.dumps(control))}"))
        if own["own"] == "connected":
            break
        time.sleep(0.5)
    assert own == {"own": "connected"}, f"the listener in ws-{other} did not start: {own}"
    assert host.run(f"python3 -c {shlex.quote(CONNECT_PROBE)} {shlex.quote(json.dumps(control))}").stdout.strip() \
        == '{"own": "connected"}', "the node reaches the workspace (the failure below is isolation, not a dead server)"
    probes = [(f"ws-{other} by address", target, port), (f"ws-{other} by name", f"ws-{other}", port),
              ("mlflow", "mlflow", 5000)]
    out = json.loads(sh(host, f"{COMPOSE} exec -T ws-{member} python3 -c {shlex.quote(CONNECT_PROBE)} "
                              f"{shlex.quote(json.dumps(probes))}"))
    assert out.pop("mlflow") == "connected", out
    assert all(v.startswith("failed") for v in out.values()), f"ws-{member} reached ws-{other}: {out}"


def test_the_memory_limit_kills_a_process_that_allocates_past_it(host) -> None:
    """alice's limit is 512 MiB with no swap past it: 128 MiB is allocated fine, 768 MiB gets the process killed."""
    inspect = json.loads(sh(host, "docker inspect gpuops-ws-alice-1"))[0]["HostConfig"]
    assert inspect["Memory"] == inspect["MemorySwap"] == LIMITS["alice"][0]
    alloc = "import sys; b = bytearray(int(sys.argv[1]) * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('ok')"
    small = host.run(f"{COMPOSE} exec -T ws-alice python3 -c {shlex.quote(alloc)} 128")
    assert (small.rc, small.stdout.strip()) == (0, "ok"), small.stderr
    big = host.run(f"{COMPOSE} exec -T ws-alice python3 -c {shlex.quote(alloc)} 768")
    assert big.rc == KILLED, f"expected the OOM killer's SIGKILL ({KILLED}), got rc={big.rc}: {big.stdout}{big.stderr}"
    assert sh(host, "docker inspect -f '{{.State.Running}}' gpuops-ws-alice-1").strip() == "true", \
        "the workspace itself stays up"


def test_the_shared_gpus_mps_daemon_and_each_sharers_cap(host) -> None:
    """GPU 4's MPS control daemon (stand-in) was started as the role says, with the default cap the smallest of the
    sharers'; each sharer's workspace carries its own cap, shares the daemon's IPC namespace and reaches its control
    interface as its own uid; a member who does not share the GPU has no way to it."""
    calls = [json.loads(line) for line in host.file(MPS_LOG).content_string.splitlines() if line.strip()]
    start = [c for c in calls if c["event"] == "start"][-1]
    assert start["argv"] == ["-f"]
    assert start["env"]["CUDA_MPS_PIPE_DIRECTORY"] == "/run/gpuops-mps/pipe"
    assert start["env"]["CUDA_MPS_LOG_DIRECTORY"] == "/run/gpuops-mps/log"
    commands = [c["command"] for c in calls if c["event"] == "command"]
    assert "set_default_device_pinned_mem_limit 0 6G" in commands, commands
    daemon = sh(host, f"{COMPOSE} ps -q mps-gpu4").strip()
    hello = ("import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/gpuops-mps/pipe/standin-control'); "
             "s.sendall(b'get_server_list\\n'); print(s.recv(64))")
    for name, cap in MPS_CAPS.items():
        config = json.loads(sh(host, f"docker inspect gpuops-ws-{name}-1"))[0]
        env = dict(e.split("=", 1) for e in config["Config"]["Env"])
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == cap, name
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/gpuops-mps/pipe", name
        assert config["HostConfig"]["IpcMode"] == f"container:{daemon}", name
        sh(host, f"{COMPOSE} exec -T ws-{name} python3 -c {shlex.quote(hello)}")
    calls = [json.loads(line) for line in host.file(MPS_LOG).content_string.splitlines() if line.strip()]
    assert {2003, 2004} <= {c.get("from_uid") for c in calls}, "each sharer reached the daemon as its own uid"
    env = dict(e.split("=", 1) for e in json.loads(sh(host, "docker inspect gpuops-ws-alice-1"))[0]["Config"]["Env"])
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env
    assert host.run(f"{COMPOSE} exec -T ws-alice ls /run/gpuops-mps").rc != 0, "alice shares no GPU: no MPS pipe"
    log_dir = host.file("/run/gpuops-mps/gpu4/log")
    assert (log_dir.uid, log_dir.mode) == (0, 0o700), "the MPS log is the daemon's alone"


def test_services_and_members_run_as_non_root(host) -> None:
    # dcgm-exporter runs as its image's user; the MPS control daemon as root, which it needs to start an MPS server
    # as each client's uid (it has no network).
    for service in SERVICES - {"dcgm-exporter", "mps-gpu4"}:
        user = sh(host, f"docker inspect -f '{{{{.Config.User}}}}' gpuops-{service}-1").strip()
        assert user, f"{service} has no user"
        assert user.split(":")[0] not in ("0", "root"), f"{service} runs as {user!r}"
        if service.startswith("ws-"):
            assert sh(host, f"{COMPOSE} exec -T {service} id -u").strip() not in ("", "0"), service


def test_the_docker_api_is_not_on_tcp(host) -> None:
    listeners = sh(host, "ss -ltnpH")
    assert "dockerd" not in listeners, f"dockerd listens on TCP: {listeners}"
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert not [h for h in daemon.get("hosts", []) if not h.startswith("unix://")]
    # Debian's docker.socket listens on /run/docker.sock (/var/run is a link to /run, which ss does not resolve).
    assert host.socket("unix:///run/docker.sock").is_listening


def test_services_listen_on_loopback_only(host) -> None:
    listeners = [line.split()[3] for line in sh(host, "ss -ltnH").splitlines() if line.strip()]
    ports = {addr.rsplit(":", 1)[1] for addr in listeners}
    assert {"9090", "9093", "9100", "9400", "5000"} <= ports
    assert "3000" not in ports, "Grafana is disabled in test mode"
    exposed = [a for a in listeners if not (a.startswith("127.") or a.startswith("[::1]"))]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_no_file_holds_a_default_password(host) -> None:
    result = host.run("grep -rIl -e password1234 /opt/gpuops /var/lib/gpuops /etc")
    assert result.rc == 1, f"default password found in: {result.stdout}"
    for name in ("mlflow_basic_auth.ini", "grafana_admin_password"):
        secret = host.file(f"{STACK}/secrets/{name}")
        assert secret.mode == PRIVATE
        assert secret.uid == SERVICE_UID
    for path in (EPHEMERAL / "credentials").iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert "admin_password = " + mlflow_password() in host.file(f"{STACK}/secrets/mlflow_basic_auth.ini").content_string


def test_members_get_exactly_their_gpus_numa_cpus_and_limits_in_compose_config(host) -> None:
    config = json.loads(sh(host, f"cd {STACK} && docker compose -f compose.yaml config --format json"))
    expected = {"alice": (["0", "1"], "0"), "bob": (["2", "3"], "1"), "carol": (["4"], "1"), "dave": (["4"], "1")}
    for name, (gpus, cpus) in expected.items():
        svc = config["services"][f"ws-{name}"]
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "device_ids": gpus, "capabilities": ["gpu"]}]
        assert svc["cpuset"] == cpus
        assert int(svc["mem_limit"]) == int(svc["memswap_limit"]) == LIMITS[name][0], name
        assert float(svc["cpus"]) == LIMITS[name][1], name
        assert svc["networks"].keys() == {f"ws-{name}"}, "a member's workspace is on its own network only"
    for name in ("alice", "bob"):
        assert int(config["services"][f"ws-{name}"]["shm_size"]) == GIB
    assert set(config["services"]["mlflow"]["networks"]) == {"monitoring"} | {f"ws-{n}" for n in expected}
    for service in ("prometheus", "alertmanager"):
        assert set(config["services"][service]["networks"]) == {"monitoring"}


def test_member_workspaces_users_mounts_and_limits(host) -> None:
    for name, uid, cpus in (("alice", 2001, "0"), ("bob", 2002, "1"), ("carol", 2003, "1"), ("dave", 2004, "1")):
        probe = (
            "id -u; grep Cpus_allowed_list /proc/self/status | cut -f2; ulimit -l; "
            "df -k /dev/shm | tail -1 | tr -s ' ' | cut -d' ' -f2; cat /datasets/demo/README.txt; "
            "touch /datasets/demo/x 2>&1 || true; touch /scratch/ok && echo scratch-writable"
        )
        out = sh(host, f"{COMPOSE} exec -T ws-{name} sh -c {shlex.quote(probe)}").splitlines()
        assert out[0] == str(uid)
        assert out[1] == cpus
        assert out[2] == str(MEMLOCK // 1024)  # ulimit -l prints KiB
        assert int(out[3]) == GIB // 1024  # the sharers' /dev/shm is the MPS daemon's, of the same size
        assert out[4] == "demo dataset, read-only in every workspace"
        assert "Read-only file system" in out[5]
        assert out[6] == "scratch-writable"
        inspect = json.loads(sh(host, f"docker inspect $({COMPOSE} ps -q ws-{name})"))[0]["HostConfig"]
        assert inspect["Memory"] == inspect["MemorySwap"] == LIMITS[name][0], name
        assert inspect["NanoCpus"] == round(LIMITS[name][1] * 1e9), name
        assert inspect["CpusetCpus"] == cpus
        for private in (f"/var/lib/gpuops/scratch/{name}", f"/var/lib/gpuops/artifacts/{name}"):
            directory = host.file(private)
            assert (directory.uid, directory.mode) == (uid, 0o700), f"{private} must be {name}'s alone"
        sh(host, f"{COMPOSE} exec -T ws-{name} touch /artifacts/ok")
        assert inspect["Privileged"] is False
        assert inspect["CapDrop"] == ["ALL"]


def test_critical_temperature_alert_fires(host, gpu0_hot_since: float) -> None:
    """GPU 0 reads 90 °C since the module's start (gpu0_hot_since): GpuTemperatureCritical fires in Prometheus and
    reaches Alertmanager. Late in the file, so that the alert's wait passes while the tests before it run."""
    try:
        # for: 1m, capped at 10 s in this scenario (compose_stack_prometheus_rule_for_max), at a 5 s scrape/evaluation
        # interval; the margin is for a loaded 2-core CI.
        deadline = gpu0_hot_since + 180
        firing = []
        while time.time() < deadline:
            alerts = get_json(host, "http://127.0.0.1:9090/api/v1/alerts")["data"]["alerts"]
            firing = [a for a in alerts if a["labels"]["alertname"] == "GpuTemperatureCritical"
                      and a["state"] == "firing"]
            if firing:
                break
            time.sleep(3)
        assert firing, "GpuTemperatureCritical did not fire within 180 s of the temperature reaching 90 °C"
        assert firing[0]["labels"]["gpu"] == "0"
        assert firing[0]["labels"]["severity"] == "critical"
        deadline = time.time() + 90
        received = []
        while time.time() < deadline:
            received = [a for a in get_json(host, "http://127.0.0.1:9093/api/v2/alerts?active=true")
                        if a["labels"]["alertname"] == "GpuTemperatureCritical"]
            if received:
                break
            time.sleep(2)
        assert received, "Alertmanager never received GpuTemperatureCritical"
    finally:
        sh(host, gpu0_temperature_command(45))


def test_training_image_is_non_root_and_carries_no_data(host) -> None:
    image = "gpuops-test/training:0.1.0"
    config = json.loads(sh(host, f"docker image inspect {image}"))[0]["Config"]
    assert config["User"] == "1000:1000"
    assert config["Labels"]["org.gpuops.cuda-version"] == "12.2"
    assert config["Labels"]["org.gpuops.driver-checked"] == "535.261.03"
    assert sh(host, f"docker run --rm {image} id -u").strip() == "1000"
    listing = sh(host, f"docker run --rm {image} find /workspace -type f").split()
    assert "/workspace/src/train.py" in listing
    assert "/workspace/config/train.yaml" in listing
    assert not [p for p in listing if "/data/" in p], f"data got into the image: {listing}"
    assert "config: " in sh(host, f"docker run --rm {image}")


def test_training_image_is_rebuilt_only_when_its_inputs_change(host, tmp_path) -> None:
    """The re-run reads the image's inputs digest and builds nothing; changed code is built, then the original."""
    image = "gpuops-test/training:0.1.0"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")

    def build(*extra: str) -> tuple[str, str, str]:
        run = ["ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / "training_image.yml"), *extra]
        result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=900, check=False)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        config = json.loads(sh(host, f"docker image inspect {image}"))[0]
        return result.stdout, config["Id"], config["Config"]["Labels"]["org.gpuops.inputs-digest"]

    before = json.loads(sh(host, f"docker image inspect {image}"))[0]["Id"]
    out, same, digest = build()
    assert same == before, "unchanged inputs: the image must not be rebuilt"
    assert "skipping: [gpuops-compose-node]" in out.split("Build the training image", 1)[1].split("TASK [", 1)[0]
    code = tmp_path / "code"
    shutil.copytree(PROJECT / "roles" / "training_image" / "files" / "scaffold", code)
    (code / "src" / "train.py").write_text((code / "src" / "train.py").read_text() + "\n# changed by the test\n")
    _out, changed, changed_digest = build("-e", f"training_image_code_dir={code}")
    assert changed != before, "changed code must be built"
    assert changed_digest != digest
    assert "# changed by the test" in sh(host, f"docker run --rm --entrypoint cat {image} /workspace/src/train.py")
    _out, _back, back_digest = build()
    assert back_digest == digest, "the scaffold again: its digest again"
    assert "# changed by the test" not in sh(host, f"docker run --rm --entrypoint cat {image} /workspace/src/train.py")


def test_check_mode_on_the_converged_stack_changes_nothing() -> None:
    """--check against the converged node runs every task and predicts no change (honest check mode)."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = ["ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / "compose.yml"), "--check"]
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=600, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith("gpuops-compose-node ")]
    assert recap, out[-2000:]
    assert " changed=0 " in recap[-1], recap[-1]
    assert " failed=0 " in recap[-1], recap[-1]


def test_zz_teardown_keeps_data_unless_asked(host) -> None:
    sh(host, "touch /var/lib/gpuops/scratch/alice/teardown-marker")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    run = ["ansible-playbook", "-i", INVENTORY, str(SCENARIO / "teardown.yml")]
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert sh(host, "docker ps -aq --filter label=com.docker.compose.project=gpuops").strip() == ""
    assert host.file("/var/lib/gpuops/mlflow/backend/mlflow.db").exists, "MLflow data must survive a plain teardown"
    assert host.file("/var/lib/gpuops/scratch/alice/teardown-marker").exists, "scratch must survive too"

    result = subprocess.run([*run, "-e", "compose_stack_test_remove_data=true"], capture_output=True, text=True,
                            env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert not host.file("/var/lib/gpuops").exists
    assert not host.file(STACK).exists
    assert not host.mount_point("/mnt/datasets/demo").exists
    assert "/mnt/datasets/demo" not in host.file("/etc/fstab").content_string


@pytest.fixture(autouse=True, scope="module")
def _stack_present(host) -> None:
    """Fail early with a hint when the stack is not there (e.g. verify re-run after the teardown test)."""
    if not host.file(f"{STACK}/compose.yaml").exists:
        pytest.fail(f"{STACK}/compose.yaml is missing: run `molecule converge -s compose` before `molecule verify`")


@pytest.fixture(autouse=True, scope="module")
def gpu0_hot_since(host, _stack_present) -> Iterator[float]:
    """GPU 0 at 90 °C from the module's start, for test_critical_temperature_alert_fires (which sets 45 °C again once it
    has seen the alert): the alert's wait (scrape, evaluation, its for:) passes while the tests before it run, not on
    its own. The time it was set; 45 °C again at the module's end (not checked: the last test removes the stack)."""
    sh(host, gpu0_temperature_command(90))
    yield time.time()
    host.run(gpu0_temperature_command(45))
