"""Judge NetworkPolicies with IBM's network-config-analyzer (nca 2.1.0), an analyzer nobody here wrote.

nca implements the networking.k8s.io/v1 NetworkPolicy semantics and runs offline on YAML. It lives in a venv of its
own, ``.venv/nca`` (``make venv``; requirements-nca.txt says why it cannot share .venv). ``analyze`` runs it ONCE
for a whole question set, through a scheme file (docs/SchemeFileFormat.md of github.com/IBM/network-config-analyzer):
one connectivity map per policy set, and the ``sanity`` query (empty selectors, redundant and vacuous policies) on
the first set, plus every warning its parser prints about the input (e.g. "Rule selects no pods").

nca reasons about the pods it is given: a policy whose pods are absent selects nothing and proves nothing. So the
caller hands in namespaces and workloads (Pods, Deployments, DaemonSets, Jobs, ...) beside the policies;
``tenant_probes`` gives one probe workload per tenant namespace, and ``CLUSTER_STAND_INS`` the pods that kubeadm and
the monitoring chart create, which render.yml does not write.

This replaced tests/netpol_eval.py, the evaluator written here: nca checks all that it checked (selectors, peers,
ports, ipBlocks, policy types, both sides of a connection), so nothing of it was kept.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
NCA = Path(os.environ.get("GPUOPS_NCA", REPO_ROOT / ".venv" / "nca" / "bin" / "nca"))
POD_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")

# Created by the cluster, not by render.yml, with the labels their upstream manifests give them:
# * kube-system and CoreDNS as kubeadm deploys it: Deployment "coredns", pods labelled k8s-app: kube-dns
#   (kubernetes/kubernetes cmd/kubeadm/app/phases/addons/dns/manifests.go); kube-proxy, k8s-app: kube-proxy
#   (cmd/kubeadm/app/phases/addons/proxy/manifests.go), another kube-system pod that tenants must not reach;
# * Prometheus of kube-prometheus-stack in the monitoring namespace (kube_monitoring installs the chart), pods labelled
#   app.kubernetes.io/name: prometheus by the Prometheus operator.
# A namespace's kubernetes.io/metadata.name label is set by the API server, and by nca in the same way.
CLUSTER_STAND_INS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}},
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {"containers": [{"name": "coredns"}]},
            },
        },
    },
    {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-proxy"}},
                "spec": {"containers": [{"name": "kube-proxy"}]},
            },
        },
    },
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "prometheus-kube-prometheus-stack-prometheus", "namespace": "monitoring"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "prometheus"}},
                "spec": {"containers": [{"name": "prometheus"}]},
            },
        },
    },
]


def tenant_probes(namespaces: list[str], labels: dict) -> list[dict]:
    """One probe Deployment per tenant namespace; two replicas, so nca shows what a tenant's pods may do to each other
    (it keeps at most two pods of a kind, and a pod's connection to itself is not listed)."""
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "probe"}]}},
            },
        }
        for namespace in namespaces
    ]


@dataclass(frozen=True)
class Verdict:
    """connections: per policy set, {(source, destination, connection)} as nca names them, e.g.
    ("team-vision/probe-1", "192.0.2.50", "{protocols:TCP,dst_ports:2049}"); sanity: the first set's
    findings; warnings: what nca printed about the input, as "<policy set>.yaml: <message>" where it names a file
    (the policy set's name, without the line and column of the YAML nca was given)."""

    connections: dict[str, set[tuple[str, str, str]]]
    sanity: list[str]
    warnings: list[str]


_LINE = re.compile(r"^(?P<src>\S+) => (?P<dst>\S+) : (?P<conn>.+)$")
_WARNING = re.compile(r"^(?P<file>\S+\.yaml):\d+:\d+: Warning: (?P<message>.*)$")


def analyze(resources: list[dict], policy_sets: dict[str, list[dict]], workdir: Path, sanity: bool = True) -> Verdict:
    """Run nca once: the connectivity map of each policy set over ``resources`` (namespaces and workloads), and, unless
    ``sanity`` is false (it is the slow query: seconds, where a map takes a tenth of one), the sanity query on the
    first set."""
    if not NCA.is_file():
        raise AssertionError(
            f"network-config-analyzer not found at {NCA}: run `make venv` (it installs "
            "requirements-nca.txt into .venv/nca), or set GPUOPS_NCA to an nca 2.1.0 command"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    namespaces = [o for o in resources if o["kind"] == "Namespace"]
    pods = [o for o in resources if o["kind"] in POD_KINDS]
    (workdir / "namespaces.yaml").write_text(yaml.safe_dump_all(namespaces), encoding="utf-8")
    (workdir / "pods.yaml").write_text(yaml.safe_dump_all(pods), encoding="utf-8")
    for stale in workdir.glob("*.txt"):
        stale.unlink()  # nca appends to an output file that exists
    configs, queries = [], []
    for name, policies in policy_sets.items():
        (workdir / f"{name}.yaml").write_text(yaml.safe_dump_all(policies), encoding="utf-8")
        configs.append({"name": name, "networkPolicyList": [str(workdir / f"{name}.yaml")]})
        queries.append(
            {
                "name": f"connectivity-{name}",
                "connectivityMap": [name],
                "outputConfiguration": {
                    "outputFormat": "txt_no_fw_rules",
                    "outputEndpoints": "pods",
                    "outputPath": str(workdir / f"connectivity-{name}.txt"),
                },
            }
        )
    if sanity:
        queries.append(
            {
                "name": "sanity",
                "sanity": [next(iter(policy_sets))],
                "outputConfiguration": {"outputPath": str(workdir / "sanity.txt")},
            }
        )
    scheme = {
        "namespaceList": str(workdir / "namespaces.yaml"),
        "podList": str(workdir / "pods.yaml"),
        "networkConfigList": configs,
        "queries": queries,
    }
    (workdir / "scheme.yaml").write_text(yaml.safe_dump(scheme, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [str(NCA), "--scheme", str(workdir / "scheme.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=workdir,
    )
    # the exit code counts mismatched expectations, and this scheme sets none: anything else is a failed run
    assert result.returncode == 0, f"nca exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    connections = {}
    for name in policy_sets:
        text = (workdir / f"connectivity-{name}.txt").read_text(encoding="utf-8")
        lines = [_LINE.match(line) for line in text.splitlines() if line.strip()]
        assert all(lines), f"connectivity-{name}.txt has a line that is not 'src => dst : connection':\n{text}"
        connections[name] = {(m["src"], m["dst"], m["conn"]) for m in lines}
    findings = (
        [
            line
            for line in (workdir / "sanity.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("NetworkConfig ")
        ]
        if sanity
        else []
    )
    warnings = [
        _WARNING.sub(r"\g<file>: \g<message>", line.replace(f"{workdir}/", ""))
        for line in (result.stderr + result.stdout).splitlines()
        if "Warning" in line or "missing" in line
    ]
    return Verdict(connections, findings, warnings)
