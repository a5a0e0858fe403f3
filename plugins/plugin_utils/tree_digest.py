# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""SHA-256 of a directory tree on the controller: every file's relative path, mode bits and content, in sorted
order, so that a rename, a chmod or an edit changes it and nothing else does (timestamps, owners)."""

from __future__ import annotations

import hashlib
import os
import stat


def tree_digest(root: str) -> str:
    """Hex digest of the tree under root; FileNotFoundError when root is not a directory."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} is not a directory")
    digest = hashlib.sha256()
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(current, name)
            rel = os.path.relpath(path, root)
            info = os.stat(path)
            digest.update(f"{rel}\0{stat.S_IMODE(info.st_mode):o}\0{info.st_size}\0".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
    return digest.hexdigest()
