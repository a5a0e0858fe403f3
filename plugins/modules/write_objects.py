#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: write_objects
short_description: Write rendered Kubernetes objects for review, one YAML file per kind and name
version_added: 0.2.0
description:
  - An action plugin that runs in-process on the controller, so writing a hundred objects costs one task, not a
    hundred module runs.
  - Each object of O(objects) is written to C(<dest>/<kind>-<name>.yaml) (lower-case kind); an object without
    C(metadata.name) takes O(default_name); two objects with the same kind and name are refused.
  - Each entry of O(files) is written as is to C(<dest>/<name>) (Helm values, for example).
  - A file whose content and mode are unchanged is not rewritten; files are replaced atomically, with O(mode).
    O(dest), any missing directory above it and any under it are created, even with nothing to write, with O(mode) plus
    the search bit wherever it grants read (0644 gives 0755, 0640 gives 0750); an existing one is left as it is.
options:
  objects:
    description: Kubernetes objects, each with C(kind) and C(metadata.name) (or see O(default_name)).
    type: list
    elements: dict
    default: []
  default_name:
    description: >-
      The name in the file name of an object without C(metadata.name), such as kubeadm's and the kubelet's
      configuration kinds; usually the host they belong to. Without it such an object is refused.
    type: str
  files:
    description: >-
      Extra files, name (or a relative path of names, such as C(prometheus/prometheus.yml); never C(..)) to
      text.
    type: dict
    default: {}
  dest:
    description: Controller directory; created when missing.
    type: path
    required: true
  mode:
    description: >-
      The written files' mode, a quoted octal string with its leading zero (C("0640") for a plan or a report that
      names hosts and people).
    type: str
    default: "0644"
attributes:
  action:
    support: full
    description: Runs in the action plugin, on the controller.
  check_mode:
    support: full
    description: Reports what would be written and writes nothing.
  diff_mode:
    support: none
    description: The written files are the review copy; no diff is produced.
  idempotent:
    support: full
    description: Unchanged files are not rewritten, and then the task reports no change.
author:
  - gpuops.cluster maintainers (@gpuops)
"""

EXAMPLES = r"""
- name: Write the GPU Operator's objects and Helm values for review
  gpuops.cluster.write_objects:
    objects: "{{ gpu_operator_objects }}"
    files: "{{ gpu_operator_files }}"
    dest: "{{ render_dir }}/gpu_operator"
  delegate_to: localhost

- name: Write each node's KubeletConfiguration (no metadata.name) as kubeletconfiguration-<host>.yaml
  gpuops.cluster.write_objects:
    objects: "{{ kube_node_objects }}"
    default_name: "{{ inventory_hostname }}"
    dest: "{{ render_dir }}/kube_node"
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: Files written (or, in check mode, that would be written) by this run.
  returned: always
  type: list
  elements: str
  sample: [/tmp/render/gpu_operator/configmap-gpuops-device-plugin-config.yaml]
files:
  description: Every file this task owns, written or already up to date.
  returned: always
  type: list
  elements: str
"""
