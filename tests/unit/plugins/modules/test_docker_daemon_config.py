"""docker_daemon_config module: main() on a real file in tmp_path - merge, backup, idempotence, check mode and diff,
validation by a dockerd stand-in, the built-in check for a dockerd older than 23.0, and a file that is not JSON
(or not UTF-8) kept byte for byte.

The dockerd here is a LABELLED STAND-IN (a shell script written by the test): it records its LC_ALL and arguments and
answers ``--validate`` like Docker >= 23 (accepts, or rejects a config holding "bad-key") or as Debian 12's 20.10.24
does (its recorded answer, docker_daemon_samples.DOCKERD_20_10_ANSWER). The real dockerd is exercised by the
Molecule scenarios: compose (Docker 26) and driver (Docker 20.10 and 26).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import docker_daemon_samples as samples
import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import invalid_backup_path, render
from ansible_collections.gpuops.cluster.plugins.modules import docker_daemon_config as module
from module_helpers import run_main

FILE_MODE = 0o644
KEPT_MODE = 0o600
NVIDIA = {"nvidia": {"path": "nvidia-container-runtime", "args": []}}


def stand_in_dockerd(tmp_path: Path, *, old: bool = False) -> Path:
    """A dockerd stand-in: logs its LC_ALL and argv to dockerd.log; --validate is refused on 'bad-key' (or
    unknown when old)."""
    script = tmp_path / ("dockerd-20.10-stand-in" if old else "dockerd-26-stand-in")
    answer = (f'printf "%s" "{samples.DOCKERD_20_10_ANSWER}" >&2; exit 1' if old else
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
    assert "the file was left unchanged" in result["msg"]
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
        assert f"{path} is not valid JSON" in result["msg"]
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


def test_a_missing_file_is_created_without_validation_or_backup(tmp_path, capsys):
    target = tmp_path / "new" / "daemon.json"
    code, result = run_main(module, {"path": str(target), "config": samples.OURS, "validate": False}, capsys)
    assert (code, result["changed"]) == (0, True)
    assert json.loads(target.read_text()) == samples.OURS
    assert "backup_file" not in result
    assert render(samples.OURS) == target.read_text()


def test_a_file_that_is_not_utf8_is_backed_up_once_and_left_in_place(tmp_path, capsys):
    target = tmp_path / "daemon.json"
    target.write_bytes(samples.NOT_UTF8)
    backup = Path(invalid_backup_path(str(target), samples.NOT_UTF8))
    args = {"path": str(target), "config": samples.NVIDIA, "dockerd": str(stand_in_dockerd(tmp_path))}

    code, checked = run_main(module, {**args, "_ansible_check_mode": True}, capsys)
    assert (code, checked["failed"]) == (1, True)
    assert "check mode: nothing written" in checked["msg"]
    assert not backup.exists()

    code, result = run_main(module, args, capsys)
    assert (code, result["failed"]) == (1, True)
    assert result["changed"] is True, "the backup is a change"
    assert str(backup) in result["msg"], "the failure must name the backup"
    assert result["invalid_backup"] == str(backup)
    assert "not UTF-8 text" in result["msg"]
    assert "invalid: replace" in result["msg"]
    assert backup.read_bytes() == samples.NOT_UTF8
    assert stat.S_IMODE(backup.stat().st_mode) == KEPT_MODE
    assert target.read_bytes() == samples.NOT_UTF8, "fail mode must leave the file alone"

    code, again = run_main(module, args, capsys)
    assert (code, again["failed"]) == (1, True)
    assert again["changed"] is False, "the same broken file is not backed up twice"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("daemon.json")) == [
        "daemon.json", backup.name]


def test_a_truncated_file_is_replaced_when_asked(tmp_path, capsys, monkeypatch):
    warned: list[str] = []  # recorded, as in test_invalid_file_is_kept_byte_for_byte
    monkeypatch.setattr(module.AnsibleModule, "warn", lambda self, text, *a, **k: warned.append(text))
    target = tmp_path / "daemon.json"
    target.write_bytes(samples.TRUNCATED)
    args = {"path": str(target), "config": samples.NVIDIA, "dockerd": str(stand_in_dockerd(tmp_path)),
            "invalid": "replace"}

    code, checked = run_main(module, {**args, "_ansible_check_mode": True, "_ansible_diff": True}, capsys)
    assert (code, checked["changed"]) == (0, True)
    assert checked["diff"]["before"] == samples.TRUNCATED.decode()
    assert target.read_bytes() == samples.TRUNCATED

    warned.clear()
    code, result = run_main(module, args, capsys)
    assert (code, result["changed"]) == (0, True), result
    assert json.loads(target.read_text()) == samples.NVIDIA, "only the given settings, nothing from the broken file"
    assert Path(result["invalid_backup"]).read_bytes() == samples.TRUNCATED
    assert "line 1, column" in result["invalid_reason"]
    assert "backup_file" not in result, "no usable previous file to roll back to"
    [warning] = warned
    assert "invalid: replace" in warning

    assert run_main(module, args, capsys)[1]["changed"] is False


def test_a_dockerd_20_10_gets_the_builtin_check_of_runtimes_and_types(tmp_path, capsys):
    runtime = tmp_path / "nvidia-container-runtime"
    runtime.write_text('#!/bin/sh\nexec runc "$@"\n')
    target = tmp_path / "daemon.json"
    target.write_text(samples.NVIDIA_CTK_DAEMON_JSON.replace('"nvidia-container-runtime"', f'"{runtime}"'))
    before = target.read_text()
    args = {"path": str(target), "config": {"default-runtime": "nvidia", "live-restore": True},
            "dockerd": str(stand_in_dockerd(tmp_path, old=True))}

    code, refused = run_main(module, args, capsys)
    assert (code, refused["failed"], refused["validated_by"]) == (1, True, "builtin")
    assert f"runtimes.nvidia.path {runtime} is not an executable file" in refused["msg"]
    assert "left unchanged" in refused["msg"]
    assert target.read_text() == before

    runtime.chmod(0o755)
    code, result = run_main(module, args, capsys)
    assert (code, result["changed"], result["validated_by"]) == (0, True, "builtin")
    assert "older than 23.0" in result["validation"]
    assert json.loads(target.read_text())["live-restore"] is True

    code, wrong = run_main(module, {**args, "config": {"log-opts": {"max-file": 5}}}, capsys)
    assert (code, wrong["failed"]) == (1, True)
    assert 'log-opts.max-file is 5; dockerd needs a string ("5")' in wrong["msg"]
