"""Part 2 (issue 9) in the render of inventories/cluster: GPU Operator, tenancy, local PVs, monitoring, training.

Uses the session fixtures of conftest.py (render.yml runs once) and validator.problems (kubernetes-validate strict
at the pinned version for core kinds, the CRD schema from ../shared/data for custom resources).
"""

from __future__ import annotations

import base64
import configparser
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import helm_chart
import jinja2
import jsonschema
import pytest
import yaml
from conftest import REPO_ROOT, SHARED_DATA, load_objects
from validator import crd_schemas, problems

if str(REPO_ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "collections"))
from ansible_collections.gpuops.cluster.plugins.plugin_utils import gpu_operator

ADDONS = ("gpu_operator", "kube_tenancy", "local_pv", "kube_monitoring", "training_stack")
POD_OWNERS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"}


def addon_objects(rendered_objects: list[tuple[str, dict]], role: str | None = None) -> list[dict]:
    return [obj for path, obj in rendered_objects
            if path.split("/")[0] in ((role,) if role else ADDONS)]


def pod_specs(obj: dict) -> list[dict]:
    """Every pod template in an object (workloads and PyTorchJob replica specs)."""
    if obj["kind"] in POD_OWNERS:
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "PyTorchJob":
        return [spec["template"]["spec"] for spec in obj["spec"]["pytorchReplicaSpecs"].values()]
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    return []


def test_every_addon_rendered(rendered_objects):
    kinds = {(path.split("/")[0], obj["kind"]) for path, obj in rendered_objects}
    for expected in [
        ("gpu_operator", "ConfigMap"), ("kube_join", "Node"),
        ("kube_tenancy", "ResourceQuota"), ("kube_tenancy", "LimitRange"), ("kube_tenancy", "NetworkPolicy"),
        ("kube_tenancy", "RoleBinding"), ("kube_tenancy", "PersistentVolumeClaim"),
        ("local_pv", "StorageClass"), ("local_pv", "DaemonSet"),
        ("kube_monitoring", "PrometheusRule"), ("kube_monitoring", "ServiceMonitor"), ("kube_monitoring", "ConfigMap"),
        ("training_stack", "PyTorchJob"), ("training_stack", "Deployment"), ("training_stack", "Secret"),
    ]:
        assert expected in kinds, f"{expected} not rendered"


def test_addon_objects_valid(rendered_objects):
    """Core kinds strictly at the pinned version; PrometheusRule, ServiceMonitor, PyTorchJob against their CRDs."""
    found = {f"{o['kind']}/{o['metadata'].get('name')}": problems(o) for o in addon_objects(rendered_objects)}
    assert {key: errors for key, errors in found.items() if errors} == {}
    custom = {o["kind"] for o in addon_objects(rendered_objects)} & {"PrometheusRule", "ServiceMonitor", "PyTorchJob"}
    assert custom == {"PrometheusRule", "ServiceMonitor", "PyTorchJob"}
    assert {("monitoring.coreos.com/v1", "PrometheusRule"), ("kubeflow.org/v1", "PyTorchJob")} <= set(crd_schemas())


def test_crd_validation_can_fail(rendered_objects):
    job = next(o for o in addon_objects(rendered_objects, "training_stack") if o["kind"] == "PyTorchJob")
    broken = yaml.safe_load(yaml.safe_dump(job))
    broken["spec"]["runPolicy"]["suspend"] = "yes"
    assert problems(broken)


