"""The GPU worker: the nvidia runtime through the toolkit role's drop-in, and a kubelet configuration derived
from the fixture topology (a100x8_17nic_singleNUMA: one NVSwitch domain on NUMA node 0, training pool).

The role's part is the patch file and the JoinConfiguration that points kubeadm at it (recorded by the stand-in
kubeadm as it was given). /var/lib/kubelet/config.yaml is merged by the STAND-IN kubeadm, so the test that reads
it is named `test_standin_contract_*`: it holds the stand-in to real kubeadm's patch rule, not the role."""

from __future__ import annotations

import json
import re

import testinfra
import yaml

testinfra_hosts = ["gpuops-kube-gpu"]
PATCH = "/etc/kubernetes/gpuops/patches/kubeletconfiguration+strategic.yaml"
CALLS = "/var/lib/gpuops-standin/kubeadm/calls.jsonl"

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


def test_join_configuration_points_kubeadm_at_the_patch(host):
    """kubeadm reads <patches.directory>/kubeletconfiguration+strategic.yaml: the role names the directory in the
    JoinConfiguration it gives kubeadm, and the file name is kubeadm's target+patchtype form."""
    calls = [json.loads(line) for line in host.file(CALLS).content_string.splitlines() if line.strip()]
    joins = [c for c in calls if c["argv"][0] == "join"]
    assert len(joins) == 1, joins
    config = {d["kind"]: d for d in yaml.safe_load_all(joins[0]["config"]) if d}["JoinConfiguration"]
    assert config["patches"] == {"directory": PATCH.rsplit("/", 1)[0]}
    assert host.file(PATCH).is_file


def test_standin_contract_kubeadm_merged_the_patch_into_config_yaml(host):
    """The STAND-IN kubeadm's contract, not the role's: it merged the patch into the kubelet's config.yaml as
    real kubeadm does (maps merged, lists replaced)."""
    config = yaml.safe_load(host.file("/var/lib/kubelet/config.yaml").content_string)
    assert config["kind"] == "KubeletConfiguration"
    for key, value in POLICY.items():
        assert config[key] == value, key


def test_control_plane_keeps_the_default_managers(host):
    other = testinfra.get_host("docker://gpuops-kube-cp")
    patch = yaml.safe_load(other.file(PATCH).content_string)
    assert patch["topologyManagerPolicy"] == "none"
    assert patch["cpuManagerPolicy"] == "none"
