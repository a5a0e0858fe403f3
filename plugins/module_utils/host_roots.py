# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Argument spec of the hidden /sys and /proc roots (documented by the doc fragment gpuops.cluster.host_roots)."""

from __future__ import annotations

HOST_ROOTS_ARGS = {
    "_sysfs_root": {"type": "path", "default": "/sys"},
    "_proc_root": {"type": "path", "default": "/proc"},
}
