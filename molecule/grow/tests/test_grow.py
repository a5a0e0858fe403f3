"""The MLflow move of grow.yml against two real MLflow servers (molecule/grow/molecule.yml says what stands in).

The converge copied the Compose store, upgraded the copy's schema with the target image's MLflow, started the
target from training_stack's rendered Deployment and compared both servers field by field. Here: the report says
equal with the seeded counts and users; the members' MLflow users log in on the target with their own passwords and
hold the same permissions as on the source (bob's EDIT grant works there), while the cluster's admin logs in with the
cluster's password only and its per-team user is kept; a second copy into the non-empty store, or of users the
target has, is refused; a run logged on the source after the copy is caught by verify; a run changed on the target
fails verify, and the grow role's rollback (mlflow_rollback, run through ansible-playbook as grow.yml runs it) empties
the cluster store, puts its users back as they were and leaves the Compose MLflow writable and answering with its
original runs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
TOOL = "/usr/local/lib/gpuops-grow/grow_mlflow.py"
SOURCE = "gpuops-grow-mlflow-compose"
TARGET = "gpuops-grow-mlflow-cluster"
SEEDED_EXPERIMENTS = 5  # the three seeded, alice's and MLflow's Default
MEMBERS = ("alice", "bob")  # prepare.yml's Compose MLflow users (seed.py users)
MEMBER_GRANTS = 3  # alice: MANAGE on her experiment and model; bob: EDIT on the experiment
OK, UNAUTHORIZED = 200, 401
SEEDED_RUNS = 6
STEPS = 200
SEED = (Path(__file__).resolve().parents[1] / "files" / "seed.py").read_text()


def _password(side: str) -> str:
    return (EPHEMERAL / "secrets" / f"{side}-admin").read_text().strip()


# Each server's own name: the target admits only the Host names training_stack renders in --allowed-hosts.
URLS = {"compose": "http://127.0.0.1:5000", "cluster": "http://mlflow.mlflow.svc:5000"}


def _client(container: str, side: str, *command: str) -> str:
    run = subprocess.run(["docker", "exec", "-i", "-e", f"MLFLOW_TRACKING_URI={URLS[side]}",
                          "-e", "MLFLOW_TRACKING_USERNAME=admin", "-e", f"MLFLOW_TRACKING_PASSWORD={_password(side)}",
                          container, "python3", "-", *command], input=SEED, capture_output=True, text=True,
                         check=False, timeout=300)
    assert run.returncode == 0, f"{container} {command}: {run.stderr[-2000:]}"
    return run.stdout.strip().splitlines()[-1]


API = """
import base64, json, sys, urllib.error, urllib.parse, urllib.request
url, user, password, method, path, body = json.loads(sys.argv[1])
headers = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
           "Content-Type": "application/json"}
data = json.dumps(body).encode() if method == "POST" else None
if method == "GET" and body:
    path += "?" + urllib.parse.urlencode(body)
try:
    with urllib.request.urlopen(urllib.request.Request(url + path, data=data, headers=headers, method=method),
                                timeout=60) as answer:
        print(json.dumps([answer.status, json.loads(answer.read() or b"{}")]))
except urllib.error.HTTPError as error:
    print(json.dumps([error.code, {}]))
