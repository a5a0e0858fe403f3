"""One image layout on inventories/cluster: every image the Kubernetes path pulls comes from gpuops_registry_mirror
as <mirror>/<upstream path> (the upstream registry host dropped, path, tag and digest kept), the layout of
gpuops.cluster.mirror_image (docs/kubernetes.md, "Images and the registry mirror")."""

from __future__ import annotations

import re

import yaml
from conftest import REPO_ROOT

PLATFORM = REPO_ROOT / "inventories" / "cluster" / "group_vars" / "all" / "platform.yml"
# The first path component of an upstream reference is a registry host when it has a dot or a port (Docker's rule).
REGISTRY_HOST = re.compile(r"^[^/]*[.:][^/]*/")


def mirror() -> str:
    value = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))["gpuops_registry_mirror"]
    assert value, "inventories/cluster sets no gpuops_registry_mirror: these tests would prove nothing"
    return value


def on_mirror(reference: str) -> bool:
    """``<mirror>/<path>``, and the path does not start with another registry host (<mirror>/quay.io/...)."""
    prefix = mirror() + "/"
    return reference.startswith(prefix) and not REGISTRY_HOST.match(reference[len(prefix):])


def images(obj: object) -> list[str]:
    """Every container image in an object: any ``image`` string under a containers or initContainers list."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found += [c["image"] for c in value if isinstance(c, dict) and isinstance(c.get("image"), str)]
            else:
                found += images(value)
    elif isinstance(obj, list):
        for value in obj:
            found += images(value)
    return found


def helm_values(rendered, name: str) -> dict:
    return yaml.safe_load((rendered / name).read_text(encoding="utf-8"))


def test_layout_check_can_fail() -> None:
    assert on_mirror(f"{mirror()}/sig-storage/local-volume-provisioner:v2.7.0")
    assert not on_mirror(f"{mirror()}/registry.k8s.io/sig-storage/local-volume-provisioner:v2.7.0")
    assert not on_mirror("registry.k8s.io/sig-storage/local-volume-provisioner:v2.7.0")
    assert images({"spec": {"template": {"spec": {"initContainers": [{"image": "a/b:1"}]}}}}) == ["a/b:1"]


def test_every_rendered_container_image_on_the_mirror(rendered_objects) -> None:
    found = {f"{path}: {image}" for path, obj in rendered_objects for image in images(obj)}
    # local_pv's provisioner, MLflow and the PyTorchJob templates at least
    assert {item.split("/", 1)[0] for item in found} >= {"local_pv", "training_stack"}, found
    assert sorted(item for item in found if not on_mirror(item.split(": ", 1)[1])) == []


def test_helm_values_on_the_mirror(rendered) -> None:
    operator = helm_values(rendered, "gpu_operator/helm-values-gpu-operator.yml")
    repositories = [value["repository"] for value in operator.values()
                    if isinstance(value, dict) and "repository" in value]
    repositories += [operator[section][key]["repository"]
                     for section, key in (("driver", "manager"), ("vgpuManager", "driverManager"),
                                          ("vfioManager", "driverManager"), ("node-feature-discovery", "image"))]
    assert {"operator", "devicePlugin", "dcgmExporter", "driver", "toolkit"} <= set(operator)
    assert [repo for repo in repositories if not on_mirror(repo + ":tag")] == []
    # kube-prometheus-stack and its subcharts put global.imageRegistry in place of each image's registry
    assert helm_values(rendered, "kube_monitoring/helm-values-kube-prometheus-stack.yml")["global"] == {
        "imageRegistry": mirror()}


def test_kubeadm_and_calico_on_the_mirror(rendered_objects) -> None:
    by_kind = {obj["kind"]: obj for _path, obj in rendered_objects}
    cluster = by_kind["ClusterConfiguration"]
    # kubeadm pulls <imageRepository>/kube-apiserver, etcd, pause; CoreDNS from <dns.imageRepository>/coredns
    assert cluster["imageRepository"] == mirror()
    assert on_mirror(cluster["dns"]["imageRepository"] + "/coredns:v1.12.1")
    assert cluster["dns"]["imageRepository"] == f"{mirror()}/coredns"
    # the Tigera operator pulls <registry><imagePath>/<image>: <mirror>/calico/node, the upstream quay.io/calico path
    spec = by_kind["Installation"]["spec"]
    assert (spec["registry"], spec["imagePath"]) == (f"{mirror()}/", "calico")
    assert on_mirror(f"{spec['registry']}{spec['imagePath']}/node:v3.30.3")
