# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The hidden /sys and /proc roots: their argument spec (documented by the doc fragment gpuops.cluster.host_roots) and
the one reader of a text file under them (gpu_facts_sysfs, host_facts, local_pv, package_lock, the health sweep)."""

from __future__ import annotations

HOST_ROOTS_ARGS = {
    "_sysfs_root": {"type": "path", "default": "/sys"},
    "_proc_root": {"type": "path", "default": "/proc"},
}


def read_text(path: str) -> str | None:
    """The text of a /sys, /proc or /etc file, stripped (undecodable bytes replaced); None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None
