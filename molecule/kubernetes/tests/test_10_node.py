"""kube_node on both nodes: Debian's real containerd and kubectl, the LABELLED stand-in kubelet/kubeadm/cri-tools
from the scenario's signed mirror, all pinned and held; host preparation; runc with the systemd cgroup driver."""

from __future__ import annotations

import json
import re

import pytest
import yaml

testinfra_hosts = ["gpuops-kube-cp", "gpuops-kube-gpu"]

REAL = {"containerd": "1.7.24~ds1-6+deb13u1", "kubectl": "1.32.3+ds-2"}
CALLS = "/var/lib/gpuops-standin/kubeadm/calls.jsonl"
STANDIN = {"kubelet": "1.34.2-1.1", "kubeadm": "1.34.2-1.1", "cri-tools": "1.34.0-1.1"}


@pytest.mark.parametrize(("name", "version"), sorted({**REAL, **STANDIN}.items()))
def test_package_is_pinned_and_held(host, name, version):
    assert host.package(name).version == version
    assert name in host.check_output("apt-mark showhold").split()
    assert f"Candidate: {version}" in host.check_output(f"apt-cache policy {name}")
    moved = host.check_output("apt-get -s dist-upgrade")
    assert not re.search(rf"^Inst {re.escape(name)} ", moved, re.M), moved


def test_real_packages_are_debians_and_stand_ins_are_labelled(host):
    for name in REAL:
        assert "Debian" in host.check_output(f"dpkg-query -W -f '${{Maintainer}}' {name}")
    for name in STANDIN:
        assert "TEST STAND-IN" in host.check_output(f"dpkg-query -W -f '${{Description}}' {name}")
    assert "1.32.3" in host.check_output("kubectl version --client")


def test_kubernetes_repository_is_signed_by_the_mirror_key_only(host):
    sources = host.file("/etc/apt/sources.list.d/gpuops-kubernetes.sources").content_string
    assert "URIs: http://127.0.0.1:8089/kube/" in sources
    assert "Signed-By: /etc/apt/keyrings/gpuops-kubernetes.gpg" in sources
    fingerprint = host.file("/srv/gpuops-mirror/keys/gpuops-test-mirror.fpr").content_string.strip()
    assert f"signed by {fingerprint} only" in sources
    pins = host.file("/etc/apt/preferences.d/gpuops-kubernetes.pref").content_string
    assert "Package: kubeadm\nPin: version 1.34.2-1.1\nPin-Priority: 1001" in pins


def test_runc_uses_the_systemd_cgroup_driver(host):
    assert host.service("containerd").is_running
    dump = host.check_output("containerd config dump")
    runc = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]') :]
    assert "SystemdCgroup = true" in runc.split("\n\n")[0]
    runc_type = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]') :]
    assert 'runtime_type = "io.containerd.runc.v2"' in runc_type.split("\n\n")[0]


def test_config_toml_kept_what_debian_shipped_and_a_backup(host):
    main = host.file("/etc/containerd/config.toml").content_string
    # Debian's own config.toml (cni paths, opt plugin) is edited, not replaced.
    assert 'bin_dir = "/usr/lib/cni"' in main
    assert 'path = "/var/lib/containerd/opt"' in main
    assert main.count("SystemdCgroup") == 1
    backups = [f for f in host.check_output("ls /etc/containerd").split() if f.startswith("config.toml.")]
    assert backups, "the first edit keeps a backup"


def test_swap_off_modules_and_sysctls_persisted(host):
    assert len(host.file("/proc/swaps").content_string.strip().splitlines()) == 1
    text = host.file("/etc/modules-load.d/gpuops-kubernetes.conf").content_string
    modules = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert modules == ["overlay", "br_netfilter"], text  # one module per line, as systemd-modules-load reads it
    sysctls = host.file("/etc/sysctl.d/90-gpuops-kubernetes.conf").content_string
    for name in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward"):
        assert re.search(rf"^{re.escape(name)}\s*=\s*1$", sysctls, re.M), sysctls
    assert host.file("/proc/sys/net/ipv4/ip_forward").content_string.strip() == "1"


def test_kubeadm_was_given_containerds_cri_socket(host):
    """The role's part: the Init/JoinConfiguration it gave kubeadm (recorded by the stand-in kubeadm as given)
    names containerd's CRI socket, and Debian's real containerd answers there."""
    calls = [json.loads(line) for line in host.file(CALLS).content_string.splitlines() if line.strip()]
    given = [c for c in calls if c["argv"][0] in ("init", "join") and "phase" not in c["argv"]]
    assert len(given) == 1, given
    docs = {d["kind"]: d for d in yaml.safe_load_all(given[0]["config"]) if d}
    config = docs.get("InitConfiguration") or docs["JoinConfiguration"]
    assert config["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    host.run_expect([0], "ctr --address /run/containerd/containerd.sock version")


def test_standin_contract_kubeadm_started_the_kubelet_with_that_socket(host):
    """The STAND-IN kubeadm's contract, not the role's: like real kubeadm it writes kubeadm-flags.env from the
    registration it was given and enables and starts the kubelet (the stand-in kubelet only sleeps)."""
    assert host.service("kubelet").is_running
    assert host.service("kubelet").is_enabled
    flags = host.file("/var/lib/kubelet/kubeadm-flags.env").content_string
    assert "--container-runtime-endpoint=unix:///run/containerd/containerd.sock" in flags