def test_tenants_admit_monitoring_and_reach_mlflow_where_they_run(rendered_objects):
    """One namespace each (_gpuops_vars): the tenants' allows name the namespaces kube_monitoring and training_stack
    deploy Prometheus and MLflow in."""
    tenancy = addon_objects(rendered_objects, "kube_tenancy")
    prometheus = {o["metadata"]["namespace"] for o in addon_objects(rendered_objects, "kube_monitoring")
                  if o["kind"] == "PrometheusRule"}
    mlflow = {o["metadata"]["namespace"] for o in addon_objects(rendered_objects, "training_stack")
              if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlflow"}
    admitted = {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                for o in tenancy if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-allow-monitoring")
                for rule in o["spec"]["ingress"] for peer in rule["from"]}
    reached = {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
               for o in tenancy if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-allow-mlflow")
               for rule in o["spec"]["egress"] for peer in rule["to"]}
    assert len(prometheus) == len(mlflow) == 1
    assert (admitted, reached) == (prometheus, mlflow)


def test_every_tenant_namespace_is_fenced(rendered_objects):
    objects = addon_objects(rendered_objects, "kube_tenancy")
    team = yaml.safe_load((REPO_ROOT / "inventories/cluster/group_vars/all/team.yml").read_text(encoding="utf-8"))
    namespaces = {t.get("namespace") or f"team-{t['name']}" for t in team["gpuops_teams"]}
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"} == namespaces
    for namespace in sorted(namespaces):
        mine = [o for o in objects if o["metadata"].get("namespace") == namespace]
        quotas = [o for o in mine if o["kind"] == "ResourceQuota"]
        assert any("requests.nvidia.com/gpu" in q["spec"]["hard"] for q in quotas), f"{namespace}: no GPU quota"
        assert any(o["kind"] == "LimitRange" for o in mine), f"{namespace}: no LimitRange"
        for direction in ("Ingress", "Egress"):
            deny = [o for o in mine if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"] == {}
                    and o["spec"].get("policyTypes") == [direction] and not o["spec"].get(direction.lower())]
            assert deny, f"{namespace}: no default-deny {direction.lower()} NetworkPolicy"
        bindings = [o for o in mine if o["kind"] == "RoleBinding"]
        assert all(b["roleRef"]["name"] == "edit" and b["roleRef"]["kind"] == "ClusterRole" for b in bindings)


def test_no_pod_template_runs_privileged(rendered_objects):
    """Security (issue 13): only the GPU Operator's own operands run privileged, and those come from its chart; and
    kube_monitoring's GPU health sweep, which reads every GPU and the kernel log as dcgm-exporter does (issue 38; why:
    tests/render/test_gpu_health_sweep.py::test_security_context)."""
    privileged = []
    for _, obj in rendered_objects:
        for spec in pod_specs(obj):
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                if (container.get("securityContext") or {}).get("privileged"):
                    privileged.append(f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}")
    assert privileged == ["DaemonSet/gpuops-gpu-health-sweep/sweep"]


def test_training_templates(rendered_objects):
    jobs = [o for o in addon_objects(rendered_objects, "training_stack") if o["kind"] == "PyTorchJob"]
    assert jobs
    monitor = next(o for o in addon_objects(rendered_objects, "kube_monitoring")
                   if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == "training-operator")
    # one namespace, training_stack_namespace: the operator's, where the templates live and the operator is scraped
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == sorted({job["metadata"]["namespace"] for job in jobs})
    for job in jobs:
        assert job["spec"]["runPolicy"]["suspend"] is True
        for spec in pod_specs(job):
            container = spec["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["MLFLOW_TRACKING_URI"].startswith("http://mlflow.")
            assert "NCCL_IB_HCA" in env or env.get("NCCL_IB_DISABLE") == "1" or "NCCL_IB_HCA not set" in (
                job["metadata"]["annotations"]["gpuops.io/nccl-notes"])
            assert spec["nodeSelector"]["gpuops.io/pool"]
            assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec["volumes"][0]["emptyDir"][
                "sizeLimit"]}} in spec["volumes"]
    secret = next(o for o in addon_objects(rendered_objects, "training_stack")
                  if o["kind"] == "Secret" and o["metadata"]["name"] == "mlflow-auth")
    assert "<generated at apply time>" in secret["stringData"]["basic_auth.ini"], "the review copy holds no secret"


