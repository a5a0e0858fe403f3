"""A small NetworkPolicy evaluator (networking.k8s.io/v1), for tests: is a connection allowed by a policy set?

No API server or CNI can run here, so this stands in for the network plugin's enforcement. It follows the
Kubernetes documentation (kubernetes.io/docs/concepts/services-networking/network-policies/):

* a pod is isolated for ingress (egress) once any policy in its namespace selects it (``podSelector``) with
  ``Ingress`` (``Egress``) in ``policyTypes``; ``policyTypes`` left out means Ingress, plus Egress when the
  policy has ``egress`` rules;
* a connection is allowed when the sender's egress allows it (not isolated, or some rule of a selecting policy
  matches the destination and port) and the receiver's ingress allows it likewise; policies only add allows;
* a rule with no ``to``/``from`` matches every peer, with no ``ports`` every port;
* a peer with only ``podSelector`` means pods of the policy's own namespace; with ``namespaceSelector`` (and
  optionally ``podSelector``) pods of the selected namespaces; ``ipBlock`` addresses outside the cluster's pods
  (``except`` carved out);
* a port entry's protocol defaults to TCP; ``endPort`` makes a range; a port entry without ``port`` is every port.

Named ports are not supported (our policies use none); a test that hands one in fails.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict = field(default_factory=dict)

    def ns_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace}


@dataclass(frozen=True)
class External:
    ip: str


def selects(selector: dict | None, labels: dict) -> bool:
    """A label selector (matchLabels, matchExpressions); ``{}`` selects everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values, "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}[operator]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict, policy_namespace: str, other: Pod | External) -> bool:
    if "ipBlock" in peer:
        if not isinstance(other, External):
            return False
        address = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(cut) for cut in block.get("except") or [])
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.ns_labels()):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector"), other.labels)


def _port_matches(ports: list[dict] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        if not isinstance(wanted, int):
            raise ValueError(f"named port {wanted!r}: not supported by this evaluator")
        if wanted <= port <= entry.get("endPort", wanted):
            return True
    return False


def _types(spec: dict) -> list[str]:
    if "policyTypes" in spec:
        return spec["policyTypes"]
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _side_allows(policies: list[dict], pod: Pod, other: Pod | External, port: int, protocol: str,
                 direction: str) -> bool:
    """Whether ``pod``'s own policies let the connection through in ``direction`` (Ingress or Egress)."""
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies if p["metadata"].get("namespace") == pod.namespace
                 and direction in _types(p["spec"]) and selects(p["spec"].get("podSelector"), pod.labels)]
    if not selecting:
        return True  # not isolated in this direction
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(_peer_matches(peer, pod.namespace, other) for peer in peers)
            if peer_ok and _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(policies: list[dict], source: Pod | External, destination: Pod | External, port: int,
            protocol: str = "TCP") -> bool:
    """Can ``source`` open a connection to ``destination`` on ``port``/``protocol`` under ``policies``?"""
    policies = [p for p in policies if p.get("kind") == "NetworkPolicy"]
    if isinstance(source, Pod) and not _side_allows(policies, source, destination, port, protocol, "Egress"):
        return False
    return not (isinstance(destination, Pod)
                and not _side_allows(policies, destination, source, port, protocol, "Ingress"))
