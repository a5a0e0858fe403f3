"""The always-on GPU health sweep on Kubernetes (issue 38 section 1), in the render of inventories/cluster.

kube_monitoring renders a ConfigMap holding gpu_health's sweep code and a DaemonSet that runs it on every GPU node
the plan gave that form. Checked here: both objects against the real Kubernetes schema (kubernetes-validate, strict,
at the pinned version); where the DaemonSet runs (the GPU nodes' labels and taints, as kube_join renders the Node
objects), also in a cluster that mixes the DaemonSet and gpu_health's timer; the host paths
it writes (the cursor of gpu_health's timer, node-exporter's textfile directory); its security context and image;
and that its command runs the same code as gpu_health's systemd timer: both are run here on one stand-in host (the
real ``nvidia-smi -q`` of an A100 SXM4 x4 board and real kernel-log lines through stand-in ``nvidia-smi`` and
``dmesg`` commands, labelled below) and write the same metrics. No cluster, GPU or container runtime runs here.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from conftest import INVENTORY, REPO_ROOT, SHARED_DATA, VARIANT, load_objects, run_render
from validator import problems

if str(REPO_ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "collections"))
if str(REPO_ROOT / "tests" / "unit") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "tests" / "unit"))
from ansible_collections.gpuops.cluster.plugins.lookup.shipped_script import LookupModule as ShippedScript
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils.images import is_pinned
from kernel_log_samples import DEVELOPMENT

NAME = "gpuops-gpu-health-sweep"
A100_Q = ("nvidia-smi", "query", "a100-sxm4-80gb-x4_nvidia-smi-q.txt")
DMESG_LINE = re.compile(r"^\[\s*\d+\.\d+\] ")
# samples that differ between two runs by the clock alone
TIMESTAMPS = ("gpuops_gpu_health_last_run_timestamp_seconds", "gpuops_gpu_health_event_last_seen_timestamp_seconds",
              "gpuops_gpu_health_held_since_timestamp_seconds")


def _object(rendered_objects, kind: str) -> dict:
    found = [
        obj
        for path, obj in rendered_objects
        if path.startswith("kube_monitoring/") and obj["kind"] == kind and obj["metadata"]["name"] == NAME
    ]
    assert len(found) == 1, f"{kind}/{NAME}: {len(found)} rendered"
    return found[0]


@pytest.fixture(scope="module")
def daemonset(rendered_objects) -> dict:
    return _object(rendered_objects, "DaemonSet")


@pytest.fixture(scope="module")
def code(rendered_objects) -> dict:
    return _object(rendered_objects, "ConfigMap")


def _pod(daemonset: dict) -> dict:
    return daemonset["spec"]["template"]["spec"]


def _container(daemonset: dict) -> dict:
    (container,) = _pod(daemonset)["containers"]
    return container


def _arg(container: dict, flag: str) -> str:
    args = container["args"]
    return args[args.index(flag) + 1]


def _gpu_health_vars() -> dict:
    return yaml.safe_load((REPO_ROOT / "roles/gpu_health/vars/main.yml").read_text(encoding="utf-8"))


def _shared_constants() -> dict:
    return yaml.safe_load((REPO_ROOT / "roles/_gpuops_vars/vars/main.yml").read_text(encoding="utf-8"))


def test_sweep_objects_valid_against_the_kubernetes_schema(daemonset, code):
    assert problems(daemonset) == []
    assert problems(code) == []


def test_schema_validation_can_fail(daemonset):
    """An unknown field (strict) and a wrong type are each refused."""
    unknown = yaml.safe_load(yaml.safe_dump(daemonset))
    _pod(unknown)["volumes"][1]["hostPath"]["mode"] = "rw"
    assert problems(unknown)
    wrong_type = yaml.safe_load(yaml.safe_dump(daemonset))
    _container(wrong_type)["securityContext"]["privileged"] = "yes"
    assert problems(wrong_type)


def test_the_configmap_is_the_code_the_timer_ships(code, daemonset):
    """The ConfigMap holds gpu_health_metrics.py and every module_utils file it imports, the files gpu_health's
    sweep.yml copies to a host (the shipped_script lookup with_imports), mounted where python3 -m finds them."""
    shipped = ShippedScript().run(["gpu_health_metrics"], with_imports=True)[0]
    assert {"gpu_health.py", "gpu_health_metrics.py"} <= set(shipped)
    assert code["data"] == shipped
    container = _container(daemonset)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert mounts["code"]["mountPath"] == env["PYTHONPATH"] + "/ansible_collections/gpuops/cluster/plugins/module_utils"
    assert mounts["code"]["readOnly"] is True
    volumes = {v["name"]: v for v in _pod(daemonset)["volumes"]}
    assert volumes["code"]["configMap"]["name"] == code["metadata"]["name"]
    assert code["metadata"]["namespace"] == daemonset["metadata"]["namespace"] == "gpuops-gpu-health"


def test_command_and_arguments(daemonset):
    container = _container(daemonset)
    command = container["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    assert command[3] == NAME
    assert 'python3 -m ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_metrics "$@"' in command[2]
    assert container["args"] == [
        "--state-file",
        "/var/lib/gpuops/gpu_health/sweep.json",
        "--textfile-dir",
        "/var/lib/node_exporter/textfile_collector",
        "--dcgm-level",
        "0",
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUOPS_SWEEP_INTERVAL_SECONDS"] == "60"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # no GPU is taken from the device plugin: the workloads keep every GPU
    assert "nvidia.com/gpu" not in str(container["resources"])


def test_writes_where_node_exporter_reads_and_keeps_the_timers_cursor(rendered, daemonset):
    """The metrics go to the host directory kube-prometheus-stack's node-exporter reads (its
    --collector.textfile.directory, under the chart's /host/root mount of the host's root); the cursor stays on the
    node, in the file gpu_health's timer keeps (so a node moved from one form to the other keeps its tallies)."""
    values = yaml.safe_load((rendered / "kube_monitoring/helm-values-kube-prometheus-stack.yml").read_text("utf-8"))
    (flag,) = [a for a in values["prometheus-node-exporter"]["extraArgs"] if a.startswith("--collector.textfile.")]
    node_exporter_dir = flag.split("=", 1)[1].removeprefix("/host/root")
    container = _container(daemonset)
    assert _arg(container, "--textfile-dir") == node_exporter_dir
    shared = yaml.safe_load((REPO_ROOT / "roles/_gpuops_vars/defaults/main.yml").read_text(encoding="utf-8"))
    timer = jinja2.Template(_shared_constants()["gpuops_sweep_state"]).render(shared)  # the timer's (gpu_health)
    assert _arg(container, "--state-file") == timer
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod(daemonset)["volumes"]}
    host_paths = {name: v["hostPath"] for name, v in volumes.items() if "hostPath" in v}
    assert host_paths == {
        "state": {"path": str(Path(_arg(container, "--state-file")).parent), "type": "DirectoryOrCreate"},
        "textfile": {"path": node_exporter_dir, "type": "DirectoryOrCreate"},
    }
    # each host directory is mounted at its own path, so the arguments name host paths
    assert mounts[host_paths["textfile"]["path"]] == "textfile"
    assert mounts[host_paths["state"]["path"]] == "state"


