"""file_set module: a set of files under one directory, compared and written in one call, on a real tmp directory.

Run as root here (owners are set with chown); the uids and gids 4242 and 4343 need no user of that id.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import file_set as module
from module_helpers import run_main

SECRET = "grafana-admin-password-s3cr3t-32chars"
FILES = [
    {"path": "compose.yaml", "content": "services: {}\n"},
    {"path": "prometheus/rules/gpu.yml", "content": "groups: []\n"},
    {"path": "secrets/grafana_admin_password", "content": SECRET, "mode": "0600", "owner": 4242, "group": "4343"},
]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def args(dest, **more) -> dict:
    return {"dest": str(dest), "files": FILES, "owner": "root", "group": "0", "mode": "0644",
            "directory_mode": "0750", **more}


def state(path) -> tuple:
    found = os.stat(path)
    return stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid, found.st_ino, found.st_mtime_ns


def test_first_run_writes_every_file_with_its_mode_and_owner_then_a_second_run_touches_nothing(tmp_path, capsys):
    dest = tmp_path / "stack"
    code, result = run_main(module, args(dest), capsys)
    assert (code, result["changed"], result["removed"]) == (0, True, [])
    assert result["written"] == [str(dest / f["path"]) for f in FILES]
    assert (dest / "prometheus/rules/gpu.yml").read_text() == "groups: []\n"
    assert state(dest / "compose.yaml")[:3] == (0o644, 0, 0)
    assert state(dest / "secrets/grafana_admin_password")[:3] == (0o600, 4242, 4343)
    # the directories it made (dest too) have directory_mode, whatever the umask
    assert {stat.S_IMODE(os.stat(d).st_mode) for d in (dest, dest / "prometheus", dest / "prometheus/rules")} == {0o750}
    before = {f["path"]: state(dest / f["path"]) for f in FILES}
    code, result = run_main(module, args(dest), capsys)
    assert (code, result["changed"], result["written"], result["removed"]) == (0, False, [], [])
    assert {f["path"]: state(dest / f["path"]) for f in FILES} == before  # same inode and mtime


def test_a_mode_or_owner_difference_alone_fixes_just_that_file(tmp_path, capsys):
    run_main(module, args(tmp_path), capsys)
    os.chmod(tmp_path / "compose.yaml", 0o666)
    os.chown(tmp_path / "secrets/grafana_admin_password", 0, 0)
    untouched = state(tmp_path / "prometheus/rules/gpu.yml")
    code, result = run_main(module, args(tmp_path), capsys)
    assert (code, result["changed"]) == (0, True)
    assert result["written"] == [str(tmp_path / "compose.yaml"), str(tmp_path / "secrets/grafana_admin_password")]
    assert state(tmp_path / "compose.yaml")[:3] == (0o644, 0, 0)
    assert state(tmp_path / "secrets/grafana_admin_password")[:3] == (0o600, 4242, 4343)
    assert state(tmp_path / "prometheus/rules/gpu.yml") == untouched


def test_a_content_difference_replaces_the_file(tmp_path, capsys):
    run_main(module, args(tmp_path), capsys)
    (tmp_path / "compose.yaml").write_text("services: {old: {}}\n")
    inode = state(tmp_path / "compose.yaml")[3]
    code, result = run_main(module, args(tmp_path), capsys)
    assert (code, result["written"]) == (0, [str(tmp_path / "compose.yaml")])
    assert (tmp_path / "compose.yaml").read_text() == "services: {}\n"
    assert state(tmp_path / "compose.yaml")[3] != inode  # a new file renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compose.yaml", "prometheus", "secrets"]  # no temp file left


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    dest = tmp_path / "stack"
    code, result = run_main(module, {**args(dest), "_ansible_check_mode": True}, capsys)
    assert (code, result["changed"], len(result["written"])) == (0, True, 3)
    assert not dest.exists()
    run_main(module, args(dest), capsys)
    os.chmod(dest / "compose.yaml", 0o600)
    (dest / "prometheus/rules/old.yml").write_text("groups: []\n")
    before = state(dest / "compose.yaml")
    code, result = run_main(module, {**args(dest, prune=["prometheus/rules"]), "_ansible_check_mode": True}, capsys)
    assert (result["changed"], result["written"], result["removed"]) == (
        True, [str(dest / "compose.yaml")], [str(dest / "prometheus/rules/old.yml")])
    assert state(dest / "compose.yaml") == before
    assert (dest / "prometheus/rules/old.yml").exists()


def test_prune_removes_only_unshipped_files_directly_in_the_named_directories(tmp_path, capsys):
    run_main(module, args(tmp_path), capsys)
    keep = ["prometheus/prometheus.yml", "prometheus/rules/.hidden", "prometheus/rules/nested/x.yml", "other.yml",
            "grafana/dashboards/x.json"]
    for path in [*keep, "prometheus/rules/old.yml", "prometheus/rules/older.yml"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x: 1\n")
    code, result = run_main(module, args(tmp_path, prune=["prometheus/rules", "missing/dir"]), capsys)
    assert (code, result["changed"], result["written"]) == (0, True, [])
    assert result["removed"] == [str(tmp_path / "prometheus/rules" / name) for name in ("old.yml", "older.yml")]
    assert all((tmp_path / path).exists() for path in [*keep, "prometheus/rules/gpu.yml"])
    assert not (tmp_path / "prometheus/rules/old.yml").exists()


def test_absent_paths_are_removed_when_present(tmp_path, capsys):
    run_main(module, args(tmp_path), capsys)
    (tmp_path / "compose.no-gpu.yaml").write_text("services: {}\n")
    code, result = run_main(module, args(tmp_path, absent=["compose.no-gpu.yaml"]), capsys)
    assert (code, result["changed"], result["removed"]) == (0, True, [str(tmp_path / "compose.no-gpu.yaml")])
    assert not (tmp_path / "compose.no-gpu.yaml").exists()
    code, result = run_main(module, args(tmp_path, absent=["compose.no-gpu.yaml"]), capsys)
    assert (code, result["changed"], result["removed"]) == (0, False, [])


@pytest.mark.parametrize("bad", ["../etc/passwd", "prometheus/../../x", "/etc/passwd", "a//b", ""])
def test_a_path_that_leaves_dest_is_refused_naming_it(tmp_path, capsys, bad):
    files = [*FILES, {"path": bad, "content": "x: 1\n"}]
    code, result = run_main(module, {**args(tmp_path / "stack"), "files": files}, capsys)
    assert (code, result["failed"]) == (1, True)
    assert result["msg"].startswith(f"file_set: path {bad!r} is absolute, empty or not normal")
    assert not (tmp_path / "stack").exists()
    code, result = run_main(module, {**args(tmp_path / "stack"), "prune": [bad]}, capsys)
    assert (code, repr(bad) in result["msg"]) == (1, True)


def test_content_is_never_returned_echoed_nor_logged(tmp_path, capsys, monkeypatch):
    """The result (its invocation echo included, which -vvv shows) and the host's journal line name the files and
    hold no content (Ansible's own journal line would hold multi-line content, repr-escaped, unmasked)."""
    logged = []
    monkeypatch.setattr(module.AnsibleModule, "log", lambda _self, msg, log_args=None: logged.append(msg))
    code, result = run_main(module, args(tmp_path), capsys)
    assert logged == [f"Invoked with dest={tmp_path} paths={[f['path'] for f in FILES]}"]
    text = json.dumps(result)
    assert (code, SECRET in text, "services: {}" in text) == (0, False, False)
    echoed = {f["content"] for f in result["invocation"]["module_args"]["files"]}
    assert echoed == {"VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}


def test_bad_mode_owner_or_twice_the_same_path_are_refused(tmp_path, capsys):
    code, result = run_main(module, {**args(tmp_path), "mode": "644"}, capsys)
    assert (code, result["msg"]) == (1, "file_set: mode '644' is not a quoted octal file mode such as '0644'")
    code, result = run_main(module, {**args(tmp_path), "owner": "no-such-user-here"}, capsys)
    assert (code, "'no-such-user-here'" in result["msg"]) == (1, True)
    code, result = run_main(module, {**args(tmp_path), "files": [*FILES, FILES[0]]}, capsys)
    assert (code, result["msg"]) == (1, "file_set: path 'compose.yaml' is given twice; expected each file once")
    assert list(tmp_path.iterdir()) == []
