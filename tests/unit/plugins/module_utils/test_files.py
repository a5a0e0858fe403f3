"""The one atomic file writer (module_utils/_files.py), used by file_set, write_objects and the preflight reports:
the mode of every directory it makes, no rewrite of an unchanged file, an atomic replace of a changed one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils._files import put
from ansible_collections.gpuops.cluster.plugins.plugin_utils import preflight_report


@pytest.fixture(autouse=True)
def umask_022():
    """The usual umask, which os.makedirs applied to the parents it made (0755 over a 0750 report folder)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mode", "directory_mode"), [(0o640, 0o750), (0o644, 0o755), (0o600, 0o700)])
def test_every_missing_directory_gets_the_mode_and_an_existing_one_is_left(tmp_path, mode, directory_mode):
    keep = tmp_path / "keep"
    keep.mkdir(mode=0o711)
    path = keep / "reports" / "run" / "plan.json"
    assert put(path, "{}\n", mode) is True
    assert [_mode(d) for d in (keep / "reports", keep / "reports" / "run")] == [directory_mode, directory_mode]
    assert (_mode(keep), _mode(path), path.read_text()) == (0o711, mode, "{}\n")


def test_the_preflight_plan_and_reports_make_their_missing_folders_0750(tmp_path):
    """Their files name hosts and people (0640): the report folder and the run folder under it are 0750 both."""
    reports = tmp_path / "reports"
    preflight_report.write_plan({"schema_version": 1}, str(reports / "20260101T000000Z"))
    preflight_report.write_reports(str(tmp_path / "other" / "run"), {}, {})
    run, other = reports / "20260101T000000Z", tmp_path / "other"
    assert [oct(_mode(d)) for d in (reports, run, other, other / "run")] == ["0o750"] * 4
    assert [oct(_mode(f)) for f in (run / "plan.json", other / "run" / "fleet.json")] == ["0o640"] * 2


def test_an_unchanged_file_is_not_rewritten_and_a_changed_one_is_replaced_atomically(tmp_path):
    path = tmp_path / "objects" / "configmap-c.yaml"
    put(path, "a: 1\n", 0o644)
    first = path.stat()
    assert put(path, "a: 1\n", 0o644) is False
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    with path.open(encoding="utf-8") as reader:  # opened before the replace: it keeps reading the old file
        assert put(path, "a: 2\n", 0o644) is True
        assert reader.read() == "a: 1\n"
    assert path.stat().st_ino != first.st_ino, "a new file renamed over the old one, not the old one rewritten"
    assert (path.read_text(), sorted(p.name for p in path.parent.iterdir())) == ("a: 2\n", ["configmap-c.yaml"])
    path.chmod(0o666)
    second = path.stat()
    assert put(path, "a: 2\n", 0o644) is True, "the same text with another mode is fixed"
    assert oct(_mode(path)) == "0o644"
    assert path.stat().st_ino == second.st_ino, "only its mode changed (chmod), the file was not rewritten"


def test_check_writes_nothing(tmp_path):
    path = tmp_path / "new" / "plan.json"
    assert put(path, "{}\n", 0o640, check=True) is True
    assert not (tmp_path / "new").exists()
