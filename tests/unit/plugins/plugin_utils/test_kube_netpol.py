"""Tenant network policy (plugin_utils kube_netpol through kube_tenancy.plan): the policies each team gets, an
endpoint for one team judged by IBM's network-config-analyzer (tests/nca.py), and the refusals.

What the worked inventory's policy set allows is judged on render.yml's output (tests/render/test_tenant_isolation.py),
which writes exactly what kube_tenancy.plan builds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_tenancy as kt
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import namespace_of
from nca import analyze, tenant_probes
from netpol_table import POLICIES, TEAMS

REPO = Path(__file__).resolve().parents[4]
DEFAULTS = yaml.safe_load((REPO / "roles/kube_tenancy/defaults/main.yml").read_text(encoding="utf-8"))
SHARED = yaml.safe_load((REPO / "roles/_gpuops_vars/defaults/main.yml").read_text(encoding="utf-8"))


def cluster_config() -> dict:
    """kube_tenancy's config as the role builds it for inventories/cluster (inventory over the role's defaults; the
    namespaces as the plan decides them, team.namespace_of)."""
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(REPO / "inventories" / "cluster")])
    hostvars = VariableManager(loader=loader, inventory=manager).get_vars(host=manager.get_host("cp-01"),
                                                                          include_hostvars=False)

    def var(name: str) -> object:
        return hostvars.get(f"kube_tenancy_{name}", DEFAULTS[f"kube_tenancy_{name}"])

    def shared(name: str) -> object:  # a namespace homed in _gpuops_vars
        return hostvars.get(name, SHARED[name])

    return {"teams": hostvars["gpuops_teams"], "members": {m["name"]: m for m in hostvars["gpuops_members"]},
            "gpu_nodes": [{"name": "gpu-a", "gpu_count": 24}],
            "namespaces": {t["name"]: namespace_of(t) for t in hostvars["gpuops_teams"]},
            "monitoring_namespace": shared("kube_monitoring_namespace"),
            "mlflow_namespace": shared("training_stack_mlflow_namespace"),
            **{key: var(key) for key in ("member_pvc_size", "extra_pvcs", "limit_default", "limit_default_request",
                                         "default_storage_class",
                                         "nfs_servers", "egress_endpoints")}}


@pytest.fixture(scope="module", name="policies")
def _policies() -> list[dict]:
    result = kt.plan(cluster_config())
    assert result["problems"] == []
    return [o for o in result["objects"] if o["kind"] == "NetworkPolicy"]


def test_each_team_has_exactly_the_listed_policies(policies) -> None:
    for team, namespace in TEAMS.items():
        names = {p["metadata"]["name"] for p in policies if p["metadata"]["namespace"] == namespace}
        assert names == {f"{team}-{name}" for name in POLICIES}, namespace
    deny = next(p for p in policies if p["metadata"]["name"] == "vision-default-deny-egress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    endpoints = next(p for p in policies if p["metadata"]["name"] == "vision-allow-endpoints")
    assert endpoints["metadata"]["annotations"]["gpuops.io/endpoints"] == "object-store 192.0.2.60/32"


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


def test_endpoint_for_one_team_only(tmp_path) -> None:
    """An endpoint with teams: [serving] is reachable from serving's pods only (nca's connectivity map)."""
    config = {**cluster_config(), "egress_endpoints": [
        {"name": "registry-api", "cidr": "10.0.5.7", "ports": [{"port": 443}], "teams": ["serving"]}]}
    objects = kt.plan(config)["objects"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert "vision-allow-endpoints" not in {p["metadata"]["name"] for p in policies}
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    probes = tenant_probes(sorted(TEAMS.values()), {"app": "probe"})
    verdict = analyze(namespaces + probes, {"plan": policies}, tmp_path, sanity=False)
    to_endpoint = {(src, conn) for src, dst, conn in verdict.connections["plan"] if dst == "10.0.5.7"}
    assert to_endpoint == {(f"serving/probe-{i}", "{protocols:TCP,dst_ports:443}") for i in (1, 2)}
