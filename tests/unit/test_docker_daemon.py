"""daemon.json merging (module_utils.docker_daemon) and the docker_daemon_config module, end to end.

The module runs as Ansible runs it (a subprocess reading ANSIBLE_MODULE_ARGS) against files in
a temporary directory, with a stand-in `dockerd` script for `--validate` (the real one is
exercised by the compose Molecule scenario, Docker 26 in Debian 13).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import (
    DaemonConfigError,
    load_config,
    merge,
    plan,
    render,
    validate,
)

REPO = Path(__file__).resolve().parents[2]
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
    with pytest.raises(DaemonConfigError, match=r"older than 23\.0"):
        validate(lambda argv: (125, "", "unknown flag: --validate"), "/usr/bin/dockerd", "/x")


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
