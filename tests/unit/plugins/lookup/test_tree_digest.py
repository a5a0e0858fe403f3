"""plugins/lookup/tree_digest.py: an edit, a rename or a chmod changes a tree's digest; a timestamp does not."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleLookupError
from ansible_collections.gpuops.cluster.plugins.lookup.tree_digest import LookupModule


def _digest(root) -> str:
    return LookupModule().run([str(root)])[0]


def test_what_changes_the_digest(tmp_path):
    (tmp_path / "sub").mkdir()
    code = tmp_path / "sub" / "train.py"
    code.write_text("print(1)\n")
    first = _digest(tmp_path)
    os.utime(code, (0, 0))
    assert _digest(tmp_path) == first
    code.chmod(0o755)
    chmodded = _digest(tmp_path)
    assert chmodded != first
    code.write_text("print(2)\n")
    edited = _digest(tmp_path)
    assert edited != chmodded
    code.rename(tmp_path / "sub" / "run.py")
    assert _digest(tmp_path) not in (first, chmodded, edited)


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(AnsibleLookupError, match="cannot digest"):
        LookupModule().run([str(tmp_path / "absent")])
