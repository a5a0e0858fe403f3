"""The worked inventory's (inventories/cluster) network table: from whom, to whom, on which port, allowed or not.

Written by hand from the issue's list of allows (DNS, the team's own pods, MLflow, the NFS servers and endpoints
the inventory names, monitoring's scrape) and the inventory's addresses, not from our code: tests evaluate the
policy set kube_tenancy builds (tests/unit) and the one render.yml writes (tests/render) against it with
netpol_eval.allowed.
"""

from __future__ import annotations

from itertools import permutations

from netpol_eval import External, Pod

# gpuops_teams of inventories/cluster/group_vars/all/team.yml -> namespace
TEAMS = {"vision": "team-vision", "language": "team-language", "speech": "team-speech", "serving": "serving"}
NFS = External("192.0.2.50")            # kube_tenancy_nfs_servers
OBJECT_STORE = External("192.0.2.60")   # kube_tenancy_egress_endpoints[0], TCP 443
INTERNET = External("203.0.113.9")
API_SERVER = External("192.0.2.10")     # cp-01
DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
KUBE_PROXY = Pod("kube-system", {"k8s-app": "kube-proxy"})
MLFLOW = Pod("mlflow", {"app.kubernetes.io/name": "mlflow", "app.kubernetes.io/managed-by": "gpuops"})
MLFLOW_OTHER = Pod("mlflow", {"app": "debug"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})


def worker(team: str) -> Pod:
    return Pod(TEAMS[team], {"training.kubeflow.org/job-name": f"{team}-job", "gpuops.io/team": team})


def table() -> list[tuple[str, object, object, int, str, bool]]:
    """(case, source, destination, port, protocol, allowed)."""
    rows: list[tuple[str, object, object, int, str, bool]] = []
    for team, namespace in TEAMS.items():
        me = worker(team)
        rows += [
            (f"{team}: NCCL between the job's workers", me, worker(team), 29500, "TCP", True),
            (f"{team}: own pods on any port", me, Pod(namespace, {"app": "notebook"}), 8888, "TCP", True),
            (f"{team}: DNS over UDP", me, DNS, 53, "UDP", True),
            (f"{team}: DNS over TCP", me, DNS, 53, "TCP", True),
            (f"{team}: kube-dns on another port", me, DNS, 9153, "TCP", False),
            (f"{team}: another kube-system pod on 53", me, KUBE_PROXY, 53, "UDP", False),
            (f"{team}: MLflow", me, MLFLOW, 5000, "TCP", True),
            (f"{team}: MLflow's pod on another port", me, MLFLOW, 22, "TCP", False),
            (f"{team}: another pod of MLflow's namespace", me, MLFLOW_OTHER, 5000, "TCP", False),
            (f"{team}: the NFS server", me, NFS, 2049, "TCP", True),
            (f"{team}: the NFS server's portmapper (NFSv3)", me, NFS, 111, "TCP", False),
            (f"{team}: the object store", me, OBJECT_STORE, 443, "TCP", True),
            (f"{team}: the object store on another port", me, OBJECT_STORE, 80, "TCP", False),
            (f"{team}: the internet", me, INTERNET, 443, "TCP", False),
            (f"{team}: a resolver on the internet", me, INTERNET, 53, "UDP", False),
            (f"{team}: the Kubernetes API", me, API_SERVER, 6443, "TCP", False),
            (f"monitoring scrapes {team}", PROMETHEUS, me, 9400, "TCP", True),
            (f"MLflow reaches into {team}", MLFLOW, me, 8888, "TCP", False),
            (f"the internet reaches into {team}", INTERNET, me, 22, "TCP", False),
        ]
    for one, other in permutations(TEAMS, 2):
        rows.append((f"{one} to {other}'s pods", worker(one), worker(other), 29500, "TCP", False))
    return rows


# per namespace, the policies the issue asks for: default-deny both ways plus exactly these allows
POLICIES = {"default-deny-ingress", "default-deny-egress", "allow-same-namespace", "allow-monitoring", "allow-dns",
            "allow-mlflow", "allow-nfs", "allow-endpoints"}
