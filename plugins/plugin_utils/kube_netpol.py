# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""A team namespace's NetworkPolicies: default-deny for ingress and egress, then explicit allows (pure builders).

Kubernetes semantics (kubernetes.io/docs/concepts/services-networking/network-policies/): a pod is isolated for a
direction once any policy selects it with that policyType; a connection is then allowed only if some policy's rule
allows it, on the sender's egress side and on the receiver's ingress side. Policies only add allows, so the set
reads as a list, one allow per policy, each named after the team (the list: docs/security.md).
The cluster DNS is the pods ``k8s-app: kube-dns`` in ``kube-system``, as kubeadm's CoreDNS is labelled; the NFS allow
opens NFSv4's TCP 2049 only (v3's portmapper and mountd are not opened).

Everything else is denied: other teams' pods, the internet, the Kubernetes API, node ports. The two default-deny
policies are redundant beside ``allow-same-namespace``, which already selects every pod of the namespace both ways
(network-config-analyzer's sanity query says so; tests/render/test_tenant_isolation.py expects exactly that
finding). They stay so that the fence does not hang on an allow: narrowing or deleting ``allow-same-namespace`` must not
open the namespace.

NetworkPolicy matches addresses, not names, so endpoints are IP addresses or CIDRs. NFS volumes that the kubelet
mounts for a pod are mounted from the node's network namespace, which NetworkPolicy does not govern; the NFS allow
covers clients that run inside pods.
"""

from __future__ import annotations

import ipaddress
from typing import Any

DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
MLFLOW_POD_LABELS = {"app.kubernetes.io/name": "mlflow"}
MLFLOW_PORT = 5000
NFS_PORT = 2049
PROTOCOLS = ("TCP", "UDP", "SCTP")
_NS_LABEL = "kubernetes.io/metadata.name"
_MAX_PORT = 65535


def _cidr(value: object) -> str | None:
    """``10.0.4.5`` -> ``10.0.4.5/32``; a CIDR as is (host bits must be zero); None when not an address."""
    try:
        network = ipaddress.ip_network(str(value).strip(), strict=True)
    except ValueError:
        return None
    return str(network)


def _port_problem(var: str, port: object) -> str | None:
    number = port.get("port") if isinstance(port, dict) else None
    protocol = port.get("protocol", "TCP") if isinstance(port, dict) else None
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= _MAX_PORT:
        return f"{var} is {port!r}: expected {{port: 1-65535, protocol: TCP|UDP|SCTP}}; fix: e.g. {{port: 443}}"
    if protocol not in PROTOCOLS:
        return f"{var}.protocol is {protocol!r}: expected one of {', '.join(PROTOCOLS)}; fix: e.g. TCP"
    return None


def problems(config: dict, team_names: list[str]) -> list[str]:
    """Refusals of the egress inputs: kube_tenancy_nfs_servers, kube_tenancy_egress_endpoints."""
    found = []
    servers = config.get("nfs_servers") or []
    if not isinstance(servers, list):
        return [f"kube_tenancy_nfs_servers is {servers!r}: expected a list of IP addresses or CIDRs; fix: e.g. "
                "['10.0.40.10']"]
    for index, server in enumerate(servers):
        if _cidr(server) is None:
            found.append(f"kube_tenancy_nfs_servers[{index}] is {server!r}: not an IP address or CIDR (NetworkPolicy "
                         "matches addresses, not names); fix: give the server's address, e.g. '10.0.40.10'")
    endpoints = config.get("egress_endpoints") or []
    if not isinstance(endpoints, list):
        return [*found, f"kube_tenancy_egress_endpoints is {endpoints!r}: expected a list of {{name, cidr, ports}}"]
    for index, endpoint in enumerate(endpoints):
        var = f"kube_tenancy_egress_endpoints[{index}]"
        if not isinstance(endpoint, dict):
            found.append(f"{var} is {endpoint!r}: expected {{name, cidr, ports, teams}}; fix: see docs/roles/"
                         "kube_tenancy.md")
            continue
        if _cidr(endpoint.get("cidr")) is None:
            found.append(f"{var}.cidr is {endpoint.get('cidr')!r}: not an IP address or CIDR (NetworkPolicy matches "
                         "addresses, not names); fix: e.g. '10.0.50.0/24' (host bits zero) or '10.0.50.7'")
        ports = endpoint.get("ports")
        if not isinstance(ports, list) or not ports:
            found.append(f"{var}.ports is {ports!r}: expected a non-empty list of {{port, protocol}}; fix: e.g. "
                         "[{port: 443}] (an endpoint open on every port is not an explicit allow)")
        else:
            found.extend(p for i, port in enumerate(ports) if (p := _port_problem(f"{var}.ports[{i}]", port)))
        teams = endpoint.get("teams")
        if teams is None:
            continue
        unknown = [t for t in teams if t not in team_names] if isinstance(teams, list) else [teams]
        if unknown:
            found.append(f"{var}.teams has {unknown!r}, not teams of gpuops_teams ({', '.join(team_names)}); fix: "
                         "name teams from gpuops_teams, or leave teams out for every team")
    return found


def team_policies(team: str, meta: Any, config: dict) -> list[dict]:
    """The NetworkPolicies of one team's namespace; ``meta(name)`` gives each one's metadata."""
    monitoring = config.get("monitoring_namespace") or "monitoring"
    mlflow = config.get("mlflow_namespace") or ""
    netpol = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy"}
    both = ["Ingress", "Egress"]

    def policy(suffix: str, spec: dict) -> dict:
        return {**netpol, "metadata": meta(f"{team}-{suffix}"), "spec": {"podSelector": {}, **spec}}

    policies = [
        policy("default-deny-ingress", {"policyTypes": ["Ingress"]}),
        policy("default-deny-egress", {"policyTypes": ["Egress"]}),
        policy("allow-same-namespace", {"policyTypes": both, "ingress": [{"from": [{"podSelector": {}}]}],
                                        "egress": [{"to": [{"podSelector": {}}]}]}),
        policy("allow-monitoring", {"policyTypes": ["Ingress"], "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {_NS_LABEL: monitoring}}}]}]}),
        policy("allow-dns", {"policyTypes": ["Egress"], "egress": [{
            "to": [{"namespaceSelector": {"matchLabels": {_NS_LABEL: DNS_NAMESPACE}},
                    "podSelector": {"matchLabels": dict(DNS_POD_LABELS)}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}),
    ]
    if mlflow:
        policies.append(policy("allow-mlflow", {"policyTypes": ["Egress"], "egress": [{
            "to": [{"namespaceSelector": {"matchLabels": {_NS_LABEL: mlflow}},
                    "podSelector": {"matchLabels": dict(MLFLOW_POD_LABELS)}}],
            "ports": [{"protocol": "TCP", "port": MLFLOW_PORT}]}]}))
    servers = [_cidr(server) for server in config.get("nfs_servers") or []]
    if servers:
        policies.append(policy("allow-nfs", {"policyTypes": ["Egress"], "egress": [{
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in servers],
            "ports": [{"protocol": "TCP", "port": NFS_PORT}]}]}))
    endpoints = [e for e in config.get("egress_endpoints") or [] if team in (e.get("teams") or [team])]
    if endpoints:
        allow = policy("allow-endpoints", {"policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": _cidr(e["cidr"])}}],
             "ports": [{"protocol": str(p.get("protocol", "TCP")), "port": int(p["port"])} for p in e["ports"]]}
            for e in endpoints]})
        # the names the inventory gives, for review (an ipBlock has no name of its own)
        allow["metadata"]["annotations"] = {"gpuops.io/endpoints": "; ".join(
            f"{e.get('name') or 'endpoint'} {_cidr(e['cidr'])}" for e in endpoints)}
        policies.append(allow)
    return policies
