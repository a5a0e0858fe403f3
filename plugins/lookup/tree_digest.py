# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Lookup plugin: SHA-256 of a directory tree on the controller (what a build copies, digested in one step)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tree_digest
author:
  - gpuops.cluster maintainers (@gpuops)
version_added: "0.2.0"
short_description: SHA-256 of a directory tree on the controller
description:
  - Digests every file under each given directory - relative path, permission bits, size and content, in sorted
    order. An edit, a rename or a chmod changes the digest; timestamps and owners do not.
  - Lets a role tell, in one controller-side step, whether what it would copy to a host changed since the last
    run (C(training_image) labels its image with the digest of its build inputs and skips the build context and
    the build when the image already carries it).
options:
  _terms:
    description: Directories on the controller.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Digest of the code that goes into the image
  ansible.builtin.debug:
    msg: "{{ lookup('gpuops.cluster.tree_digest', '/srv/team/code') }}"
"""

RETURN = r"""
_raw:
  description: One hex SHA-256 per directory, in the order given.
  type: list
  elements: str
"""

import hashlib
import os
import stat

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def tree_digest(root: str) -> str:
    """Hex digest of the tree under root (path, mode bits, size, content; see DOCUMENTATION)."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} is not a directory")
    digest = hashlib.sha256()
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(current, name)
            info = os.stat(path)
            digest.update(f"{os.path.relpath(path, root)}\0{stat.S_IMODE(info.st_mode):o}\0{info.st_size}\0".encode())
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
    return digest.hexdigest()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        out = []
        for term in terms:
            try:
                out.append(tree_digest(str(term)))
            except OSError as exc:
                raise AnsibleLookupError(f"tree_digest: cannot digest {term}: {exc}") from exc
        return out
