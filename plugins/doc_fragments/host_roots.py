# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Options shared by the modules that read /sys and /proc: hidden roots, so tests can point them at a tree."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  _sysfs_root:
    description:
      - Internal, for tests only. Root of the sysfs tree read instead of C(/sys).
    type: path
    default: /sys
  _proc_root:
    description:
      - Internal, for tests only. Root of the procfs tree read instead of C(/proc).
    type: path
    default: /proc
"""
