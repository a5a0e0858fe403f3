"""Every object render.yml writes is valid, strictly, at the pinned version; the validator itself can fail."""

from __future__ import annotations

import pytest
from validator import problems


def test_render_wrote_every_kind_the_kubernetes_path_applies(rendered_objects):
    kinds = {(path.split("/")[0], obj["kind"]) for path, obj in rendered_objects}
    for expected in [
        ("kube_node", "KubeletConfiguration"),
        ("kube_control_plane", "InitConfiguration"),
        ("kube_control_plane", "ClusterConfiguration"),
        ("kube_join", "JoinConfiguration"),
        ("kube_join", "Node"),
        ("kube_cni", "Installation"),
    ]:
        assert expected in kinds


def test_one_file_per_kind_and_name(rendered_objects):
    for path, obj in rendered_objects:
        name = obj.get("metadata", {}).get("name") or path.rsplit("-", 3)[-1]
        assert path.split("/")[-1].startswith(obj["kind"].lower() + "-"), path
        assert name in path


def test_every_rendered_object_is_valid(rendered_objects):
    found = {path: problems(obj) for path, obj in rendered_objects}
    assert {path: errors for path, errors in found.items() if errors} == {}


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": {"taintz": []}},
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "topologyManagerPolicy": "numa",
        },
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cpuManagerPolicyy": "static"},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration", "kubernetesVersion": "1.34.2"},
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            "discovery": {"bootstrapToken": {"token": "short", "apiServerEndpoint": "cp:6443"}},
        },
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "InitConfiguration",
            "nodeRegistration": {"kubeletExtraArgs": {"a": "b"}},
        },
        {
            "apiVersion": "operator.tigera.io/v1",
            "kind": "Installation",
            "metadata": {"name": "default"},
            "spec": {"calicoNetwork": {"ipPools": [{"cidr": "10.0.0.0/16", "encapsulation": "vxlan"}]}},
        },
        {"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}},
    ],
    ids=[
        "core-unknown-field",
        "kubelet-bad-enum",
        "kubelet-typo",
        "kubeadm-version-without-v",
        "kubeadm-bad-token",
        "kubeadm-v1beta3-style-args",
        "calico-bad-enum",
        "no-schema",
    ],
)
def test_validator_refuses_bad_objects(obj):
    assert problems(obj), f"accepted: {obj}"


def test_validator_checks_custom_resources_against_shared_crds(shared_crds):
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"endpoints": "not-a-list"},
    }
    assert problems(bad)
