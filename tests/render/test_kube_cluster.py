"""The cluster render: kubelet rules the kubelet checks at start, per-pool policies, registration, refusals."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_gpu, kube_plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan as plan_py
from conftest import ENDPOINT, INVENTORY, VARIANT, load_objects, run_render


def _mib(quantity: str) -> int:
    units = {"Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    raise AssertionError(f"unexpected quantity {quantity}")


def _by(rendered_objects, folder, kind):
    return {
        path.split("/")[-1].split("-", 1)[1].removesuffix(".yaml"): obj
        for path, obj in rendered_objects
        if path.startswith(folder + "/") and obj["kind"] == kind
    }


def test_kubelet_reservations_add_up_as_the_kubelet_requires(rendered_objects):
    configs = _by(rendered_objects, "kube_node", "KubeletConfiguration")
    assert set(configs) == {"cp-01", "gpu-train-01", "gpu-train-02", "gpu-infer-01"}
    for host, config in configs.items():
        if config.get("cpuManagerPolicy") == "static":
            assert config["reservedSystemCPUs"], host
        if config.get("memoryManagerPolicy") == "Static":
            reserved = sum(_mib(entry["limits"]["memory"]) for entry in config["reservedMemory"])
            expected = sum(_mib(config.get(key, {}).get("memory", "0Mi")) for key in ("systemReserved", "kubeReserved"))
            assert reserved == expected + _mib(config["evictionHard"]["memory.available"]), host
        else:
            assert "reservedMemory" not in config, host


@pytest.mark.parametrize(
    ("host", "policy", "memory"),
    [
        ("gpu-train-01", "restricted", "None"),
        ("gpu-train-02", "single-numa-node", "Static"),
        ("gpu-infer-01", "best-effort", "None"),
        ("cp-01", "none", "None"),
    ],
)
def test_policy_per_node_from_its_declared_topology(rendered_objects, host, policy, memory):
    config = _by(rendered_objects, "kube_node", "KubeletConfiguration")[host]
    assert config["topologyManagerPolicy"] == policy
    assert config["memoryManagerPolicy"] == memory
    if policy != "none":
        assert config["topologyManagerScope"] == "pod"
        assert config["cpuManagerPolicy"] == "static"


def test_gpu_nodes_register_tainted_and_labelled(rendered_objects):
    joins = _by(rendered_objects, "kube_join", "JoinConfiguration")
    nodes = _by(rendered_objects, "kube_join", "Node")
    assert set(joins) == set(nodes) == {"gpu-train-01", "gpu-train-02", "gpu-infer-01"}
    for host, join in joins.items():
        registration = join["nodeRegistration"]
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in registration["taints"]
        labels = dict(item.split("=", 1) for item in registration["kubeletExtraArgs"][0]["value"].split(","))
        assert labels["nvidia.com/gpu"] == "true"
        assert labels["gpuops.io/pool"] == ("inference" if "infer" in host else "training")
        assert labels["gpuops.io/nvlink-domains"] == "0-7"
        assert labels == nodes[host]["metadata"]["labels"]
        assert nodes[host]["spec"]["taints"] == registration["taints"]
        assert list(nodes[host]["metadata"]["annotations"]) == ["gpuops.io/kubelet-policy"]
        assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "192.0.2.10:6443"


def test_control_plane_from_variables(rendered_objects):
    cluster = _by(rendered_objects, "kube_control_plane", "ClusterConfiguration")["cp-01"]
    assert cluster["kubernetesVersion"] == "v1.34.2"
    assert cluster["networking"] == {
        "podSubnet": "10.244.0.0/16",
        "serviceSubnet": "10.96.0.0/12",
        "dnsDomain": "cluster.local",
    }
    # One mirror layout for every image: <mirror>/<upstream path>; coredns keeps its coredns/coredns path.
    assert cluster["imageRepository"] == "registry.lab.example:5000"
    assert cluster["dns"] == {"imageRepository": "registry.lab.example:5000/coredns"}
    init = _by(rendered_objects, "kube_control_plane", "InitConfiguration")["cp-01"]
    assert init["nodeRegistration"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    ]
    # its inventory address (no facts at render time) on the bind port; one control plane uploads no certificates
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.10", "bindPort": 6443}
    assert "certificateKey" not in init
    installation = _by(rendered_objects, "kube_cni", "Installation")["default"]
    assert installation["spec"]["calicoNetwork"]["ipPools"][0]["cidr"] == "10.244.0.0/16"
    assert installation["spec"]["registry"] == "registry.lab.example:5000/"


def _inventory_with(tmp_path, edit):
    copy = tmp_path / "cluster"
    shutil.copytree(INVENTORY, copy, ignore=shutil.ignore_patterns("credentials"))
    hosts = yaml.safe_load((copy / "hosts.yml").read_text())
    edit(hosts["all"]["children"]["k8s_cluster"]["children"])
    (copy / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return copy


def _two_control_planes_and_a_poolless_gpu_node(groups):
    groups["kube_control_plane"]["hosts"]["cp-02"] = {"ansible_host": "192.0.2.11"}
    del groups["gpu_nodes"]["hosts"]["gpu-infer-01"]["gpuops_pool"]


def _one_node_reserving_no_more_than_eviction(groups):
    groups["gpu_nodes"]["hosts"]["gpu-train-02"]["kube_node_reserved_memory_mib"] = 500


def _one_node_with_a_bad_local_disk(groups):
    groups["gpu_nodes"]["hosts"]["gpu-train-02"]["local_pv_disks"] = ["sdb"]


@pytest.mark.parametrize(
    ("edit", "extra", "expected"),
    [
        (None, '{"kube_version": "1.34"}', ["kube_version is '1.34'", "exact release"]),
        (None, '{"kube_pod_cidr": "192.0.2.0/24"}', ["contains the address 192.0.2.10 of node cp-01"]),
        (None, '{"kube_pod_cidr": "10.96.0.0/16"}', ["overlaps kube_service_cidr"]),
        (_two_control_planes_and_a_poolless_gpu_node, "{}",
         ["2 hosts: expected 1, or 3", 'gpuops_pool of gpu-infer-01 is ""']),
        # kube_node's inputs (tasks/inputs.yml), on one host: the other hosts write nothing either.
        (_one_node_reserving_no_more_than_eviction, "{}",
         ["kube_node on gpu-train-02: kube_node_reserved_memory_mib (500) must exceed the eviction threshold "
          "kube_node_eviction_memory_mib (500)"]),
        # An add-on's inputs on every host, switched on or off, as a run's pass checks them (vars/run_roles.yml).
        (_one_node_with_a_bad_local_disk, '{"kube_addons_local_pv": false}',
         ["local_pv on gpu-train-02: local_pv_disks has 'sdb': expected a block device path such as /dev/nvme1n1"]),
    ],
    ids=["unpinned-version", "pod-cidr-over-nodes", "pod-cidr-over-services", "two-cps-and-no-pool",
         "one-node-reserved-not-above-eviction", "add-on-switched-off-bad-on-a-worker"],
)
def test_bad_plans_are_refused_before_anything_is_written(tmp_path, edit, extra, expected):
    """A plan, or a role's input, that a run refuses is refused by render.yml's inputs pass (the run's), and no
    file is written, plan.json included."""
    inventory = _inventory_with(tmp_path, edit) if edit else INVENTORY
    out = tmp_path / "render"
    result = run_render(inventory, out, "-e", extra)
    assert result.returncode != 0
    for text in expected:
        assert text in result.stdout
    assert not [path for path in out.rglob("*") if path.is_file()]


def test_a_stale_registration_is_refused_before_anything_is_written(rendered, tmp_path):
    """render.yml checks the cluster plan after it resolved gpuops_plan, so the plan's registrations are judged too:
    a plan whose control plane registers with the NoSchedule taint, read back after the inventory made it schedulable,
    is refused (kube_plan.cluster_problems; before, render checked the cluster plan with no plan in hand)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.copy(rendered / "plan.json", reports / "plan.json")  # the last plan, as preflight leaves it
    out = tmp_path / "render"
    result = run_render(INVENTORY, out, "-e", f"gpuops_report_dir={reports}",
                        "-e", '{"kube_control_plane_schedulable": true}')
    assert result.returncode != 0
    assert ("gpuops_plan.nodes.registration.cp-01 has the control-plane taint, but kube_control_plane_schedulable "
            "is True now") in result.stdout
    assert not list(out.rglob("*.yaml"))


def _topology(host):
    return yaml.safe_load((INVENTORY / "host_vars" / f"{host}.yml").read_text())["gpuops_gpu_topology"]


def _planned_nodes() -> dict:
    """The plan's node lists for inventories/cluster (gpuops_plan.nodes, plan.nodes_part): a plan given with -e
    carries them, as preflight's does; gpu_operator, kube_tenancy and training_stack read their GPU nodes there."""
    groups = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["k8s_cluster"]["children"]
    hosts = groups["gpu_nodes"]["hosts"]
    gpu = [{**variables, **yaml.safe_load((INVENTORY / "host_vars" / f"{host}.yml").read_text()),
            "inventory_hostname": host} for host, variables in hosts.items()]
    control_planes = list(groups["kube_control_plane"]["hosts"])
    return {"gpu": kube_gpu.gpu_nodes(gpu),
            "registration": {host: kube_plan.node_registration(None, "", True) for host in control_planes}}


def _planned_gpu_sharing(gpu_nodes: list) -> dict:
    """The plan's gpu_sharing part for inventories/cluster (plan.gpu_sharing_part on its GPU nodes and the cluster's
    settings): a Kubernetes plan with the GPU Operator carries it, as preflight's does; gpu_operator renders only it."""
    settings = {}
    for path in sorted((INVENTORY / "group_vars").glob("*/*.yml")):
        settings.update(yaml.safe_load(path.read_text()) or {})
    return plan_py.gpu_sharing_part("kubernetes", gpu_nodes, settings)


def _planned_team_and_pins() -> dict:
    """The plan's team and pins for inventories/cluster (plan._team; pins.registry_mirror): a plan given with -e
    carries them, as preflight's does; kube_tenancy reads its namespaces and the image roles the mirror there."""
    team = yaml.safe_load((INVENTORY / "group_vars" / "all" / "team.yml").read_text())
    platform = yaml.safe_load((INVENTORY / "group_vars" / "all" / "platform.yml").read_text())
    return {"team": plan_py._team(team["gpuops_members"], team["gpuops_teams"]),
            "pins": {"registry_mirror": platform["gpuops_registry_mirror"]}}


def test_a_gpu_node_without_a_planned_kubelet_policy_is_refused(tmp_path):
    """kube_node derives nothing: a GPU node whose plan part holds no kubelet policy and registration (here a plan
    given on the command line with a topology only, as an old report could) is refused, naming the host and the
    fix, before any object is written; nothing is taken from a report an earlier run left. So is the control plane,
    whose registration (nodes.registration) this plan lacks too."""
    reports = tmp_path / "reports" / "20200101T000000"
    reports.mkdir(parents=True)
    (reports / "gpu-train-02.json").write_text(json.dumps({"topology": _topology("gpu-train-01")}))
    plan = {"gpuops_plan": {
        "schema_version": plan_py.SCHEMA_VERSION, "source": "preflight", **_planned_team_and_pins(),
        "platform": {"name": "kubernetes", "source": "auto", "reason": "this test's plan", "ok": True},
        # gpu-train-01: a registration but a null kubelet_policy (plan.py writes null for a GPU host without a pool)
        "hosts": {"gpu-train-01": {"topology": _topology("gpu-train-02"), "pool": "training", "kubelet_policy": None,
                                   "node": {"labels": {}, "annotations": {}, "taints": []}}},
        # the rest as preflight plans it: gpu_operator's inputs (checked first) refuse a plan without it
        "gpu_sharing": _planned_gpu_sharing(_planned_nodes()["gpu"]),
        "nodes": {**_planned_nodes(), "registration": {}}}}
    out = tmp_path / "render"
    result = run_render(INVENTORY, out, "-e", f"gpuops_report_dir={tmp_path / 'reports'}", "-e", json.dumps(plan))
    assert result.returncode != 0
    for host in ("gpu-train-01", "gpu-train-02", "gpu-infer-01"):
        assert f"kube_node on {host}: the plan (preflight) holds no kubelet policy and registration" in result.stdout
    assert "Fix: set gpuops_pool" in result.stdout
    assert "kube_node on cp-01: the plan (preflight) holds no registration for this node" in result.stdout
    assert not list(out.glob("kube_node/*gpu-*")), "a GPU node's KubeletConfiguration written without its plan part"


def test_roles_render_the_plans_kubelet_policy_and_pool_nccl(tmp_path):
    """With a plan that holds them, kube_node renders the plan's kubelet policy and registers the node by the plan's
    node part, and training_stack's job template takes the plan's pool NCCL settings."""
    # gpu-train-01's declared topology gives restricted; the plan says single-numa-node with its own reservations.
    policy = {
        "topology_manager_policy": "single-numa-node", "topology_manager_scope": "pod", "cpu_manager_policy": "static",
        "reserved_system_cpus": "0-3,52-55", "memory_manager_policy": "Static",
        "reserved_memory": [{"numaNode": 0, "limits": {"memory": "4096Mi"}}], "system_reserved_memory": "3596Mi",
        "nvlink_domains_label": "0-3_4-7",
        "reason": "this test's plan",
    }
    hosts, nodes = {}, _planned_nodes()
    for host, pool in (("gpu-train-01", "training"), ("gpu-train-02", "training"), ("gpu-infer-01", "inference")):
        # the rest as the rule gives it, with kube_node's defaults (inventories/cluster leaves the reservations to them)
        ruled = kube_plan.kubelet_policy(_topology(host), pool, 2, "", 4096, 500)
        planned = policy if host == "gpu-train-01" else ruled
        hosts[host] = {"topology": _topology(host), "topology_source": "preflight", "pool": pool,
                       "kubelet_policy": planned, "node": kube_plan.node_registration(planned, pool)}
    plan = {"gpuops_plan": {
        "schema_version": plan_py.SCHEMA_VERSION, "source": "preflight", **_planned_team_and_pins(),
        "platform": {"name": "kubernetes", "source": "auto", "reason": "this test's plan", "ok": True},
        "hosts": hosts,
        "pools": {"training": {"hosts": ["gpu-train-01", "gpu-train-02"],
                               "nccl": {"env": {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}, "notes": ["planned"]}}},
        "nodes": nodes, "gpu_sharing": _planned_gpu_sharing(nodes["gpu"])}}
    out = tmp_path / "render"
    result = run_render(INVENTORY, out, "-e", json.dumps(plan))
    assert result.returncode == 0, result.stdout[-4000:]
    objects = load_objects(out)
    configs = _by(objects, "kube_node", "KubeletConfiguration")
    assert configs["gpu-train-01"]["topologyManagerPolicy"] == "single-numa-node"
    assert configs["gpu-train-01"]["reservedSystemCPUs"] == "0-3,52-55"
    planned = hosts["gpu-train-02"]["kubelet_policy"]
    assert configs["gpu-train-02"]["reservedSystemCPUs"] == planned["reserved_system_cpus"]
    labels = _by(objects, "kube_join", "Node")["gpu-train-01"]["metadata"]["labels"]
    assert labels == hosts["gpu-train-01"]["node"]["labels"]
    assert labels["gpuops.io/nvlink-domains"] == "0-3_4-7"
    assert labels["gpuops.io/topology-policy"] == "single-numa-node"
    job = next(obj for path, obj in objects if path.startswith("training_stack/") and obj["kind"] == "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert job["metadata"]["annotations"]["gpuops.io/nccl-notes"] == "planned"


def test_nodes_join_on_the_control_planes_bind_port(variant):
    """Without kube_control_plane_endpoint a node joins the first control plane on the port its API listens on
    (VARIANT: kube_control_plane_bind_port 8443; the session render's is the default, 6443)."""
    assert VARIANT["kube_control_plane_bind_port"] == 8443  # noqa: PLR2004 - the port asserted below
    objects = load_objects(variant)
    init = _by(objects, "kube_control_plane", "InitConfiguration")["cp-01"]
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.10", "bindPort": 8443}
    joins = _by(objects, "kube_join", "JoinConfiguration")
    assert joins
    assert {join["discovery"]["bootstrapToken"]["apiServerEndpoint"] for join in joins.values()} == {"192.0.2.10:8443"}


def test_three_control_planes_render_their_joins(layouts):
    """conftest's layouts: cp-02 and cp-03 beside cp-01, behind kube_control_plane_endpoint."""
    out = layouts
    joins = _by(load_objects(out), "kube_control_plane", "JoinConfiguration")
    assert set(joins) == {"cp-02", "cp-03"}
    for host, join in joins.items():
        assert join["discovery"]["bootstrapToken"] == {
            "apiServerEndpoint": ENDPOINT,
            "token": "review.placeholder00000",
            "caCertHashes": ["sha256:" + "0" * 64],
        }
        assert join["nodeRegistration"]["name"] == host
        assert join["nodeRegistration"]["taints"] == [
            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
        ]
        assert "kubeletExtraArgs" not in join["nodeRegistration"]
        assert join["controlPlane"]["certificateKey"] == "0" * 64
    # the first one's InitConfiguration carries the same key (the upload) and its own address
    init = _by(load_objects(out), "kube_control_plane", "InitConfiguration")["cp-01"]
    assert (init["certificateKey"], init["localAPIEndpoint"]["advertiseAddress"]) == ("0" * 64, "192.0.2.10")