def test_both_mlflow_servers_read_one_basic_auth_layout(rendered_objects):
    """grow carries the Compose MLflow's users over to the cluster's, and molecule/grow serves the Compose side with
    compose_stack's template: training_stack's Secret spells compose_stack's template (its keys, the user store's
    path, the authorization function), given the same three values."""
    secret = next(o for o in addon_objects(rendered_objects, "training_stack")
                  if o["kind"] == "Secret" and o["metadata"]["name"] == "mlflow-auth")
    cluster = configparser.ConfigParser(interpolation=None)
    cluster.read_string(secret["stringData"]["basic_auth.ini"])
    given = cluster["mlflow"]
    template = (REPO_ROOT / "roles" / "compose_stack" / "templates" / "mlflow_basic_auth.ini.j2").read_text()
    compose = configparser.ConfigParser(interpolation=None)
    compose.read_string(jinja2.Template(template).render(
        ansible_managed="", compose_stack_mlflow_default_permission=given["default_permission"],
        compose_stack_mlflow_admin_user=given["admin_username"],
        _compose_stack_mlflow_password=given["admin_password"]))
    assert dict(compose["mlflow"]) == dict(given)
    assert set(given) == {"default_permission", "database_uri", "admin_username", "admin_password",
                          "authorization_function"}


def test_mlflow_pods_run_as_the_one_mlflow_uid(rendered_objects):
    """training_stack_mlflow_uid is the one source of MLflow's uid: the Deployment and the team-users Job run as it
    (the grow role gives the copied store to the same variable)."""
    defaults = yaml.safe_load((REPO_ROOT / "roles/training_stack/defaults/main.yml").read_text(encoding="utf-8"))
    uid = int(defaults["training_stack_mlflow_uid"])
    objects = addon_objects(rendered_objects, "training_stack")
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlflow")
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("mlflow-team-users-"))
    pod = deployment["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["fsGroup"], pod["runAsNonRoot"]) == (uid, uid, uid, True)
    pod = job["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"], pod["runAsNonRoot"]) == (uid, uid, True)


def test_per_team_mlflow_credentials(rendered_objects):
    """One MLflow user per team, its Secret in the team's namespace; the review copy holds no password at all."""
    objects = addon_objects(rendered_objects, "training_stack")
    team = yaml.safe_load((REPO_ROOT / "inventories/cluster/group_vars/all/team.yml").read_text(encoding="utf-8"))
    wanted = {t["name"]: t.get("namespace") or f"team-{t['name']}" for t in team["gpuops_teams"]}
    secrets = {o["metadata"]["namespace"]: o for o in objects if o["kind"] == "Secret"
               and o["metadata"]["name"].endswith("-mlflow-credentials")}
    assert set(secrets) == set(wanted.values())
    for name, namespace in wanted.items():
        data = secrets[namespace]["stringData"]
        assert secrets[namespace]["metadata"]["name"] == f"{name}-mlflow-credentials"
        assert data == {"MLFLOW_TRACKING_USERNAME": f"team-{name}",
                        "MLFLOW_TRACKING_PASSWORD": "<generated at apply time>"}
    users = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "mlflow-team-users")
    assert json.loads(users["stringData"]["users.json"]) == {f"team-{n}": "<generated at apply time>" for n in wanted}
    assert users["stringData"]["admin_password"] == "<generated at apply time>"
    for obj in objects:
        if obj["kind"] == "Secret":
            for key, value in obj["stringData"].items():
                if "PASSWORD" in key.upper() or key == "MLFLOW_FLASK_SERVER_SECRET_KEY":
                    assert value == "<generated at apply time>", (obj["metadata"]["name"], key)