"""
CONTAINERS = {"compose": SOURCE, "cluster": TARGET}


def _secret(name: str) -> str:
    return (EPHEMERAL / "secrets" / name).read_text().strip()


def _api(side: str, user: str, password: str, path: str, body: dict | None = None,
         method: str = "GET") -> tuple[int, dict]:
    """One call of an MLflow server's REST API as ``user``, from inside its container: (HTTP status, answer)."""
    arg = json.dumps([URLS[side], user, password, method, path, body])
    run = subprocess.run(["docker", "exec", "-i", CONTAINERS[side], "python3", "-", arg], input=API,
                         capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    status, answer = json.loads(run.stdout.strip().splitlines()[-1])
    return status, answer


def _grants(side: str, user: str) -> set[str]:
    """The user's permissions as the admin sees them, without the role ids (they differ between the databases)."""
    status, answer = _api(side, "admin", _password(side), "/api/3.0/mlflow/users/permissions/list", {"username": user})
    assert status == OK, (side, user, status)
    return {f"{p['workspace']}:{p['resource_type']}:{p['resource_pattern']}={p['permission']}"
            for p in answer["permissions"]}


def _verify(host) -> tuple[int, dict]:
    for side in ("compose", "cluster"):
        host.run(f"install -m 0600 /dev/null /root/.{side} && printf %s '{_password(side)}' > /root/.{side}")
    result = host.run(f"python3 {TOOL} verify http://mlflow:5000 http://mlflow.mlflow.svc:5000 --user admin "
                      "--password-file /root/.compose --target-user admin --target-password-file /root/.cluster")
    host.run("rm -f /root/.compose /root/.cluster")
    return result.rc, json.loads(result.stdout)


def test_converge_verified_every_field(host) -> None:
    report = json.loads(host.file("/root/gpuops-grow-verify.json").content_string)
    assert report["equal"] is True, report["differences"]
    assert report["counts"]["experiments"] == {"source": SEEDED_EXPERIMENTS, "target": SEEDED_EXPERIMENTS}
    assert report["counts"]["runs"] == {"source": SEEDED_RUNS, "target": SEEDED_RUNS}
    assert report["metric_points"] == SEEDED_RUNS * STEPS
    assert report["params"] == SEEDED_RUNS * 2
    assert report["artifacts"] == SEEDED_RUNS
    assert report["users"] == list(MEMBERS)
    assert report["user_permissions"] >= MEMBER_GRANTS


def test_members_log_in_on_the_target_with_their_own_passwords_and_permissions(host) -> None:
    # host: testinfra runs the tests that take it first, in file order; this one must run before the rollback test
    assert host.file(TOOL).exists
    status, exp = _api("cluster", "alice", _secret("member-alice"), "/api/2.0/mlflow/experiments/get-by-name",
                       {"experiment_name": "alice-exp"})
    assert status == OK, status
    exp_id = exp["experiment"]["experiment_id"]
    for member in MEMBERS:
        status, me = _api("cluster", member, _secret(f"member-{member}"), "/api/2.0/mlflow/users/current")
        assert (status, me["user"]["username"]) == (OK, member)
        wrong = "not-" + _secret(f"member-{member}")
        assert _api("cluster", member, wrong, "/api/2.0/mlflow/users/current")[0] == UNAUTHORIZED
        assert _grants("cluster", member) == _grants("compose", member)
    assert f"default:experiment:{exp_id}=MANAGE" in _grants("cluster", "alice")
    assert f"default:experiment:{exp_id}=EDIT" in _grants("cluster", "bob")
    # bob's EDIT grant is what the target enforces: he may tag alice's experiment (default_permission is READ)
    status, _answer = _api("cluster", "bob", _secret("member-bob"), "/api/2.0/mlflow/experiments/set-experiment-tag",
                           {"experiment_id": exp_id, "key": "reviewed-by", "value": "bob"}, method="POST")
    assert status == OK, status


def test_the_cluster_admin_and_team_user_are_kept(host) -> None:
    assert host.file(TOOL).exists  # host: runs in file order, before the rollback test (as above)
    status, me = _api("cluster", "admin", _password("cluster"), "/api/2.0/mlflow/users/current")
    assert (status, me["user"]["is_admin"]) == (OK, True)
    assert _api("cluster", "admin", _password("compose"), "/api/2.0/mlflow/users/current")[0] == UNAUTHORIZED
    status, me = _api("cluster", "team-vision", _secret("cluster-team-vision"), "/api/2.0/mlflow/users/current")
    assert (status, me["user"]["username"]) == (OK, "team-vision")


def test_copy_into_a_non_empty_store_is_refused(host) -> None:
    result = host.run(f"python3 {TOOL} copy /srv/gpuops/mlflow /mnt/mlflow-store")
    assert result.rc != 0
    assert "exists already and holds runs or experiments; the target store must be empty" in result.stderr


def test_users_the_target_has_are_refused_before_any_change(host) -> None:
    paths = ("/mnt/mlflow-store/backend/mlflow.db", "/mnt/mlflow-store/auth/basic_auth.db")
    before = {p: host.file(p).sha256sum for p in paths}
    result = host.run(f"python3 {TOOL} copy /srv/gpuops/mlflow /mnt/mlflow-store --replace --skip-user admin")
    assert result.rc != 0
    assert "copy: nothing was copied: the MLflow user(s) alice, bob of the Compose MLflow exist" in result.stderr
    assert {p: host.file(p).sha256sum for p in before} == before


def test_run_after_the_copy_is_caught_then_rollback_keeps_compose_serving(host) -> None:
    late = _client(SOURCE, "compose", "late")
    rc, report = _verify(host)
    assert rc == 1
    assert f"runs.{late}: on the source only" in report["differences"]
    # a run changed on the target: verify fails on that field
    original = json.loads(_client(SOURCE, "compose", "get"))
    changed = next(run_id for run_id in original if run_id != late)
    _client(TARGET, "cluster", "change", changed)
    rc, report = _verify(host)
    assert rc == 1
    assert any(d.startswith(f"runs.{changed}.tags.team: source") for d in report["differences"]), report
    # rollback: the grow role's mlflow_rollback, as grow.yml runs it, on a Compose store the apply had left
    # read-only; its kubectl is the stand-in (files/kubectl-standin), which stops the cluster server's container
    # when the Deployment is scaled to 0 and records each call with the store's and the server's state
    assert host.run("chmod -R a-w /srv/gpuops/mlflow").rc == 0
    calls_log = EPHEMERAL / "kubectl-standin.jsonl"
    calls_log.unlink(missing_ok=True)
    standin = Path(__file__).resolve().parents[1] / "files" / "kubectl-standin"
    env = dict(os.environ, PATH=f"{standin}:{os.environ['PATH']}", GROW_STANDIN_LOG=str(calls_log),
               GROW_STANDIN_STORE=str(EPHEMERAL / "cluster-store"), GROW_STANDIN_CONTAINER=TARGET)
    run = subprocess.run(["ansible-playbook", "-i", str(EPHEMERAL / "inventory"),
                          str(Path(__file__).resolve().parents[1] / "rollback.yml")],
                         capture_output=True, text=True, check=False, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # the order: scaled to 0 while the server ran and the store was whole, its pod waited for until gone with the
    # store still whole, and only then the store emptied
    calls = [json.loads(line) for line in calls_log.read_text().splitlines()]
    kubectl = ["--kubeconfig", "/etc/kubernetes/admin.conf", "-n", "mlflow"]
    pods = "--selector=app.kubernetes.io/name=mlflow,app.kubernetes.io/managed-by=gpuops"
    expected = [[*kubectl, "scale", "deployment/mlflow", "--replicas=0"],
                [*kubectl, "wait", "--for=delete", "pod", pods, "--timeout=300s"]]
    assert [call["argv"] for call in calls] == expected, calls
    assert calls[0]["server_running"], f"the rollback itself stopped the server: {calls}"
    assert calls[0]["store_db"], calls
    assert calls[1]["store_db"], f"the store was whole until the pod was gone: {calls}"
    assert not calls[1]["server_running_after"], calls
    assert subprocess.run(["docker", "inspect", "--format", "{{.State.Running}}", TARGET], capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip() == "false", "left stopped"
    store = "/mnt/mlflow-store"
    assert not host.file(f"{store}/backend/mlflow.db").exists
    assert not host.file(f"{store}/artifacts").exists
    assert not host.file(f"{store}/auth/basic_auth.db.before-grow").exists, "the users' backup is put back"
    users = host.check_output(f"python3 -c \"import sqlite3; print(sorted(r[0] for r in sqlite3.connect("
                              f"'{store}/auth/basic_auth.db').execute('select username from users')))\"")
    assert not set(MEMBERS) & set(json.loads(users.replace("'", '"'))), "the merged members are gone: " + users
    for path in ("/srv/gpuops/mlflow", "/srv/gpuops/mlflow/backend/mlflow.db"):
        assert host.file(path).mode & 0o200, f"{path} writable by its owner again"
    assert json.loads(_client(SOURCE, "compose", "get")) == original
    assert original[changed]["team"] == "vision"