def _tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def _nodes(objects: list) -> list[dict]:
    """The Node objects kube_join renders (the labels and taints each node registers with)."""
    return [obj for path, obj in objects if path.startswith("kube_join/") and obj["kind"] == "Node"]


def _selected(pod: dict, node: dict) -> bool:
    """Kubernetes' nodeSelector rule: every pair of the selector is a label of the node."""
    return pod["nodeSelector"].items() <= node["metadata"]["labels"].items()


def test_runs_on_every_gpu_node_of_the_plan_and_tolerates_only_their_taints(rendered_objects, daemonset):
    """Every GPU node, as kube_join renders its Node object (the labels and taints it registers with), is selected
    and its taints tolerated; the tolerations are those taints and no other."""
    nodes = _nodes(rendered_objects)
    assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-infer-01", "gpu-train-01", "gpu-train-02"]
    pod = _pod(daemonset)
    assert pod["nodeSelector"] == {"gpuops.io/gpu-health-sweep": "daemonset"}
    for node in nodes:
        labels, taints = node["metadata"]["labels"], node["spec"].get("taints", [])
        assert _selected(pod, node), (node["metadata"]["name"], labels)
        assert taints, f"{node['metadata']['name']} has no taint: this test would prove nothing"
        for taint in taints:
            assert any(_tolerates(t, taint) for t in pod["tolerations"]), (node["metadata"]["name"], taint)
    taints = {(t["key"], t.get("value"), t["effect"]) for n in nodes for t in n["spec"]["taints"]}
    assert {(t["key"], t.get("value"), t["effect"]) for t in pod["tolerations"]} == taints
    assert not _tolerates(
        pod["tolerations"][0], {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    )


def _sweep_objects(objects: list) -> list:
    return [f"{obj['kind']}/{obj['metadata']['name']}" for path, obj in objects if path.startswith("kube_monitoring/")
            and obj["metadata"]["name"] in (NAME, "gpuops-gpu-health")]


def test_the_plan_makes_the_daemonset_every_gpu_nodes_one_sweep(rendered, rendered_objects, daemonset):
    """The DaemonSet is rendered because the plan (render_dir/plan.json, the plan in force) gives every GPU node the
    form daemonset, and names it in the reason."""
    hosts = json.loads((rendered / "plan.json").read_text(encoding="utf-8"))["hosts"]
    assert sorted(hosts) == ["gpu-infer-01", "gpu-train-01", "gpu-train-02"]
    assert {name: host["health_sweep"]["form"] for name, host in hosts.items()} == dict.fromkeys(hosts, "daemonset")
    assert all("kube_monitoring's DaemonSet" in host["health_sweep"]["reason"] for host in hosts.values())
    assert sorted(_sweep_objects(rendered_objects)) == [
        "ConfigMap/gpuops-gpu-health-sweep", "DaemonSet/gpuops-gpu-health-sweep", "Namespace/gpuops-gpu-health"]


def test_with_the_daemonset_off_the_plan_gives_the_gpu_nodes_the_timer_and_no_sweep_object_is_rendered(variant):
    """kube_monitoring_gpu_health_sweep: false (issue 38: the nodes then had no scheduled sweep at all; VARIANT sets
    it): the plan's form of every GPU node is timer (gpu_health's), and kube_monitoring renders no sweep object."""
    assert VARIANT["kube_monitoring_gpu_health_sweep"] is False
    hosts = json.loads((variant / "plan.json").read_text(encoding="utf-8"))["hosts"]
    assert {name: host["health_sweep"]["form"] for name, host in hosts.items()} == dict.fromkeys(hosts, "timer")
    assert sorted(hosts) == ["gpu-infer-01", "gpu-train-01", "gpu-train-02"]
    objects = load_objects(variant)
    assert [path for path, _obj in objects if path.startswith("kube_monitoring/")], "kube_monitoring rendered"
    assert _sweep_objects(objects) == []


def test_a_mixed_cluster_gives_each_gpu_node_one_sweep(layouts):
    """One GPU node opts out of the DaemonSet in its host_vars (conftest's layouts: kube_monitoring_gpu_health_sweep:
    false for gpu-train-02): the plan gives it gpu_health's timer and the others the DaemonSet, kube_join registers
    each node with its form (gpuops.io/gpu-health-sweep), and the rendered DaemonSet, valid against the Kubernetes
    schema, selects exactly the daemonset nodes - never the timer's node, so no node runs two sweeps on one cursor."""
    out = layouts
    hosts = json.loads((out / "plan.json").read_text(encoding="utf-8"))["hosts"]
    forms = {name: host["health_sweep"]["form"] for name, host in hosts.items()}
    assert forms == {"gpu-infer-01": "daemonset", "gpu-train-01": "daemonset", "gpu-train-02": "timer"}
    objects = load_objects(out)
    (daemonset,) = [o for p, o in objects if p.startswith("kube_monitoring/") and o["kind"] == "DaemonSet"
                    and o["metadata"]["name"] == NAME]
    assert problems(daemonset) == []
    pod = _pod(daemonset)
    assert pod["nodeSelector"] == {"gpuops.io/gpu-health-sweep": "daemonset"}
    nodes = {n["metadata"]["name"]: n for n in _nodes(objects)}
    assert {name: node["metadata"]["labels"]["gpuops.io/gpu-health-sweep"] for name, node in nodes.items()} == forms
    assert {name for name, node in nodes.items() if _selected(pod, node)} == {"gpu-infer-01", "gpu-train-01"}
    # the timer's node still carries every other label the DaemonSet selected before (nvidia.com/gpu=true)
    assert nodes["gpu-train-02"]["metadata"]["labels"]["nvidia.com/gpu"] == "true"


def test_a_plan_an_older_preflight_wrote_is_refused_before_any_role(rendered, tmp_path):
    """A plan.json from before the sweep label (a node given the DaemonSet registers without
    gpuops.io/gpu-health-sweep, so it would have no sweep) is of an older schema_version: playbooks/tasks/plan.yml
    refuses it before any role renders, naming both versions and the fix, and no sweep object is written."""
    stale = json.loads((rendered / "plan.json").read_text(encoding="utf-8"))
    assert stale["hosts"]["gpu-train-01"]["health_sweep"]["form"] == "daemonset"
    del stale["hosts"]["gpu-train-01"]["node"]["labels"]["gpuops.io/gpu-health-sweep"]
    stale["schema_version"] = plan.SCHEMA_VERSION - 1
    (tmp_path / "plan.json").write_text(json.dumps({"gpuops_plan": stale}), encoding="utf-8")
    out = tmp_path / "render"
    result = run_render(INVENTORY, out, "-e", f"@{tmp_path / 'plan.json'}")
    assert result.returncode != 0
    assert (f"has schema_version {plan.SCHEMA_VERSION - 1}; this collection reads schema_version "
            f"{plan.SCHEMA_VERSION}. Nothing was changed. Fix: run playbooks/preflight.yml") in result.stdout
    assert _sweep_objects(load_objects(out)) == []


def test_security_context(daemonset):
    """privileged, for the two reasons kube_monitoring's argument spec gives (every GPU without the device plugin on
    hosts whose NVIDIA runtime ignores NVIDIA_VISIBLE_DEVICES in an unprivileged container; the kernel log), and
    nothing else of the host: no host namespace, no API token, a read-only root filesystem, two host directories."""
    pod = _pod(daemonset)
    container = _container(daemonset)
    assert container["securityContext"] == {
        "privileged": True,
        "runAsUser": 0,
        "runAsGroup": 0,
        "readOnlyRootFilesystem": True,
    }
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert pod["automountServiceAccountToken"] is False
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/var/lib/gpuops/gpu_health", "/var/lib/node_exporter/textfile_collector"]
    assert container["resources"]["limits"]["memory"]
    toolkit = yaml.safe_load((REPO_ROOT / "roles/nvidia_container_toolkit/defaults/main.yml").read_text("utf-8"))
    assert toolkit["nvidia_container_toolkit_accept_envvar_when_unprivileged"] is False, (
        "the hosts' runtime honours NVIDIA_VISIBLE_DEVICES unprivileged again: the sweep need not be privileged"
    )


def test_a_namespace_of_its_own_that_no_tenant_admits(rendered_objects, daemonset):
    """Privileged under Pod Security (as the GPU Operator's namespace), and not the monitoring namespace, which every
    tenant's NetworkPolicy admits for Prometheus' scrape (tests/render/test_tenant_isolation.py proves the tenants
    unreachable from every rendered pod, this one included)."""
    namespace = daemonset["metadata"]["namespace"]
    (found,) = [o for p, o in rendered_objects if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace]
    assert found["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace != "monitoring"
    admitted = [
        selector["namespaceSelector"]
        for _path, o in rendered_objects
        if o["kind"] == "NetworkPolicy"
        for rule in o["spec"].get("ingress", [])
        for selector in rule.get("from", [])
        if "namespaceSelector" in selector
    ]
    assert {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}} in admitted
    assert {"matchLabels": {"kubernetes.io/metadata.name": namespace}} not in admitted


def test_image_is_pinned_and_on_the_mirror(daemonset):
    image = _container(daemonset)["image"]
    mirror = yaml.safe_load((REPO_ROOT / "inventories/cluster/group_vars/all/platform.yml").read_text("utf-8"))[
        "gpuops_registry_mirror"
    ]
    defaults = yaml.safe_load((REPO_ROOT / "roles/kube_monitoring/defaults/main.yml").read_text("utf-8"))
    upstream = defaults["kube_monitoring_gpu_health_sweep_image"]
    assert upstream == "docker.io/library/python:3.12.11-slim-bookworm"
    assert image == f"{mirror}/library/python:3.12.11-slim-bookworm"
    assert is_pinned(image)


# ---------------------------------------------------------------------------------------------------------------
# The same code as the timer: both forms run on one stand-in host.


def _stand_in_host(tmp_path: Path) -> Path:
    """A bin directory (the only PATH) of labelled stand-ins: ``python3`` (this interpreter), ``nvidia-smi``
    (prints the real ``nvidia-smi -q`` of an A100 SXM4 x4 board, ../shared/data; fails for anything else, as for
    the NVLink queries on a tool without them), ``dmesg`` (prints the real dmesg-format kernel-log lines of
    tests/unit/kernel_log_samples.py, Xid 79 among them) and ``sleep``. No journalctl: both forms read dmesg."""
    capture = SHARED_DATA.joinpath(*A100_Q)
    if not capture.is_file():
        pytest.skip(f"real third-party data not present: {capture} (see ../shared/data/README.md)")
    lines = [s.line for s in DEVELOPMENT if DMESG_LINE.match(s.line)]
    assert any(" 79, " in line for line in lines)
    (tmp_path / "dmesg.txt").write_text("\n".join(lines) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "python3": f'exec {shlex.quote(sys.executable)} "$@"',
        "nvidia-smi": f'[ "$*" = "-q" ] && exec /bin/cat {shlex.quote(str(capture))}\necho "stand-in: $*" >&2; exit 2',
        "dmesg": f"exec /bin/cat {shlex.quote(str(tmp_path / 'dmesg.txt'))}",
        "sleep": 'exec /bin/sleep "$@"',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(
            f"#!/bin/sh\n# stand-in for {name} (tests/render/test_gpu_health_sweep.py)\n{body}\n"
        )
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} not written within {seconds} s"
        time.sleep(0.2)


def _samples(text: str) -> dict:
    return {
        line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line and not line.startswith("#") and not line.startswith(TIMESTAMPS)
    }


def _run_daemonset(daemonset: dict, code: dict, root: Path, bin_dir: Path) -> Path:
    """The container's command and arguments, every absolute path under ``root``; SIGTERM (what the kubelet sends)
    after the first sweep wrote its file ends it at once."""
    container = _container(daemonset)
    (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "code"]
    lib = root / mount.lstrip("/")
    lib.mkdir(parents=True)
    for name, text in code["data"].items():
        (lib / name).write_text(text)
    for item in container["volumeMounts"]:
        (root / item["mountPath"].lstrip("/")).mkdir(parents=True, exist_ok=True)

    def moved(value: str) -> str:
        return str(root) + value if value.startswith("/") else value

    argv = container["command"] + [moved(arg) for arg in container["args"]]
    env = {e["name"]: moved(e["value"]) for e in container["env"]} | {"PATH": str(bin_dir)}
    prom = Path(moved(_arg(container, "--textfile-dir"))) / "gpuops_gpu_health.prom"
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(prom, process)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, out + err
    assert "gpu_health sweep: verdict failed" in out, out + err
    return prom


def _run_timer(tmp_path: Path, bin_dir: Path) -> Path:
    """gpu_health's oneshot service, its template rendered with the role's own variables (paths under tmp_path),
    run as systemd would: its Environment= and ExecStart=, the code from the files sweep.yml ships."""
    role = REPO_ROOT / "roles/gpu_health"
    lib = tmp_path / "lib"
    code_dir = lib / "ansible_collections/gpuops/cluster/plugins/module_utils"
    code_dir.mkdir(parents=True)
    for name, text in ShippedScript().run(["gpu_health_metrics"], with_imports=True)[0].items():
        (code_dir / name).write_text(text)
    (tmp_path / "textfile").mkdir()
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        (role / "templates/gpuops-gpu-health-sweep.service.j2").read_text(encoding="utf-8")
    )
    unit = template.render(
        ansible_managed="test",
        _gpu_health_sweep_unit=_gpu_health_vars()["_gpu_health_sweep_unit"],
        _gpu_health_sweep_lib=str(lib),
        _gpu_health_sweep_python=str(bin_dir / "python3"),
        gpuops_sweep_state=str(tmp_path / "state/sweep.json"),
        gpu_health_textfile_dir=str(tmp_path / "textfile"),
        gpu_health_sweep_dcgm_level=0,
        _gpu_health_sweep_expected_gpus="",
    )
    (tmp_path / "state").mkdir()
    env = dict(line.split("=", 2)[1:] for line in unit.splitlines() if line.startswith("Environment="))
    (exec_start,) = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=")]
    done = subprocess.run(
        shlex.split(exec_start),
        env=env | {"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "textfile/gpuops_gpu_health.prom"


def test_the_daemonset_and_the_timer_run_the_same_code(daemonset, code, tmp_path):
    bin_dir = _stand_in_host(tmp_path)
    from_timer = _run_timer(tmp_path / "timer", bin_dir)
    from_daemonset = _run_daemonset(daemonset, code, tmp_path / "daemonset", bin_dir)
    timer, pod = _samples(from_timer.read_text()), _samples(from_daemonset.read_text())
    assert pod == timer
    # what the stand-in host holds: the A100 board read (GPU 9E's pending row remap), the Xid 79 event counted
    assert timer["gpuops_gpu_health_read_ok"] == "1"
    assert timer["gpuops_gpu_health_log_read_ok"] == "1"
    assert any(key.startswith("gpuops_gpu_health_row_remap_pending{") and value == "1" for key, value in timer.items())
    assert any(key.startswith("gpuops_gpu_health_events_total{") and 'code="79"' in key for key in timer)
    assert timer["gpuops_gpu_health_verdict"] == "2"