def test_mlflow_team_users_job_runs_the_collections_users_script(rendered_objects):
    """The Job runs plugins/module_utils/mlflow_users.py, the code the Compose platform's mlflow_users module runs,
    from a ConfigMap, with MLflow's service URL and the users Secret's directory."""
    objects = addon_objects(rendered_objects, "training_stack")
    script = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "mlflow-users-script")
    shipped = (REPO_ROOT / "plugins/module_utils/mlflow_users.py").read_text(encoding="utf-8")
    assert script["data"]["mlflow_users.py"].rstrip("\n") == shipped.rstrip("\n")
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("mlflow-team-users-"))
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["python3", "/opt/gpuops/mlflow_users.py", "http://mlflow.mlflow.svc:5000",
                                    "/run/secrets/mlflow-team-users"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["script"] == {"name": "script", "mountPath": "/opt/gpuops", "readOnly": True}
    assert volumes["script"]["configMap"]["name"] == "mlflow-users-script"
    assert volumes[mounts["users"]["name"]]["secret"]["secretName"] == "mlflow-team-users"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_mlflow_team_users_job_against_a_stand_in_auth_api(rendered_objects, tmp_path):
    """The rendered Job's command, run here against a labelled stand-in of MLflow's auth API (users/get answers 404
    for an unknown user, experiments/search 401 for a wrong password): a new team user is created, a team user
    whose password changed gets the Secret's password, as the admin."""
    objects = addon_objects(rendered_objects, "training_stack")
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("mlflow-team-users-"))
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    script = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "mlflow-users-script")
    (tmp_path / "mlflow_users.py").write_text(script["data"]["mlflow_users.py"])
    users = {"team-vision": "v" * 32, "team-serving": "s" * 32}
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "users.json").write_text(json.dumps(users))
    (secrets / "admin_username").write_text("admin")
    (secrets / "admin_password").write_text("a" * 32)
    admin = "Basic " + base64.b64encode(b"admin:" + b"a" * 32).decode()
    store = {"team-serving": "old"}
    calls = []

    class StandIn(http.server.BaseHTTPRequestHandler):
        def _reply(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def do_GET(self) -> None:  # http.server's method name
            calls.append((self.command, self.path.split("?")[0], self.headers["Authorization"]))
            if "/users/get?" in self.path:
                name = self.path.split("username=")[1]
                self._reply(200 if name in store else 404)
            else:  # experiments/search as the user: their password, or 401
                basic = {"Basic " + base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in store.items()}
                self._reply(200 if self.headers["Authorization"] in basic else 401)

        def _write(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append((self.command, self.path, self.headers["Authorization"]))
            store[body["username"]] = body["password"]
            self._reply(200)

        do_POST = do_PATCH = _write

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        argv = [sys.executable, str(tmp_path / "mlflow_users.py"), f"http://127.0.0.1:{server.server_port}",
                str(secrets)]
        assert command[1:] == ["/opt/gpuops/mlflow_users.py", "http://mlflow.mlflow.svc:5000",
                               "/run/secrets/mlflow-team-users"], "the arguments replaced above"
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout + result.stderr
    assert store == users
    assert ("POST", "/api/2.0/mlflow/users/create", admin) in calls
    assert ("PATCH", "/api/2.0/mlflow/users/update-password", admin) in calls
    assert result.stdout.split("\n")[:2] == ["team-serving password set", "team-vision created"]


def test_mps_sharing_and_node_labels(rendered, rendered_objects):
    objects = addon_objects(rendered_objects, "gpu_operator")
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    values = yaml.safe_load((rendered / "gpu_operator" / "helm-values-gpu-operator.yml").read_text(encoding="utf-8"))
    assert config["metadata"]["name"] == values["devicePlugin"]["config"]["name"], "the device plugin reads this one"
    inference = yaml.safe_load(config["data"]["inference"])
    addons = yaml.safe_load((REPO_ROOT / "inventories/cluster/group_vars/k8s_cluster/addons.yml").read_text("utf-8"))
    wanted = addons["gpu_operator_pools"]["inference"]["mps_replicas"]
    assert set(inference["sharing"]) == {"mps"}, "the inference pool shares through MPS, not time-slicing"
    assert inference["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": wanted}]
    assert inference["sharing"]["mps"]["failRequestsGreaterThanOne"] is True
    assert inference["sharing"]["mps"]["renameByDefault"] is False
    assert inference["flags"]["migStrategy"] == "none", "MPS is not supported on MIG devices"
    # gpu-infer-01 declares its GPUs' memory (host_vars): each replica's share is on the ConfigMap for review
    memory = yaml.safe_load((REPO_ROOT / "inventories/cluster/host_vars/gpu-infer-01.yml").read_text("utf-8"))[
        "gpu_operator_gpu_memory_mib"]
    note = config["metadata"]["annotations"]["gpuops.io/sharing.inference"]
    assert note.startswith(f"MPS: {wanted} replicas per GPU, each limited to {memory // wanted} MiB"), note
    # each GPU node selects its pool's config by the label kube_join applies with the node's others (one applier)
    assert not [o for o in objects if o["kind"] == "Node"], "gpu_operator applies no Node: kube_join labels them"
    nodes = {o["metadata"]["name"]: o["metadata"]["labels"]["nvidia.com/device-plugin.config"]
             for o in addon_objects(rendered_objects, "kube_join") if o["kind"] == "Node"}
    hosts = yaml.safe_load((REPO_ROOT / "inventories/cluster/hosts.yml").read_text(encoding="utf-8"))
    gpu_nodes = hosts["all"]["children"]["k8s_cluster"]["children"]["gpu_nodes"]["hosts"]
    assert nodes == {name: h["gpuops_pool"] for name, h in gpu_nodes.items()}


DEVICE_PLUGIN_CONFIG = "gpu_operator/configmap-gpuops-device-plugin-config.yaml"


@pytest.fixture(scope="module")
def decided(variant) -> Path:
    """render.yml with the platform decided (VARIANT: gpuops_platform=kubernetes), so that the plan holds
    gpu_sharing: the session render's inventory plan leaves the platform undecided (no GPU counted), and with it the
    part."""
    return variant


def test_device_plugin_config_is_the_plans_gpu_sharing(decided):
    """The ConfigMap gpu_operator renders says what the plan's gpu_sharing part says, pool by pool."""
    part = json.loads((decided / "plan.json").read_text(encoding="utf-8"))["gpu_sharing"]
    # written out from the inventory: addons.yml's pools, gpu-infer-01's declared GPU memory (render reads no host)
    addons = yaml.safe_load((REPO_ROOT / "inventories/cluster/group_vars/k8s_cluster/addons.yml").read_text("utf-8"))
    memory = yaml.safe_load((REPO_ROOT / "inventories/cluster/host_vars/gpu-infer-01.yml").read_text("utf-8"))[
        "gpu_operator_gpu_memory_mib"]
    replicas = addons["gpu_operator_pools"]["inference"]["mps_replicas"]
    chosen = {pool: (e["strategy"], e["replicas"], e["memory_per_replica_mib"], e["nodes"]) for pool, e in part.items()}
    assert chosen == {
        "inference": ("mps", replicas, memory // replicas, ["gpu-infer-01"]),
        "training": ("none", 1, None, ["gpu-train-01", "gpu-train-02"]),
    }
    config = yaml.safe_load((decided / DEVICE_PLUGIN_CONFIG).read_text(encoding="utf-8"))
    assert set(config["data"]) == {*part, gpu_operator.WHOLE_GPU_CONFIG}
    sections = {"mps": "mps", "time-slicing": "timeSlicing"}
    for pool, entry in part.items():
        data = yaml.safe_load(config["data"][pool])
        if entry["strategy"] in sections:
            assert data["sharing"] == {sections[entry["strategy"]]: {
                "renameByDefault": False, "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": entry["replicas"]}]}}, pool
        else:
            assert "sharing" not in data, pool
        assert data["flags"]["migStrategy"] == ("single" if entry["strategy"] == "mig" else "none"), pool
        note = config["metadata"]["annotations"][f"gpuops.io/sharing.{pool}"]
        if entry["memory_per_replica_mib"]:
            assert f"each limited to {entry['memory_per_replica_mib']} MiB" in note, note


