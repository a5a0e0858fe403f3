# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The part of kubeadm's v1beta4 configuration that kube_control_plane's init and kube_join's join both render: a
node's ``nodeRegistration`` (filter gpuops.cluster.kubeadm_node_registration, documented in its .yml)."""

from __future__ import annotations

from collections.abc import Mapping

CRI_SOCKET = "unix:///run/containerd/containerd.sock"


def node_registration(name: str, registration: Mapping) -> dict:
    """kubeadm's ``nodeRegistration`` for node ``name`` from its registration (labels, annotations, taints).

    The labels travel as the kubelet's ``--node-labels`` (``kubeletExtraArgs``), left out when there are none.
    """
    if not isinstance(registration, Mapping) or "labels" not in registration or "taints" not in registration:
        raise ValueError(
            f"the node registration of {name} is {registration!r}: expected a mapping with labels, annotations "
            "and taints. Fix: run the kube_node role (or its render entry point, which sets kube_node_registration) "
            "on this host first"
        )
    labels, taints = registration["labels"], registration["taints"]
    section: dict = {"name": name, "criSocket": CRI_SOCKET, "taints": list(taints)}
    if labels:
        value = ",".join(f"{key}={label}" for key, label in labels.items())
        section["kubeletExtraArgs"] = [{"name": "node-labels", "value": value}]
    return section
