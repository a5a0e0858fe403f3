"""daemon.json merging (module_utils.docker_daemon) and the docker_daemon_config module, end to end.

The module runs as Ansible runs it (a subprocess reading ANSIBLE_MODULE_ARGS) against files in
a temporary directory, with stand-in `dockerd` scripts: one that validates like Docker >= 23, one
that answers `--validate` as Docker 20.10 does (captured from Debian 12's dockerd 20.10.24). The real
ones are exercised by the Molecule scenarios: compose (Docker 26) and driver (Docker 20.10 and 26).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import (
    DaemonConfigError,
    InvalidConfigFile,
    ValidateUnsupported,
    check_config,
    invalid_backup_path,
    load_config,
    merge,
    plan,
    render,
    validate,
    validate_candidate,
)

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "docker_daemon_config.py"

# What `nvidia-ctk runtime configure --runtime=docker` leaves in daemon.json (NVIDIA Container
# Toolkit docs), plus an admin's own key: both must survive our merge.
NVIDIA_CTK_DAEMON_JSON = """{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    },
    "registry-mirrors": ["https://mirror.example"]
}
"""
OURS = {"log-driver": "json-file", "log-opts": {"max-size": "50m", "max-file": "5"}, "live-restore": True}
# What nvidia_container_toolkit merges (its defaults).
NVIDIA = {
    "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
    "default-runtime": "nvidia",
    "default-shm-size": "1G",
    "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1},
                        "stack": {"Name": "stack", "Soft": 67108864, "Hard": 67108864}},
}
# An interrupted editor's daemon.json (the driver scenario's negative case) and one that is not even UTF-8.
TRUNCATED = b'{"log-driver": "json-file", "log-opts": {"max-size": "10m"'
NOT_UTF8 = b'{"log-driver": "json-file"}\xff\xfe\x00garbage'
# `dockerd --validate --config-file x` from Debian 12's docker.io 20.10.24 (exit code 1).
DOCKERD_20_10_ANSWER = "Status: unknown flag: --validate\nSee 'dockerd --help'., Code: 125\n"


def test_missing_or_blank_file_is_empty_config() -> None:
    assert load_config(None) == {}
    assert load_config("  \n") == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"live-restore": true,}', "line 1, column"),
        ('{"a": 1}\n{"b": 2}', "line 2"),
        ("[1, 2]", "JSON list, not an object"),
    ],
)
def test_corrupted_file_is_reported(text: str, fragment: str) -> None:
    with pytest.raises(DaemonConfigError, match="Fix:") as info:
        load_config(text, "/etc/docker/daemon.json")
    assert fragment in str(info.value)
    assert "/etc/docker/daemon.json" in str(info.value)


def test_corrupted_bytes_name_the_reason() -> None:
    with pytest.raises(InvalidConfigFile) as info:
        load_config(TRUNCATED)
    assert info.value.reason.startswith("not valid JSON (line 1, column")
    with pytest.raises(InvalidConfigFile) as info:
        load_config(NOT_UTF8)
    assert info.value.reason.startswith("not UTF-8 text (byte 27")
    assert load_config(b'{"debug": true}') == {"debug": True}


def test_invalid_backup_is_named_after_the_content() -> None:
    name = invalid_backup_path("/etc/docker/daemon.json", TRUNCATED)
    assert name == "/etc/docker/daemon.json.gpuops-invalid-" + hashlib.sha1(TRUNCATED).hexdigest()[:12]
    assert invalid_backup_path("/etc/docker/daemon.json", NOT_UTF8) != name


def test_plan_starts_from_empty_for_an_invalid_file() -> None:
    result = plan(TRUNCATED, NVIDIA)
    assert isinstance(result["invalid"], InvalidConfigFile)
    assert result["before"] == {}
    assert result["after"] == NVIDIA
    assert result["changed"] is True
    assert result["before_text"] == TRUNCATED.decode()
    assert plan(b"{}", {})["invalid"] is None


def test_merge_keeps_unknown_keys_and_merges_nested_objects() -> None:
    existing = json.loads(NVIDIA_CTK_DAEMON_JSON)
    existing["log-opts"] = {"labels": "team"}
    merged = merge(existing, OURS)
    assert merged["runtimes"] == existing["runtimes"]
    assert merged["default-runtime"] == "nvidia"
    assert merged["registry-mirrors"] == ["https://mirror.example"]
    assert merged["log-opts"] == {"labels": "team", "max-size": "50m", "max-file": "5"}
    assert existing["log-opts"] == {"labels": "team"}, "merge must not modify its input"


def test_merge_replaces_lists_and_deletes() -> None:
    existing = {"registry-mirrors": ["a"], "debug": True, "log-opts": {"max-size": "1m", "max-file": "2"}}
    merged = merge(existing, {"registry-mirrors": ["b"], "debug": None}, remove_keys=["log-opts.max-file", "nope.x"])
    assert merged == {"registry-mirrors": ["b"], "log-opts": {"max-size": "1m"}}


def test_plan_ignores_formatting_only_differences() -> None:
    text = json.dumps({**json.loads(NVIDIA_CTK_DAEMON_JSON), **OURS}, indent=8)
    result = plan(text, OURS)
    assert result["changed"] is False
    assert plan(NVIDIA_CTK_DAEMON_JSON, OURS)["changed"] is True
    assert plan(None, {})["changed"] is True, "a missing file is created"


def test_validate_reports_dockerd_output() -> None:
    assert validate(lambda argv: (0, "configuration OK\n", ""), "/usr/bin/dockerd", "/x") == (True, "configuration OK")
    ok, message = validate(lambda argv: (1, "", "unable to configure the Docker daemon: invalid max-size\n"),
                           "/usr/bin/dockerd", "/x")
    assert not ok
    assert "invalid max-size" in message
    with pytest.raises(ValidateUnsupported, match=r"older than 23\.0"):
        validate(lambda argv: (1, "", DOCKERD_20_10_ANSWER), "/usr/bin/dockerd", "/x")


def test_check_config_accepts_what_the_roles_write() -> None:
    config = merge(merge(json.loads(NVIDIA_CTK_DAEMON_JSON), OURS), NVIDIA)
    assert check_config(config, lambda path: path in {"/usr/bin/nvidia-container-runtime",
                                                      "nvidia-container-runtime"}) == []
    assert check_config({}, lambda path: False) == []
    assert check_config({"default-runtime": "runc"}, lambda path: False) == []


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (NVIDIA, "runtimes.nvidia.path /usr/bin/nvidia-container-runtime is not an executable file"),
        ({"runtimes": {"runc": {"path": "/bin/true"}}}, "runtime name 'runc' is reserved"),
        ({"runtimes": {"x": {"runtimeArgs": []}}}, 'runtimes.x has no "path"'),
        ({"runtimes": {"x": {"path": "/bin/true", "runtimeArgs": "--debug"}}}, "expected a list of strings"),
        ({"runtimes": ["nvidia"]}, "runtimes is a list"),
        ({"default-runtime": "nvidia"}, "specified default runtime 'nvidia' does not exist"),
        ({"log-opts": {"max-size": "50m", "max-file": 5}}, 'log-opts.max-file is 5; dockerd needs a string ("5")'),
        ({"default-ulimits": {"memlock": {"Name": "memlock", "Soft": "-1", "Hard": -1}}}, "default-ulimits.memlock"),
        ({"default-ulimits": {"nofile": {"Name": "nofile", "Soft": True, "Hard": 1}}}, "default-ulimits.nofile"),
    ],
)
def test_check_config_names_what_an_old_dockerd_would_refuse(config: dict, fragment: str) -> None:
    problems = check_config(config, lambda path: path == "/bin/true")
    assert any(fragment in problem for problem in problems), problems


def test_validate_candidate_prefers_dockerd_and_falls_back_for_20_10() -> None:
    def new_dockerd(argv):
        return 0, "configuration OK\n", ""

    def old_dockerd(argv):
        return 1, "", DOCKERD_20_10_ANSWER

    def executable(path):
        return path == "/usr/bin/nvidia-container-runtime"

    assert validate_candidate(new_dockerd, "/usr/bin/dockerd", "/x", NVIDIA, lambda p: False) == (
        True, "configuration OK", "dockerd")
    ok, message, by = validate_candidate(old_dockerd, "/usr/bin/dockerd", "/x", NVIDIA, executable)
    assert (ok, by) == (True, "builtin")
    assert "older than 23.0" in message
    ok, message, by = validate_candidate(old_dockerd, "/usr/bin/dockerd", "/x", NVIDIA, lambda p: False)
    assert (ok, by) == (False, "builtin")
    assert "/usr/bin/nvidia-container-runtime is not an executable file" in message


# --- the module, run as Ansible runs it -------------------------------------------------

@pytest.fixture
def fake_dockerd(tmp_path: Path) -> Path:
    """A dockerd that 'validates' like the real one: accepts JSON without a "bogus-key" key."""
    script = tmp_path / "dockerd"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        "assert sys.argv[1:3] == ['--validate', '--config-file'], sys.argv\n"
        "data = json.load(open(sys.argv[3]))\n"
        "if 'bogus-key' in data:\n"
        "    print('unable to configure the Docker daemon with file x: the following directives '\n"
        "          'don\\'t match any configuration option: bogus-key', file=sys.stderr); sys.exit(1)\n"
        "print('configuration OK')\n"
    )
    script.chmod(0o755)
    return script


@pytest.fixture
def old_dockerd(tmp_path: Path) -> Path:
    """A dockerd that answers --validate as Docker 20.10 does (Debian 12): it has no such flag."""
    script = tmp_path / "dockerd-20.10"
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s' \"{DOCKERD_20_10_ANSWER}\"\n"
        "exit 1\n"
    )
    script.chmod(0o755)
    return script


def run_module(tmp_path: Path, args: dict, check: bool = False, diff: bool = True) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        **args, "_ansible_check_mode": check, "_ansible_diff": diff, "_ansible_tmpdir": str(tmp_path),
        "_ansible_remote_tmp": str(tmp_path), "_ansible_keep_remote_files": False,
    }}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "collections")}
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, check=False, timeout=60)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"module printed no JSON: rc={proc.returncode} stdout={proc.stdout!r} stderr={proc.stderr!r}")


def test_module_merges_validates_backs_up(tmp_path: Path, fake_dockerd: Path) -> None:
    target = tmp_path / "etc" / "docker" / "daemon.json"
    target.parent.mkdir(parents=True)
    target.write_text(NVIDIA_CTK_DAEMON_JSON)
    args = {"path": str(target), "config": OURS, "dockerd": str(fake_dockerd)}

    checked = run_module(tmp_path, args, check=True)
    assert checked["changed"] is True
    assert '"live-restore": true' in checked["diff"]["after"]
    assert target.read_text() == NVIDIA_CTK_DAEMON_JSON, "check mode must not write"

    first = run_module(tmp_path, args)
    assert first["changed"] is True, first
    assert first["validation"] == "configuration OK"
    written = json.loads(target.read_text())
    assert written["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert written["log-opts"]["max-size"] == "50m"
    assert Path(first["backup_file"]).read_text() == NVIDIA_CTK_DAEMON_JSON
    assert oct(target.stat().st_mode & 0o777) == "0o644"

    second = run_module(tmp_path, args)
    assert second["changed"] is False, "second run must change nothing"
    leftovers = [p.name for p in target.parent.iterdir() if p.name.startswith(".daemon.json.")]
    assert not leftovers


def test_module_refuses_what_dockerd_rejects(tmp_path: Path, fake_dockerd: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_text(NVIDIA_CTK_DAEMON_JSON)
    result = run_module(tmp_path, {"path": str(target), "config": {"bogus-key": 1}, "dockerd": str(fake_dockerd)})
    assert result.get("failed") is True
    assert "bogus-key" in result["msg"]
    assert "left unchanged" in result["msg"]
    assert target.read_text() == NVIDIA_CTK_DAEMON_JSON
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".daemon.json.")] == []


def test_module_reports_corrupted_file_and_leaves_it(tmp_path: Path, fake_dockerd: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_text('{"live-restore": true,\n')
    result = run_module(tmp_path, {"path": str(target), "config": OURS, "dockerd": str(fake_dockerd)})
    assert result.get("failed") is True
    assert "is not valid JSON" in result["msg"]
    assert target.read_text() == '{"live-restore": true,\n'


def test_module_creates_missing_file_without_validation(tmp_path: Path) -> None:
    target = tmp_path / "new" / "daemon.json"
    result = run_module(tmp_path, {"path": str(target), "config": OURS, "validate": False})
    assert result["changed"] is True
    assert json.loads(target.read_text()) == OURS
    assert "backup_file" not in result
    assert render(OURS) == target.read_text()


def test_module_backs_up_a_corrupted_file_byte_for_byte_and_stops(tmp_path: Path, fake_dockerd: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_bytes(NOT_UTF8)
    backup = Path(invalid_backup_path(str(target), NOT_UTF8))
    args = {"path": str(target), "config": NVIDIA, "dockerd": str(fake_dockerd)}

    checked = run_module(tmp_path, args, check=True)
    assert checked.get("failed") is True
    assert "check mode: nothing written" in checked["msg"]
    assert not backup.exists()

    result = run_module(tmp_path, args)
    assert result.get("failed") is True
    assert result["changed"] is True, "the backup is a change"
    assert str(backup) in result["msg"], "the failure must name the backup"
    assert result["invalid_backup"] == str(backup)
    assert "not UTF-8 text" in result["msg"]
    assert "invalid: replace" in result["msg"]
    assert backup.read_bytes() == NOT_UTF8
    assert oct(backup.stat().st_mode & 0o777) == "0o600"
    assert target.read_bytes() == NOT_UTF8, "fail mode must leave the file alone"

    again = run_module(tmp_path, args)
    assert again.get("failed") is True
    assert again["changed"] is False, "the same broken file is not backed up twice"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("daemon.json")) == [
        "daemon.json", backup.name]


def test_module_replaces_a_corrupted_file_when_asked(tmp_path: Path, fake_dockerd: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_bytes(TRUNCATED)
    args = {"path": str(target), "config": NVIDIA, "dockerd": str(fake_dockerd), "invalid": "replace"}

    checked = run_module(tmp_path, args, check=True)
    assert checked["changed"] is True
    assert checked["diff"]["before"] == TRUNCATED.decode()
    assert target.read_bytes() == TRUNCATED

    result = run_module(tmp_path, args)
    assert result["changed"] is True, result
    assert json.loads(target.read_text()) == NVIDIA, "only the given settings, nothing from the broken file"
    assert Path(result["invalid_backup"]).read_bytes() == TRUNCATED
    assert "line 1, column" in result["invalid_reason"]
    assert "backup_file" not in result, "no usable previous file to roll back to"
    # ansible-core 2.19 returns warnings as structured events; older cores as strings.
    assert "invalid: replace" in json.dumps(result["warnings"])

    assert run_module(tmp_path, args)["changed"] is False


def test_module_validates_for_docker_20_10_without_validate_flag(tmp_path: Path, old_dockerd: Path) -> None:
    runtime = tmp_path / "nvidia-container-runtime"
    runtime.write_text("#!/bin/sh\nexec runc \"$@\"\n")
    target = tmp_path / "daemon.json"
    target.write_text(NVIDIA_CTK_DAEMON_JSON.replace('"nvidia-container-runtime"', f'"{runtime}"'))
    before = target.read_text()
    args = {"path": str(target), "config": {"default-runtime": "nvidia", "live-restore": True},
            "dockerd": str(old_dockerd)}

    refused = run_module(tmp_path, args)
    assert refused.get("failed") is True
    assert refused["validated_by"] == "builtin"
    assert f"runtimes.nvidia.path {runtime} is not an executable file" in refused["msg"]
    assert "left unchanged" in refused["msg"]
    assert target.read_text() == before

    runtime.chmod(0o755)
    result = run_module(tmp_path, args)
    assert result["changed"] is True, result
    assert result["validated_by"] == "builtin"
    assert "older than 23.0" in result["validation"]
    assert json.loads(target.read_text())["live-restore"] is True

    wrong = run_module(tmp_path, {**args, "config": {"log-opts": {"max-file": 5}}})
    assert wrong.get("failed") is True
    assert 'log-opts.max-file is 5; dockerd needs a string ("5")' in wrong["msg"]