def test_the_plays_platform_plans_the_same_gpu_sharing(rendered, decided):
    """The session render's platform is undecided by the rule (no GPU count), and render.yml plans it for the
    Kubernetes path it renders (platform.source play), with the same gpu_sharing part as the decided plan: the
    device-plugin ConfigMap is the same, byte for byte."""
    plan = json.loads((rendered / "plan.json").read_text(encoding="utf-8"))
    assert (plan["platform"]["name"], plan["platform"]["source"]) == ("kubernetes", "play")
    assert plan["gpu_sharing"] == json.loads((decided / "plan.json").read_text(encoding="utf-8"))["gpu_sharing"]
    assert (rendered / DEVICE_PLUGIN_CONFIG).read_text(encoding="utf-8") == (
        decided / DEVICE_PLUGIN_CONFIG).read_text(encoding="utf-8")


def test_gpu_nodes_register_with_the_plans_node_part(decided):
    """kube_node registers each GPU node with the plan's labels, annotations and taints (hosts.<host>.node, the GPU
    Operator's labels joined): the Node objects and the kubelet's --node-labels of kube_join say the same."""
    plan = json.loads((decided / "plan.json").read_text(encoding="utf-8"))
    objects = dict(load_objects(decided))
    assert set(plan["hosts"]) == {"gpu-train-01", "gpu-train-02", "gpu-infer-01"}
    for host, part in plan["hosts"].items():
        planned = part["node"]
        assert planned["labels"]["nvidia.com/device-plugin.config"] == part["pool"], host
        node = objects[f"kube_join/node-{host}.yaml"]
        assert node["metadata"]["labels"] == planned["labels"], host
        assert node["metadata"]["annotations"] == planned["annotations"], host
        assert node["spec"]["taints"] == planned["taints"], host
        join = objects[f"kube_join/joinconfiguration-{host}.yaml"]
        args = {arg["name"]: arg["value"] for arg in join["nodeRegistration"]["kubeletExtraArgs"]}
        assert dict(label.split("=", 1) for label in args["node-labels"].split(",")) == planned["labels"], host


