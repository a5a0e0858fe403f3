"""The worked inventory's (inventories/cluster) network table, as the connections nca (tests/nca.py) must list.

Written by hand from the issue's list of allows (DNS, the team's own pods, MLflow, the NFS servers and endpoints
the inventory names, monitoring's scrape) and the inventory's addresses (group_vars/k8s_cluster/addons.yml:
kube_tenancy_nfs_servers, kube_tenancy_egress_endpoints), not from our code. Every connection that has a tenant's
pod at one end is listed; nca must report exactly these, so a tenant reaching another tenant, the internet, the
Kubernetes API, another kube-system pod, another port, or being reached from outside its namespace and monitoring,
is a connection too many.

Names are nca's: ``<namespace>/<pod>`` for pods (a workload's pods are ``<workload>-1``, ``-2``), the address for an
ipBlock, and its connection text.
"""

from __future__ import annotations

# gpuops_teams of inventories/cluster/group_vars/all/team.yml -> namespace
TEAMS = {"vision": "team-vision", "language": "team-language", "speech": "team-speech", "serving": "serving"}
NFS = "192.0.2.50"  # kube_tenancy_nfs_servers
OBJECT_STORE = "192.0.2.60"  # kube_tenancy_egress_endpoints[0] (object-store), TCP 443
DNS = "kube-system/coredns-1"
MLFLOW = "mlflow/mlflow-1"
MLFLOW_PORT = 5000
PROMETHEUS = "monitoring/prometheus-kube-prometheus-stack-prometheus-1"
EVERY_PORT = "All connections"


def tenant_connections(namespace: str) -> set[tuple[str, str, str]]:
    """(source, destination, connection) with a pod of ``namespace``'s probe (two pods) at one end."""
    pods = (f"{namespace}/probe-1", f"{namespace}/probe-2")
    rows = set()
    for me, other in (pods, pods[::-1]):
        rows |= {
            (me, other, EVERY_PORT),  # the team's own pods: NCCL, notebooks
            (me, DNS, "{protocols:TCP, UDP,dst_ports:53}"),
            (me, MLFLOW, f"{{protocols:TCP,dst_ports:{MLFLOW_PORT}}}"),
            (me, NFS, "{protocols:TCP,dst_ports:2049}"),  # NFSv4 only: no portmapper
            (me, OBJECT_STORE, "{protocols:TCP,dst_ports:443}"),
            (PROMETHEUS, me, EVERY_PORT),  # monitoring scrapes
        }
    return rows


# per namespace, the policies the issue asks for: default-deny both ways plus exactly these allows
POLICIES = {
    "default-deny-ingress",
    "default-deny-egress",
    "allow-same-namespace",
    "allow-monitoring",
    "allow-dns",
    "allow-mlflow",
    "allow-nfs",
    "allow-endpoints",
}
