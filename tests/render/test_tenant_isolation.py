"""Tenant isolation in render.yml's output for inventories/cluster, judged by IBM's network-config-analyzer (nca).

One nca run (tests/nca.py) reads every rendered Namespace, workload and NetworkPolicy, the pods the cluster itself
adds (CoreDNS, kube-proxy, Prometheus) and one probe workload per tenant namespace, and answers for four policy
sets: the rendered one, and three broken copies that show each check can fail.
"""

from __future__ import annotations

import copy

import netpol_table
import pytest
from nca import CLUSTER_STAND_INS, POD_KINDS, analyze, tenant_probes

# nca's sanity query on the rendered set. Each team's two default-deny policies are redundant: <team>-allow-same-
# namespace already selects every pod of the namespace for Ingress and Egress, and being selected is what isolates a
# pod. They are kept on purpose, so that the fence does not depend on an allow: narrowing or deleting
# allow-same-namespace (a team fencing its notebooks from its jobs) must not open the namespace to everyone.
EXPECTED_SANITY = {
    f"NetworkPolicy {namespace}/{team}-default-deny-{direction} is redundant. Note that it contains "
    "no effective allow/deny rules"
    for team, namespace in netpol_table.TEAMS.items()
    for direction in ("ingress", "egress")
}
# what nca's parser says about the input: nothing about the rendered set (no selector that selects nothing, no rule
# without pods, given the pods above), and this about the mislabelled copy, which shows that a warning is caught
EXPECTED_WARNINGS = [
    'mlflow-mislabelled.yaml: A podSelector selects no pods. Better use "podSelector: Null"',
    "mlflow-mislabelled.yaml: Rule selects no pods",
]


def _mislabelled(policies: list[dict]) -> list[dict]:
    """Vision's allow-mlflow selecting MLflow by a label its pods do not carry: the rule selects no pods."""
    broken = copy.deepcopy(policies)
    for policy in broken:
        if policy["metadata"]["name"] == "vision-allow-mlflow":
            policy["spec"]["egress"][0]["to"][0]["podSelector"] = {"matchLabels": {"app": "mlflow"}}
    return broken


def _widened(policies: list[dict], teams: tuple[str, ...]) -> list[dict]:
    """A classic mistake: allow-same-namespace written with namespaceSelector: {} (every namespace) for ``teams``."""
    broken = copy.deepcopy(policies)
    for policy in broken:
        if policy["metadata"]["name"] in {f"{team}-allow-same-namespace" for team in teams}:
            policy["spec"]["ingress"] = [{"from": [{"namespaceSelector": {}}]}]
            policy["spec"]["egress"] = [{"to": [{"namespaceSelector": {}}]}]
    return broken


@pytest.fixture(scope="module")
def verdict(rendered_objects, tmp_path_factory):
    objects = [obj for _path, obj in rendered_objects]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["namespace"] for p in policies} == set(netpol_table.TEAMS.values())
    # the probe carries the labels a tenant's worker gets from training_stack's PyTorchJob template
    template = next(o for o in objects if o["kind"] == "PyTorchJob")
    labels = template["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    resources = [o for o in objects if o["kind"] == "Namespace" or o["kind"] in POD_KINDS]
    resources += CLUSTER_STAND_INS + tenant_probes(sorted(netpol_table.TEAMS.values()), labels)
    return analyze(
        resources,
        {
            "rendered": policies,
            "without-vision-dns": [p for p in policies if p["metadata"]["name"] != "vision-allow-dns"],
            "vision-language-opened": _widened(policies, ("vision", "language")),
            "mlflow-mislabelled": _mislabelled(policies),
        },
        tmp_path_factory.mktemp("nca"),
    )


def _tenant_rows(connections: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    tenants = tuple(f"{namespace}/" for namespace in netpol_table.TEAMS.values())
    return {row for row in connections if row[0].startswith(tenants) or row[1].startswith(tenants)}


def _difference(connections: set[tuple[str, str, str]]) -> dict[str, list]:
    wanted = set().union(*(netpol_table.tenant_connections(ns) for ns in netpol_table.TEAMS.values()))
    found = _tenant_rows(connections)
    return {"too many": sorted(found - wanted), "missing": sorted(wanted - found)}


def test_tenants_reach_only_dns_mlflow_nfs_and_the_named_endpoints(verdict):
    """Every connection with a tenant's pod at one end is in the hand-written table (tests/netpol_table.py), and
    every row of the table is a connection: no tenant reaches another, nor anything the table does not name."""
    assert _difference(verdict.connections["rendered"]) == {"too many": [], "missing": []}


def test_no_tenant_reaches_another(verdict):
    crossing = [
        (src, dst)
        for src, dst, _ports in verdict.connections["rendered"]
        if src.split("/")[0] in netpol_table.TEAMS.values()
        and dst.split("/")[0] in netpol_table.TEAMS.values()
        and src.split("/")[0] != dst.split("/")[0]
    ]
    own = [
        (src, dst)
        for src, dst, _ports in verdict.connections["rendered"]
        if src.startswith("team-vision/") and dst.startswith("team-vision/")
    ]
    assert crossing == []
    assert own, "the probe's two pods must reach each other, or the cross-tenant check proved nothing"


def test_the_check_can_fail(verdict):
    """A copy without vision's DNS allow loses exactly vision's DNS rows; a copy where two teams open their
    allow-same-namespace to every namespace gives connections from one team to the other."""
    assert _difference(verdict.connections["without-vision-dns"]) == {
        "too many": [],
        "missing": sorted(
            (f"team-vision/probe-{i}", netpol_table.DNS, "{protocols:TCP, UDP,dst_ports:53}") for i in (1, 2)
        ),
    }
    opened = _difference(verdict.connections["vision-language-opened"])
    assert ("team-language/probe-1", "team-vision/probe-1", netpol_table.EVERY_PORT) in opened["too many"]
    assert ("team-vision/probe-1", "team-language/probe-1", netpol_table.EVERY_PORT) in opened["too many"]


def test_analyzer_warnings_are_the_known_ones(verdict):
    """nca's sanity findings on the rendered set and its parser warnings, exactly (a new one fails here)."""
    assert set(verdict.sanity) == EXPECTED_SANITY
    assert len(verdict.sanity) == len(EXPECTED_SANITY)
    assert sorted(verdict.warnings) == sorted(EXPECTED_WARNINGS)


def test_tenants_reach_mlflow_on_the_port_its_service_sends_to(rendered_objects, verdict):
    """The MLflow pod nca lets tenants reach is training_stack's Deployment, on the port behind the Service."""
    objects = [obj for path, obj in rendered_objects if path.startswith("training_stack/")]
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "mlflow")
    service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "mlflow")
    target = service["spec"]["ports"][0].get("targetPort", service["spec"]["ports"][0]["port"])
    ports = {
        p["name"]: p["containerPort"]
        for c in deployment["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }
    assert ports.get(target, target) == netpol_table.MLFLOW_PORT
    assert f"{deployment['metadata']['namespace']}/{deployment['metadata']['name']}-1" == netpol_table.MLFLOW
    to_mlflow = {row for row in verdict.connections["rendered"] if row[1] == netpol_table.MLFLOW}
    assert (
        "team-speech/probe-1",
        netpol_table.MLFLOW,
        f"{{protocols:TCP,dst_ports:{netpol_table.MLFLOW_PORT}}}",
    ) in to_mlflow
