"""daemon.json merging (module_utils.docker_daemon): loading, merging, rendering, the invalid file's backup name,
dockerd's validation and the built-in check for a dockerd older than 23.0 (Debian 12's 20.10.24 answer in
docker_daemon_samples). The module itself is tested in tests/unit/plugins/modules/test_docker_daemon_config.py; the
real dockerd by the Molecule scenarios: compose (Docker 26) and driver (Docker 20.10 and 26).
"""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import (
    InvalidConfigFile,
    check_config,
    invalid_backup_path,
    load_config,
    merge,
    plan,
    validate_candidate,
)
from docker_daemon_samples import DOCKERD_20_10_ANSWER, NOT_UTF8, NVIDIA, NVIDIA_CTK_DAEMON_JSON, OURS, TRUNCATED


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
    # The module puts the reason into its refusal, with the path, the backup and the fix (test_docker_daemon_config).
    with pytest.raises(InvalidConfigFile) as info:
        load_config(text)
    assert fragment in str(info.value)


def test_corrupted_bytes_name_the_reason() -> None:
    with pytest.raises(InvalidConfigFile) as info:
        load_config(TRUNCATED)
    assert str(info.value).startswith("not valid JSON (line 1, column")
    with pytest.raises(InvalidConfigFile) as info:
        load_config(NOT_UTF8)
    assert str(info.value).startswith("not UTF-8 text (byte 27")
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
    merged = merge(existing, {"registry-mirrors": ["b"], "debug": None, "log-opts": {"max-file": None}, "nope": None})
    assert merged == {"registry-mirrors": ["b"], "log-opts": {"max-size": "1m"}}


def test_plan_ignores_formatting_only_differences() -> None:
    text = json.dumps({**json.loads(NVIDIA_CTK_DAEMON_JSON), **OURS}, indent=8)
    result = plan(text, OURS)
    assert result["changed"] is False
    assert plan(NVIDIA_CTK_DAEMON_JSON, OURS)["changed"] is True
    assert plan(None, {})["changed"] is True, "a missing file is created"


def test_validate_reports_dockerd_output() -> None:
    seen = []

    def dockerd(answer):
        return lambda argv: seen.append(argv) or answer

    assert validate_candidate(dockerd((0, "", "")), "/usr/bin/dockerd", "/x", {}, bool) == (
        True, "configuration OK", "dockerd")
    assert seen[0] == ["/usr/bin/dockerd", "--validate", "--config-file", "/x"]
    ok, message, by = validate_candidate(
        dockerd((1, "", "unable to configure the Docker daemon: invalid max-size\n")), "/usr/bin/dockerd", "/x", {},
        bool)
    assert (ok, by) == (False, "dockerd")
    assert message == "unable to configure the Docker daemon: invalid max-size"
    assert validate_candidate(dockerd((1, "", "")), "/usr/bin/dockerd", "/x", {}, bool) == (False, "", "dockerd")


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
