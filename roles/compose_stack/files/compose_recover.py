# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""compose_stack's recovery from a run killed during ``docker compose up``; runs on the Compose host.

Run by the rescue of the role's "Run the stack" task, when ``up`` failed. A run killed (SIGKILL to the controller's
process group) while ``up`` creates the project leaves, on the host:

- the killed run's ``docker compose`` still running: killing the controller does not stop the command it started
  on the host, and a second ``up`` races it for each container name ("Conflict. The container name
  "/gpuops-alertmanager-1" is already in use") and each network (two networks of one name: "Error when processing
  network gpuops_monitoring");
- containers of the project created but never started, or dead;
- containers named as the project's (``<project>-<service>-<n>``) without the project's label;
- networks of the project with no container (among them the second of two networks of one name).

The script waits, bounded, for the project's other compose commands to end, then removes those containers (without
``-v``: volumes, named or anonymous, stay) and those networks (by ID, so two of one name are told apart), and prints
what it did as JSON: ``{"changed", "waited_for", "removed_containers", "removed_networks"}``. ``up`` then creates
them again. A running container with a project name but not the project's label is not removed: the script fails
naming it, for its owner to move it away.

usage: compose_recover.py PROJECT WAIT_SECONDS SERVICE...
Standard library and the docker CLI only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

PROJECT_LABEL = "com.docker.compose.project"
HALF_MADE = ("created", "dead")  # never started, or broken: `up` makes them again
POLL = 2.0
ARGS = 3  # the script, the project, the wait


class RecoverError(Exception):
    """Something the script must not remove blocks the project; the message names it and the fix."""


def docker(*args: str) -> str:
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C")
    )
    if result.returncode != 0:
        raise RecoverError(f"docker {' '.join(args)} failed (rc={result.returncode}): {result.stderr.strip()}")
    return result.stdout


def names_project(argv: list, project: str) -> bool:
    """Whether a command line is a ``docker compose`` (or ``docker-compose``) command of this project."""
    names = [os.path.basename(word) for word in argv[:2]]
    if not ("docker-compose" in names or (names[:1] == ["docker"] and "compose" in argv)):
        return False
    for i, word in enumerate(argv):
        if word in ("-p", "--project-name") and i + 1 < len(argv) and argv[i + 1] == project:
            return True
        if word == f"--project-name={project}":
            return True
    return False


def _ancestors(proc: str) -> set:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"{proc}/{pid}/stat", encoding="utf-8") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def compose_processes(project: str, proc: str = "/proc") -> dict:
    """pid -> command line of every compose command of the project but this script's own ancestry."""
    mine = _ancestors(proc)
    found = {}
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"{proc}/{entry}/cmdline", "rb") as handle:
                argv = [word.decode(errors="replace") for word in handle.read().split(b"\0") if word]
        except OSError:
            continue  # ended meanwhile
        if argv and names_project(argv, project):
            found[int(entry)] = " ".join(argv)
    return found


def wait_for_others(project: str, seconds: float, proc: str = "/proc", clock=time.monotonic, sleep=time.sleep) -> list:
    """Wait until no other compose command of the project runs; the ones waited for (pid and command)."""
    deadline = clock() + seconds
    seen = {}
    while True:
        running = compose_processes(project, proc)
        seen.update(running)
        if not running:
            return [f"{pid} {command}" for pid, command in sorted(seen.items())]
        if clock() >= deadline:
            raise RecoverError(
                f"compose command(s) of project {project!r} still running after {seconds:.0f} s: "
                + "; ".join(f"pid {pid}: {command}" for pid, command in sorted(running.items()))
                + ". Fix: if no other run of this project is in progress (a run killed earlier leaves its compose "
                "running on the host), stop them (kill PID), then rerun"
            )
        sleep(POLL)


def half_made_containers(project: str, services: list, rows: list) -> list:
    """The containers to remove, from ``docker ps -a`` rows (id, name, state, project label): the project's that
    are created or dead, and those named as the project's services without its label (refused when running)."""
    named = re.compile(rf"^{re.escape(project)}-({'|'.join(map(re.escape, services))})-[0-9]+$")
    remove = []
    for cid, name, state, label in rows:
        if label == project:
            if state in HALF_MADE:
                remove.append((cid, name))
        elif named.match(name):
            if state == "running":
                raise RecoverError(
                    f"container {name} ({cid[:12]}) is running with the name of project {project!r}'s "
                    f"service but not its label ({PROJECT_LABEL}={label or 'none'}). Fix: rename or "
                    f"remove it (docker rename {name} <other>), then rerun"
                )
            remove.append((cid, name))
    return remove


def empty_networks(project: str, rows: list) -> list:
    """The networks to remove, from ``docker network ls`` rows (id, name, project label, number of containers):
    the project's (label, or a ``<project>_`` name) that no container uses."""
    return [
        (nid, name)
        for nid, name, label, used in rows
        if (label == project or name.startswith(f"{project}_")) and used == 0
    ]


def recover(project: str, seconds: float, services: list) -> dict:
    waited = wait_for_others(project, seconds)
    rows = [
        line.split("\t")
        for line in docker(
            "ps", "-a", "--no-trunc", "--format", '{{.ID}}\t{{.Names}}\t{{.State}}\t{{.Label "' + PROJECT_LABEL + '"}}'
        ).splitlines()
        if line.strip()
    ]
    containers = half_made_containers(project, services, [tuple([*row, "", "", ""][:4]) for row in rows])
    for cid, _name in containers:
        docker("rm", "--force", cid)  # no --volumes: the data stays
    networks = []
    for line in docker(
        "network", "ls", "--no-trunc", "--format", '{{.ID}}\t{{.Name}}\t{{.Label "' + PROJECT_LABEL + '"}}'
    ).splitlines():
        nid, name, label = [*line.split("\t"), "", ""][:3]
        if label == project or name.startswith(f"{project}_"):
            used = int(docker("network", "inspect", "--format", "{{len .Containers}}", nid).strip() or 0)
            networks.append((nid, name, label, used))
    removed_networks = empty_networks(project, networks)
    for nid, _name in removed_networks:
        docker("network", "rm", nid)
    return {
        "changed": bool(waited or containers or removed_networks),
        "waited_for": waited,
        "removed_containers": [name for _cid, name in containers],
        "removed_networks": [f"{name} ({nid[:12]})" for nid, name in removed_networks],
    }


def main(argv: list) -> int:
    if len(argv) < ARGS + 1:
        sys.stderr.write(f"usage: {argv[0]} PROJECT WAIT_SECONDS SERVICE...\n")
        return 2
    try:
        done = recover(argv[1], float(argv[2]), argv[3:])
    except RecoverError as error:
        sys.stderr.write(f"compose_recover: {error}\n")
        return 1
    sys.stdout.write(json.dumps(done) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
