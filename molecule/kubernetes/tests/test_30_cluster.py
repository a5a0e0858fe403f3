"""kube_control_plane + kube_join with the LABELLED stand-in kubeadm, which records every call with the
configuration it was given: init ran once; the token was made on the control plane (delegate_to from a
controller that is a third machine), used by the worker and deleted; the JoinConfiguration carried the GPU
taint and labels; the admin kubeconfig reached the controller at 0600, git-ignored. These run after converge
and Molecule's idempotence run, so "once" means: the second run did not init, join or make a token again."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import testinfra
import yaml

CP = testinfra.get_host("docker://gpuops-kube-cp")
GPU = testinfra.get_host("docker://gpuops-kube-gpu")
RECORD = "/var/lib/gpuops-standin/kubeadm"
REPO = Path(__file__).resolve().parents[3]

testinfra_hosts = ["gpuops-kube-cp"]


def calls(node, verb=None):
    text = node.file(f"{RECORD}/calls.jsonl").content_string if node.file(f"{RECORD}/calls.jsonl").exists else ""
    items = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [c for c in items if verb is None or c["argv"][0] == verb]


def docs(text):
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def test_init_ran_once_with_the_rendered_configuration():
    inits = [c for c in calls(CP, "init") if "phase" not in c["argv"]]
    assert len(inits) == 1, inits
    assert inits[0]["argv"] == ["init", "--config", "/etc/kubernetes/gpuops/kubeadm-init.yaml"]
    cfg = docs(inits[0]["config"])
    assert cfg["ClusterConfiguration"]["kubernetesVersion"] == "v1.34.2"
    assert cfg["ClusterConfiguration"]["networking"]["podSubnet"] == "10.244.0.0/16"
    taints = cfg["InitConfiguration"]["nodeRegistration"]["taints"]
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in taints
    # written by the stand-in kubeadm (its contract): evidence that init ran, not a check of the role
    for path in ("admin.conf", "kubelet.conf", "pki/ca.crt", "manifests/kube-apiserver.yaml", "manifests/etcd.yaml"):
        assert CP.file(f"/etc/kubernetes/{path}").exists, path
    assert not calls(GPU, "init"), "the worker never runs kubeadm init"


def test_token_made_on_the_control_plane_used_by_the_worker_once_then_deleted():
    made = calls(CP, "token")
    creates = [c for c in made if c["argv"][1] == "create"]
    deletes = [c for c in made if c["argv"][1] == "delete"]
    assert len(creates) == 1, made
    assert len(deletes) == 1, made
    argv = creates[0]["argv"]
    assert argv[argv.index("--ttl") + 1] == "15m"
    assert argv[argv.index("--description") + 1] == "gpuops join of gpuops-kube-gpu"
    assert not calls(GPU, "token"), "the worker never makes a token"
    tokens = json.loads(CP.file(f"{RECORD}/tokens.json").content_string)
    assert len(tokens) == 1
    assert tokens[0]["deleted"] is True
    joins = calls(GPU, "join")
    assert len(joins) == 1, joins
    discovery = docs(joins[0]["config"])["JoinConfiguration"]["discovery"]["bootstrapToken"]
    assert discovery["token"] == f"{tokens[0]['id']}.{tokens[0]['secret']}"
    assert deletes[0]["argv"][2] == tokens[0]["id"]


def test_join_pins_the_cluster_ca_and_the_control_plane_endpoint():
    discovery = docs(calls(GPU, "join")[0]["config"])["JoinConfiguration"]["discovery"]["bootstrapToken"]
    digest = CP.check_output(
        "openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt | openssl pkey -pubin -outform der | sha256sum"
    ).split()[0]
    assert discovery["caCertHashes"] == [f"sha256:{digest}"]
    address = CP.check_output("hostname -I").split()[0]
    assert discovery["apiServerEndpoint"] == f"{address}:6443"


def test_worker_registered_with_the_gpu_taint_and_labels():
    registration = docs(calls(GPU, "join")[0]["config"])["JoinConfiguration"]["nodeRegistration"]
    assert registration["name"] == "gpuops-kube-gpu"
    assert registration["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    labels = dict(pair.split("=", 1) for pair in registration["kubeletExtraArgs"][0]["value"].split(","))
    assert labels == {
        "nvidia.com/gpu": "true",
        "gpuops.io/pool": "training",
        "gpuops.io/nvlink-domains": "0-7",
        "gpuops.io/topology-policy": "single-numa-node",
        # the plan's sweep form (kubernetes, kube_monitoring_gpu_health_sweep unset): kube_monitoring's DaemonSet
        "gpuops.io/gpu-health-sweep": "daemonset",
    }
    # kubelet.conf (written by the stand-in's join) shows the join ran
    assert GPU.file("/etc/kubernetes/kubelet.conf").exists
    # the JoinConfiguration held the token: removed after the join
    assert not GPU.file("/etc/kubernetes/gpuops/kubeadm-join.yaml").exists


def test_standin_contract_kubeadm_wrote_the_taints_into_kubeadm_flags():
    """The STAND-IN kubeadm's contract, not the role's: it renders the JoinConfiguration's taints (checked above)
    into the kubelet's --register-with-taints, as real kubeadm does."""
    flags = GPU.file("/var/lib/kubelet/kubeadm-flags.env").content_string
    assert "--register-with-taints=nvidia.com/gpu=true:NoSchedule" in flags


def test_admin_kubeconfig_fetched_to_the_controller_0600_and_gitignored():
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        pytest.skip("MOLECULE_EPHEMERAL_DIRECTORY is not set (run through molecule verify)")
    fetched = Path(ephemeral) / "inventory" / "credentials" / "admin.conf"
    assert fetched.read_text(encoding="utf-8") == CP.file("/etc/kubernetes/admin.conf").content_string
    assert oct(stat.S_IMODE(fetched.stat().st_mode)) == "0o600"
    assert oct(stat.S_IMODE(fetched.parent.stat().st_mode)) == "0o700"
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", "inventories/cluster/credentials/admin.conf"], check=False
    )
    assert ignored.returncode == 0, "inventories/<site>/credentials/ must be git-ignored"


def test_api_server_stages_were_skipped_not_run():
    # stage 5 (CNI) would have fetched the Tigera manifest onto the control plane
    assert not CP.check_output("ls /etc/kubernetes/gpuops").count("tigera-operator")
