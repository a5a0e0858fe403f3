"""The GPU worker: the nvidia runtime through the toolkit role's drop-in, and a kubelet configuration derived
from the fixture topology (a100x8_17nic_singleNUMA: one NVSwitch domain on NUMA node 0, training pool)."""

from __future__ import annotations

import re

import testinfra
import yaml

testinfra_hosts = ["gpuops-kube-gpu"]
PATCH = "/etc/kubernetes/gpuops/patches/kubeletconfiguration+strategic.yaml"

POLICY = {
    "cgroupDriver": "systemd",
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0-1",
    "memoryManagerPolicy": "Static",
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "4096Mi"}}],
    "systemReserved": {"memory": "3596Mi"},
}


def test_containerd_has_the_nvidia_runtime_from_the_toolkit_drop_in(host):
    dump = host.check_output("containerd config dump")
    assert '"/etc/containerd/conf.d/99-nvidia.toml"' in dump
    nvidia = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]') :]
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in nvidia.split("\n\n")[0]
    assert re.search(r'^\s*default_runtime_name = "nvidia"$', dump, re.M)
    runc = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]') :]
    assert "SystemdCgroup = true" in runc.split("\n\n")[0]
    # the toolkit stand-in is the scenario's labelled package, pinned
    assert "TEST STAND-IN" in host.check_output("dpkg-query -W -f '${Description}' nvidia-container-toolkit")
    # config.toml itself carries no nvidia runtime: it lives in the drop-in only
    assert "runtimes.nvidia" not in host.file("/etc/containerd/config.toml").content_string


def test_kubelet_patch_carries_the_topology_policy(host):
    patch = yaml.safe_load(host.file(PATCH).content_string)
    for key, value in POLICY.items():
        assert patch[key] == value, key


def test_kubelet_config_kubeadm_wrote_has_the_policy(host):
    config = yaml.safe_load(host.file("/var/lib/kubelet/config.yaml").content_string)
    assert config["kind"] == "KubeletConfiguration"
    for key, value in POLICY.items():
        assert config[key] == value, key


def test_control_plane_keeps_the_default_managers(host):
    other = testinfra.get_host("docker://gpuops-kube-cp")
    patch = yaml.safe_load(other.file(PATCH).content_string)
    assert patch["topologyManagerPolicy"] == "none"
    assert patch["cpuManagerPolicy"] == "none"
