"""local_pv module: main() reports problems as an answer, fails on them when asked, and refuses bad parameters."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import local_pv as module
from local_pv_tree import Tree
from module_helpers import run_main


@pytest.fixture
def tree(tmp_path) -> Tree:
    return Tree(tmp_path)


def test_module_reports_problems_without_failing(tree, capsys):
    tree.volume("vol1")  # a plain directory
    tree.check()  # writes proc/self/mountinfo
    args = {"path": str(tree.disks), "_proc_root": str(tree.tmp / "proc"), "_sysfs_root": str(tree.tmp / "sys")}
    code, result = run_main(module, {**args, "_ansible_check_mode": True}, capsys)
    assert (code, result["changed"], result["ok"]) == (0, False, False)
    assert result["volumes"][0]["problems"][0].startswith("not a mount point")
    code, result = run_main(module, {**args, "fail_on_problems": True}, capsys)
    assert (code, result["failed"]) == (1, True)
    assert result["msg"].startswith(f"0 of 1 local volume(s) under {tree.disks} are usable; problems: ")


def test_module_ok_with_real_statvfs(tree, capsys):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")
    tree.check()
    code, result = run_main(
        module, {"path": str(tree.disks), "min_free_gib": 0, "_proc_root": str(tree.tmp / "proc")}, capsys
    )
    assert (code, result["ok"], result["volumes"][0]["fstype"]) == (0, True, "xfs")
    assert result["volumes"][0]["size"] > 0  # measured on tmp_path's real filesystem


def test_module_fails_on_bad_parameters(capsys):
    code, result = run_main(module, {"min_free_gib": -1}, capsys)
    assert (code, result["failed"]) == (1, True)
    assert result["msg"] == "min_free_gib is -1; expected 0 or more GiB"
