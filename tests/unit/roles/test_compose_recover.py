"""roles/compose_stack/files/compose_recover.py: what the rescue of "Run the stack" removes after a killed run.

The rows are what `docker ps -a` and `docker network ls` print in the script's formats; the names are the ones of
issue 36's failure on a fresh demo node ("/gpuops-alertmanager-1" already in use, then network gpuops_monitoring).
The command lines are the two processes community.docker's docker_compose_v2 leaves running on the host (the docker
CLI, and the Compose plugin it starts). molecule/compose (tests/test_05_faults.py) runs the script on a real node
after a real SIGKILL during `up`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location(
    "compose_recover", REPO / "roles" / "compose_stack" / "files" / "compose_recover.py"
)
assert _SPEC is not None
assert _SPEC.loader is not None
cr = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cr)

SERVICES = ["dcgm-exporter", "node-exporter", "prometheus", "alertmanager", "mlflow", "ws-alice"]
CLI = [
    "docker",
    "compose",
    "--ansi",
    "never",
    "--project-directory",
    "/opt/gpuops/stack",
    "--project-name",
    "gpuops",
    "-f",
    "compose.yaml",
    "up",
    "--detach",
    "--wait",
]
PLUGIN = ["/usr/libexec/docker/cli-plugins/docker-compose", "compose", "--project-name", "gpuops", "up"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (CLI, True),
        (PLUGIN, True),
        (["docker", "compose", "-p", "gpuops", "ps"], True),
        (["docker", "compose", "--project-name=gpuops", "up"], True),
        (["docker", "compose", "--project-name", "other", "up"], False),
        (["docker", "ps", "--filter", "label=com.docker.compose.project=gpuops"], False),
        (["/usr/bin/python3", "compose_recover.py", "gpuops", "360", "mlflow"], False),
    ],
)
def test_a_compose_command_of_the_project_is_told_by_its_command_line(argv, expected) -> None:
    assert cr.names_project(argv, "gpuops") is expected


def test_created_dead_and_unlabelled_namesakes_are_removed_running_and_exited_stay() -> None:
    rows = [
        ("a" * 64, "gpuops-alertmanager-1", "created", "gpuops"),
        ("b" * 64, "gpuops-prometheus-1", "dead", "gpuops"),
        ("c" * 64, "gpuops-mlflow-1", "running", "gpuops"),
        ("d" * 64, "gpuops-node-exporter-1", "exited", "gpuops"),
        ("e" * 64, "gpuops-ws-alice-1", "created", ""),
        ("f" * 64, "gpuops-unknown-1", "created", ""),
        ("0" * 64, "other-alertmanager-1", "created", "other"),
    ]
    removed = cr.half_made_containers("gpuops", SERVICES, rows)
    assert [name for _cid, name in removed] == ["gpuops-alertmanager-1", "gpuops-prometheus-1", "gpuops-ws-alice-1"]


def test_a_running_namesake_without_the_label_is_refused_by_name() -> None:
    rows = [("e" * 64, "gpuops-alertmanager-1", "running", "")]
    with pytest.raises(cr.RecoverError, match=r"container gpuops-alertmanager-1 \(eeeeeeeeeeee\) is running .* Fix"):
        cr.half_made_containers("gpuops", SERVICES, rows)


def test_unused_networks_of_the_project_are_removed_by_id_two_of_one_name_told_apart() -> None:
    rows = [
        ("1" * 64, "gpuops_monitoring", "gpuops", 5),
        ("2" * 64, "gpuops_monitoring", "gpuops", 0),
        ("3" * 64, "gpuops_ws-alice", "", 0),
        ("4" * 64, "gpuops_ws-bob", "gpuops", 2),
        ("5" * 64, "bridge", "", 0),
        ("6" * 64, "other_monitoring", "other", 0),
    ]
    assert cr.empty_networks("gpuops", rows) == [("2" * 64, "gpuops_monitoring"), ("3" * 64, "gpuops_ws-alice")]


def test_the_wait_for_a_killed_runs_compose_is_bounded_and_names_it(tmp_path, monkeypatch) -> None:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_bytes(b"\0".join(word.encode() for word in CLI) + b"\0")
    ticks = iter(range(100))
    monkeypatch.setattr(cr, "_ancestors", lambda _proc: set())
    with pytest.raises(cr.RecoverError, match=r"still running after 5 s: pid 4242: docker compose .*\(kill PID\)"):
        cr.wait_for_others("gpuops", 5, str(proc), clock=lambda: next(ticks), sleep=lambda _s: None)
    # once it has ended, the wait returns it as waited for
    calls = []

    def ended(_seconds: float) -> None:
        calls.append(_seconds)
        (proc / "4242" / "cmdline").unlink()
        (proc / "4242").rmdir()

    waited = cr.wait_for_others("gpuops", 60, str(proc), clock=lambda: 0, sleep=ended)
    assert waited == ["4242 " + " ".join(CLI)]
    assert calls == [cr.POLL]
