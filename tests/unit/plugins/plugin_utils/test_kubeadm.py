"""kubeadm sections kube_control_plane and kube_join both render (plugin_utils/kube_plan.py kubeadm_registration)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_plan

GPU_NODE = {
    "labels": {"nvidia.com/gpu": "true", "gpuops.io/pool": "training"},
    "annotations": {"gpuops.io/kubelet-policy": "training pool: restricted"},
    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
}


def test_gpu_node_registers_tainted_with_its_labels_as_kubelet_flags() -> None:
    assert kube_plan.kubeadm_registration("gpu-01", GPU_NODE) == {
        "name": "gpu-01",
        "criSocket": "unix:///run/containerd/containerd.sock",
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "kubeletExtraArgs": [{"name": "node-labels", "value": "nvidia.com/gpu=true,gpuops.io/pool=training"}],
    }


def test_node_without_labels_has_no_kubelet_flags() -> None:
    section = kube_plan.kubeadm_registration("cpu-01", {"labels": {}, "annotations": {}, "taints": []})
    assert section == {"name": "cpu-01", "criSocket": "unix:///run/containerd/containerd.sock", "taints": []}


@pytest.mark.parametrize(
    "registration", [None, {}, {"labels": {}}]
)
def test_unusable_registration_is_refused_with_the_fix(registration) -> None:
    with pytest.raises(ValueError, match=r"registration of cpu-01 is"):
        kube_plan.kubeadm_registration("cpu-01", registration)
