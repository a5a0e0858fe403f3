# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The kubeadm configuration section both kube_control_plane and kube_join render:

* ``registration | gpuops.cluster.kubeadm_node_registration(name)``: a node's ``nodeRegistration``.

Thin: the logic lives in plugins/plugin_utils/kubeadm.py; documentation in the .yml file next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

kubeadm = lazy("kubeadm")


def kubeadm_node_registration(registration: object, name: object) -> dict:
    try:
        return kubeadm.node_registration(str(name), registration)  # type: ignore[arg-type]
    except ValueError as exc:
        raise AnsibleFilterError(f"kubeadm_node_registration: {exc}") from exc


class FilterModule:
    """gpuops.cluster kubeadm configuration filters."""

    def filters(self) -> dict:
        return {
            "kubeadm_node_registration": kubeadm_node_registration,
        }
