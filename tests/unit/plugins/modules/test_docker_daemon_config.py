"""docker_daemon_config module: main() on a real file in tmp_path - merge, backup, idempotence, check mode and diff,
validation by a dockerd stand-in, and a file that is not JSON kept byte for byte.

The dockerd here is a LABELLED STAND-IN (a shell script written by the test): it records its arguments and answers
``--validate`` like Docker >= 23 (accepts, or rejects a config holding "bad-key") or like 20.10 (unknown flag).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import docker_daemon_config as module
from module_helpers import run_main

FILE_MODE = 0o644
KEPT_MODE = 0o600
NVIDIA = {"nvidia": {"path": "nvidia-container-runtime", "args": []}}


def stand_in_dockerd(tmp_path: Path, *, old: bool = False) -> Path:
    """A dockerd stand-in: logs its LC_ALL and argv to dockerd.log; --validate is refused on 'bad-key' (or
    unknown when old)."""
    script = tmp_path / ("dockerd-20.10-stand-in" if old else "dockerd-26-stand-in")
    answer = ('echo "unknown flag: --validate" >&2; exit 125' if old else
              'if grep -q bad-key "$3"; then echo "unknown directive: bad-key" >&2; exit 1; fi\n'
              'echo "configuration OK"')
    script.write_text(f'#!/bin/sh\necho "LC_ALL=$LC_ALL $@" >>{tmp_path}/dockerd.log\n{answer}\n')
    script.chmod(0o755)
    return script


@pytest.fixture
def daemon_json(tmp_path) -> Path:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"runtimes": NVIDIA, "log-opts": {"max-size": "10m"}}, indent=4))
    return path


def leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".daemon.json."))


def test_merge_keeps_other_keys_backs_up_validates_and_is_idempotent(tmp_path, daemon_json, capsys):
    dockerd = stand_in_dockerd(tmp_path)
    before = daemon_json.read_text()
    args = {"path": str(daemon_json), "dockerd": str(dockerd),
            "config": {"live-restore": True, "log-opts": {"max-file": "5"}}}
    code, result = run_main(module, args, capsys)
    assert (code, result["changed"], result["validated_by"], result["validation"]) == (0, True, "dockerd",
                                                                                       "configuration OK")
    written = json.loads(daemon_json.read_text())
    assert written == {"runtimes": NVIDIA, "log-opts": {"max-size": "10m", "max-file": "5"}, "live-restore": True}
    assert written == result["config"]
    assert Path(result["backup_file"]).read_text() == before
    assert stat.S_IMODE(daemon_json.stat().st_mode) == FILE_MODE
    [validated] = (tmp_path / "dockerd.log").read_text().splitlines()
    locale, flag, option, candidate = validated.split()
    assert (locale, flag, option, os.path.dirname(candidate)) == ("LC_ALL=C", "--validate", "--config-file",
                                                                  str(daemon_json.parent))
    assert leftovers(daemon_json) == []

    code, again = run_main(module, args, capsys)
    assert (code, again["changed"]) == (0, False)
    assert "backup_file" not in again
    assert len([p for p in daemon_json.parent.iterdir() if p.name != "daemon.json"]) == 1, "a second backup"


def test_check_mode_with_diff_writes_nothing(tmp_path, daemon_json, capsys):
    before = daemon_json.read_bytes()
    args = {"path": str(daemon_json), "config": {"log-opts": None, "data-root": "/data/docker"},
            "_ansible_check_mode": True, "_ansible_diff": True}
    code, result = run_main(module, args, capsys)
    assert (code, result["changed"]) == (0, True)
    assert daemon_json.read_bytes() == before
    assert json.loads(result["diff"]["after"]) == {"runtimes": NVIDIA, "data-root": "/data/docker"}
    assert "max-size" in result["diff"]["before"]
    assert sorted(p.name for p in daemon_json.parent.iterdir()) == ["daemon.json"]
    assert not (tmp_path / "dockerd.log").exists()


def test_rejected_by_dockerd_leaves_the_file_and_no_candidate(tmp_path, daemon_json, capsys):
    before = daemon_json.read_bytes()
    args = {"path": str(daemon_json), "dockerd": str(stand_in_dockerd(tmp_path)), "config": {"bad-key": 1}}
    code, result = run_main(module, args, capsys)
    assert (code, result["failed"], result["changed"]) == (1, True, False)
    assert result["msg"].startswith(f"dockerd rejects the merged {daemon_json}: unknown directive: bad-key")
    assert daemon_json.read_bytes() == before
    assert leftovers(daemon_json) == []


def test_old_dockerd_falls_back_to_the_builtin_check(tmp_path, daemon_json, capsys):
    args = {"path": str(daemon_json), "dockerd": str(stand_in_dockerd(tmp_path, old=True)),
            "config": {"default-runtime": "missing"}}
    code, result = run_main(module, args, capsys)
    assert (code, result["validated_by"]) == (1, "builtin")
    assert "older than 23.0, so checked without --validate" in result["msg"]
    assert "missing" in result["msg"]


def test_missing_dockerd_is_named(tmp_path, daemon_json, capsys):
    args = {"path": str(daemon_json), "dockerd": "no-such-dockerd-here", "config": {"live-restore": True}}
    code, result = run_main(module, args, capsys)
    assert code == 1
    assert "dockerd ('no-such-dockerd-here') not found on the PATH" in result["msg"]
    assert "set validate: false" in result["msg"]


@pytest.mark.parametrize("invalid", ["fail", "replace"])
def test_invalid_file_is_kept_byte_for_byte(tmp_path, capsys, monkeypatch, invalid):
    # Where a warning goes depends on what the process imported before (controller code prints it), so record it.
    warned: list[str] = []
    monkeypatch.setattr(module.AnsibleModule, "warn", lambda self, text, *a, **k: warned.append(text))
    path = tmp_path / "daemon.json"
    broken = b'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}} "oops"\n'
    path.write_bytes(broken)
    args = {"path": str(path), "validate": False, "invalid": invalid, "config": {"live-restore": True}}
    code, result = run_main(module, args, capsys)
    kept = Path(result["invalid_backup"])
    assert kept.read_bytes() == broken
    assert kept.name.startswith("daemon.json.gpuops-invalid-")
    assert stat.S_IMODE(kept.stat().st_mode) == KEPT_MODE
    assert "not valid JSON (line 1" in result["invalid_reason"]
    if invalid == "fail":
        assert (code, result["failed"], result["changed"]) == (1, True, True)
        assert path.read_bytes() == broken
        assert warned == []
        code, again = run_main(module, args, capsys)
        assert (code, again["changed"], again["invalid_backup"]) == (1, False, str(kept))
    else:
        assert (code, result["changed"]) == (0, True)
        assert json.loads(path.read_text()) == {"live-restore": True}
        [warning] = warned
        assert f"it was backed up byte for byte to {kept}" in warning
        assert "replaced by a configuration holding only the given settings" in warning