def test_cluster_policy_from_rendered_values_validates(rendered):
    """What the chart would create from our values (chart defaults merged with ours) validates against the CRD."""
    chart = SHARED_DATA / "gpu-operator" / "values.yaml"
    if not chart.exists():
        pytest.skip(f"real third-party data not present: {chart}")
    values = yaml.safe_load((rendered / "gpu_operator" / "helm-values-gpu-operator.yml").read_text(encoding="utf-8"))
    chart_values = yaml.safe_load(chart.read_text(encoding="utf-8"))
    assert helm_chart.unknown_keys(values, chart_values) == []
    policy = helm_chart.cluster_policy(helm_chart.merge(chart_values, values))
    schema = crd_schemas()[("nvidia.com/v1", "ClusterPolicy")]
    jsonschema.validate(policy, schema)
    assert policy["spec"]["driver"]["enabled"] is False, "inventories/cluster: the host layer owns the driver"


def test_rendered_rules_pass_the_promtool_tests(rendered, tmp_path):
    """The PrometheusRule groups are the monitoring_assets rules: the same promtool tests pass on them."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool not installed (Debian package: prometheus)")
    rules = [yaml.safe_load(p.read_text(encoding="utf-8"))
             for p in sorted((rendered / "kube_monitoring").glob("prometheusrule-*.yaml"))]
    assert rules
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [g for r in rules for g in r["spec"]["groups"]]}))
    test_files = sorted((REPO_ROOT / "tests/promtool").glob("*.rules.test.yml"))
    assert len(test_files) > 1, test_files
    for test_file in test_files:
        tests = yaml.safe_load(test_file.read_text(encoding="utf-8"))
        tests["rule_files"] = ["rules.yml"]
        (tmp_path / "test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
        result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120, check=False)
        assert result.returncode == 0, test_file.name + ": " + result.stdout + result.stderr


def test_node_exporter_reads_the_gpu_health_sweeps_textfile_directory(rendered):
    """kube-prometheus-stack's node-exporter serves the files gpu_health's scheduled sweep writes on each GPU node
    (the chart mounts the host's root at /host/root), and keeps the chart's own filesystem flags."""
    values = yaml.safe_load((rendered / "kube_monitoring/helm-values-kube-prometheus-stack.yml").read_text("utf-8"))
    spec = yaml.safe_load((REPO_ROOT / "roles/_gpuops_vars/meta/argument_specs.yml").read_text(encoding="utf-8"))
    textfile_dir = spec["argument_specs"]["main"]["options"]["gpu_health_textfile_dir"]["default"]
    args = values["prometheus-node-exporter"]["extraArgs"]
    assert f"--collector.textfile.directory=/host/root{textfile_dir}" in args
    assert [arg.split("=")[0] for arg in args[:2]] == [
        "--collector.filesystem.mount-points-exclude", "--collector.filesystem.fs-types-exclude"]


def test_dashboards_are_the_assets(rendered_objects):
    assets = Path(REPO_ROOT / "roles/monitoring_assets/files/grafana/dashboards")
    maps = [o for o in addon_objects(rendered_objects, "kube_monitoring")
            if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard") == "1"]
    shipped = {name: text for o in maps for name, text in o["data"].items()}
    # (the file lookup drops the final newline)
    assert shipped == {p.name: p.read_text(encoding="utf-8").rstrip("\n") for p in sorted(assets.glob("*.json"))}
