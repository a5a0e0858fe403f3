"""Tenant network policy (plugin_utils kube_netpol through kube_tenancy.plan): the worked inventory's policy set,
evaluated as a table (from whom, to whom, port: allowed or not) with a small NetworkPolicy evaluator
(tests/netpol_eval.py, a stand-in for the network plugin: no API server or CNI runs here), and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_tenancy as kt
from netpol_eval import External, Pod, allowed, selects
from netpol_table import POLICIES, TEAMS, table

REPO = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((REPO / "roles/kube_tenancy/defaults/main.yml").read_text(encoding="utf-8"))


def cluster_config() -> dict:
    """kube_tenancy's config as the role builds it for inventories/cluster (inventory over the role's defaults)."""
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(REPO / "inventories" / "cluster")])
    hostvars = VariableManager(loader=loader, inventory=manager).get_vars(host=manager.get_host("cp-01"),
                                                                          include_hostvars=False)

    def var(name: str) -> object:
        return hostvars.get(f"kube_tenancy_{name}", DEFAULTS[f"kube_tenancy_{name}"])

    return {"teams": hostvars["gpuops_teams"], "members": hostvars["gpuops_members"], "cluster_gpus": 24,
            **{key: var(key) for key in ("member_pvc_size", "extra_pvcs", "limit_default", "limit_default_request",
                                         "monitoring_namespace", "default_storage_class", "mlflow_namespace",
                                         "nfs_servers", "egress_endpoints")}}


@pytest.fixture(scope="module", name="policies")
def _policies() -> list[dict]:
    result = kt.plan(cluster_config())
    assert result["problems"] == []
    return [o for o in result["objects"] if o["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize(("case", "source", "destination", "port", "protocol", "wanted"), table(),
                         ids=[row[0] for row in table()])
def test_worked_inventory_table(policies, case, source, destination, port, protocol, wanted) -> None:
    assert allowed(policies, source, destination, port, protocol) is wanted, case


def test_each_team_has_exactly_the_listed_policies(policies) -> None:
    for team, namespace in TEAMS.items():
        names = {p["metadata"]["name"] for p in policies if p["metadata"]["namespace"] == namespace}
        assert names == {f"{team}-{name}" for name in POLICIES}, namespace
    deny = next(p for p in policies if p["metadata"]["name"] == "vision-default-deny-egress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    endpoints = next(p for p in policies if p["metadata"]["name"] == "vision-allow-endpoints")
    assert endpoints["metadata"]["annotations"]["gpuops.io/endpoints"] == "object-store 192.0.2.60/32"


def test_without_the_egress_deny_the_internet_is_open(policies) -> None:
    """The table can fail: drop one policy and a row it guards flips."""
    rest = [p for p in policies if not p["metadata"]["name"].endswith("-default-deny-egress")
            and not p["spec"].get("egress")]
    assert allowed(rest, Pod("team-vision"), External("203.0.113.9"), 443)
    rest = [p for p in policies if p["metadata"]["name"] != "vision-allow-dns"]
    assert not allowed(rest, Pod("team-vision"), Pod("kube-system", {"k8s-app": "kube-dns"}), 53, "UDP")


# --- the evaluator itself follows the documented semantics --------------------------------------------------------

def _np(namespace: str, spec: dict) -> dict:
    return {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": namespace}, "spec": spec}


def test_evaluator_semantics() -> None:
    a, b = Pod("a", {"role": "db"}), Pod("b", {"role": "web"})
    assert allowed([], a, b, 80), "no policy: not isolated"
    deny_b = _np("b", {"podSelector": {}})
    assert not allowed([deny_b], a, b, 80), "policyTypes left out means Ingress: b is isolated"
    assert allowed([deny_b], b, a, 80), "b's egress is not isolated by an ingress-only policy"
    # namespaceSelector and podSelector in ONE peer: both must match; in two peers: either
    both = _np("b", {"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}},
         "podSelector": {"matchLabels": {"role": "web"}}}]}]})
    assert not allowed([both], a, b, 80)
    either = _np("b", {"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "a"}}},
        {"podSelector": {"matchLabels": {"role": "web"}}}]}]})
    assert allowed([either], a, b, 80)
    # a bare podSelector peer is the policy's own namespace only
    own = _np("b", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    assert not allowed([own], a, b, 80)
    assert allowed([own], Pod("b"), b, 80)
    # ipBlock with except, ports with protocol and endPort
    out = _np("a", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
        "to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
        "ports": [{"port": 2000, "endPort": 2010}, {"protocol": "UDP", "port": 53}]}]})
    assert allowed([out], a, External("10.2.3.4"), 2005)
    assert not allowed([out], a, External("10.1.3.4"), 2005)
    assert not allowed([out], a, External("10.2.3.4"), 2011)
    assert not allowed([out], a, External("10.2.3.4"), 53, "TCP")
    assert allowed([out], a, External("10.2.3.4"), 53, "UDP")
    assert not allowed([out], a, b, 2005), "an ipBlock matches no pod"


def test_selector_expressions() -> None:
    assert selects({"matchExpressions": [{"key": "k", "operator": "In", "values": ["x"]}]}, {"k": "x"})
    assert not selects({"matchExpressions": [{"key": "k", "operator": "NotIn", "values": ["x"]}]}, {"k": "x"})
    assert selects({"matchExpressions": [{"key": "k", "operator": "DoesNotExist"}]}, {})
    assert not selects({"matchLabels": {"k": "x"}}, {})


# --- refusals -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "wanted"), [
    ({"nfs_servers": ["nas.lab.example"]}, "kube_tenancy_nfs_servers[0] is 'nas.lab.example': not an IP address"),
    ({"nfs_servers": ["10.0.0.1/8"]}, "kube_tenancy_nfs_servers[0] is '10.0.0.1/8': not an IP address or CIDR"),
    ({"egress_endpoints": [{"name": "s3", "cidr": "s3.example", "ports": [{"port": 443}]}]},
     "kube_tenancy_egress_endpoints[0].cidr is 's3.example'"),
    ({"egress_endpoints": [{"name": "s3", "cidr": "10.0.5.0/24"}]},
     "kube_tenancy_egress_endpoints[0].ports is None: expected a non-empty list"),
    ({"egress_endpoints": [{"name": "s3", "cidr": "10.0.5.0/24", "ports": [{"port": 70000}]}]},
     "kube_tenancy_egress_endpoints[0].ports[0] is {'port': 70000}"),
    ({"egress_endpoints": [{"name": "s3", "cidr": "10.0.5.0/24", "ports": [{"port": 443, "protocol": "tcp"}]}]},
     "kube_tenancy_egress_endpoints[0].ports[0].protocol is 'tcp'"),
    ({"egress_endpoints": [{"name": "s3", "cidr": "10.0.5.7", "ports": [{"port": 443}], "teams": ["robots"]}]},
     "kube_tenancy_egress_endpoints[0].teams has ['robots']"),
])
def test_egress_refusals(extra: dict, wanted: str) -> None:
    problems = kt.problems({**cluster_config(), **extra})
    assert len(problems) == 1, problems
    assert problems[0].startswith(wanted), problems[0]
    assert "fix:" in problems[0]


def test_endpoint_for_one_team_only() -> None:
    config = {**cluster_config(), "egress_endpoints": [
        {"name": "registry-api", "cidr": "10.0.5.7", "ports": [{"port": 443}], "teams": ["serving"]}]}
    objects = kt.plan(config)["objects"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert allowed(policies, Pod("serving"), External("10.0.5.7"), 443)
    assert not allowed(policies, Pod("team-vision"), External("10.0.5.7"), 443)
    assert "vision-allow-endpoints" not in {p["metadata"]["name"] for p in policies}


def test_mlflow_namespace_agrees_with_training_stack() -> None:
    """One MLflow: the namespace tenant pods may reach is the one training_stack deploys it in (both defaults)."""
    training = yaml.safe_load((REPO / "roles/training_stack/defaults/main.yml").read_text(encoding="utf-8"))
    assert DEFAULTS["kube_tenancy_mlflow_namespace"] == training["training_stack_mlflow_namespace"]
