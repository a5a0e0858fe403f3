"""The bad-input matrix: every case is refused before any host changes, with a message that says why.

One real host for all cases: a Debian 12 systemd container (no GPU), started once, reached over the
docker connection. inventory/ is a valid compose baseline, inventory-kubernetes/ a valid kubernetes one
(a control plane and a GPU node, both inventory names for the same container). Each cases/<name>.yml
overrides a few variables (``vars``, passed with -e) and lists fragments the refusal must contain
(``expect``: the variable, the value found, what is allowed, the fix), and may list fragments it must not contain
(``absent``: what a host with no problem of its own must not print). ``inventory: kubernetes`` runs a case
on the kubernetes baseline; ``hosts:`` gives a group layout of its own (a hosts.yml document, run with the
kubernetes baseline's group_vars), for the refusals that are about the layout (two control planes...).
Each case runs the plays site.yml runs before the host layer (until_host_layer.yml: boilerplate,
preflight, the input checks), or with ``playbook: health`` the day-2 playbook playbooks/health.yml on the compose
baseline (its own baseline: a dry run, which changes nothing on the host), or with ``playbook: grow``
playbooks/grow.yml on the compose baseline (its own baseline: the plan built and checked), or with
``playbook: burnin`` playbooks/burnin.yml on the compose baseline (its own baseline: the settings checked, then the
burn-in of a node without GPUs - gpu_facts reads it, nothing else runs there, the report is written on the
controller), and must:

* fail (a case the plays accept fails here, and nothing downstream ran: the host layer is not in them);
* print every expected fragment;
* leave the host as it was: a snapshot of the node taken when the case starts (the one the previous case run by the
  same worker ended with, where there is one) and one taken when it ends both equal the reference taken before any
  case ran. A snapshot is the node's writable layer (paths under Ansible's own temp dir, /root/.ansible, aside:
  _layer) and, from one ``docker exec`` of snapshot.py, what that layer cannot show: every path under the tmpfs
  mounts /run and /tmp with a file's content hash, the systemd units with their states, ``sysctl -a`` (less the
  kernel's own counters), and the content hash of every file the boot already changed (less the journal, which logs
  each module Ansible runs). While other cases run, what their running modules hold in /tmp for a moment is left
  out: the payload directories (/tmp/ansible_*_payload_*) and Python's temp-dir probe (IN_FLIGHT); a snapshot taken
  once every case has ended must equal the reference with them included.

Every expected fragment must be absent from the output of the baseline the case varies: a fragment that an
accepted run also prints cannot tell a refusal apart.

The node's timers are stopped before the reference, so that a timer's run is not taken for a change. After the
cases, a control changes each of the five things once and checks that the snapshot sees every change.

Cases run a few at a time (GPUOPS_BAD_INPUT_JOBS, default 6): a case waits mostly on the host, and a
change made by any case shows in the next snapshot taken. The retired-name cases share one run per baseline
(_retired_group). Needs docker and the
gpuops/debian12-systemd image (make images); skipped, with the reason, without them.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from container_node import ansible_env, docker, start_systemd_node

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = sorted((HERE / "cases").glob("*.yml"))
NODE = "gpuops-bad-input-node"
IMAGE = os.environ.get("GPUOPS_BAD_INPUT_IMAGE", "gpuops/debian12-systemd")
JOBS = int(os.environ.get("GPUOPS_BAD_INPUT_JOBS", "6"))
ANSIBLE_TMP = "/root/.ansible"
INVENTORIES = {"compose": HERE / "inventory", "kubernetes": HERE / "inventory-kubernetes"}
PLAYBOOKS = {"until_host_layer": HERE / "until_host_layer.yml", "health": REPO / "playbooks" / "health.yml",
             "grow": REPO / "playbooks" / "grow.yml", "burnin": REPO / "playbooks" / "burnin.yml"}
# baseline name -> (inventory, playbook): the accepted runs the cases vary
BASELINES = {"compose": ("compose", "until_host_layer"), "kubernetes": ("kubernetes", "until_host_layer"),
             "health": ("compose", "health"), "grow": ("compose", "grow"), "burnin": ("compose", "burnin")}
MIN_CASES = 30


SNAPSHOT = (HERE / "snapshot.py").read_text()
# What a running module holds in /tmp for a moment: the payload directory Ansible unpacks it into
# (/tmp/ansible_<module>_payload_<random>, removed when the module ends), and the file Python's
# tempfile.gettempdir() creates, writes and removes to test /tmp on its first call in a process (8 characters of
# a-z, 0-9 and _; AnsibleModule calls it when its working directory is unreadable). Seen once in a case's
# snapshot (/tmp/j2dar_s2, empty, 0600) while other cases ran.
IN_FLIGHT = re.compile(r"^/tmp/(ansible_[^/]+_payload_[^/]+(/|$)|[a-z0-9_]{8}$)")


def _ours(path: str) -> bool:
    """Ansible's temp dir, and /root made for it: not host state a case could change."""
    return path.startswith(ANSIBLE_TMP) or path == "/root"


def _diff() -> list[str]:
    """``docker diff``: the node's filesystem changes against its image, without Ansible's temp dir."""
    lines = docker("diff", NODE).stdout.splitlines()
    return sorted(line for line in lines if not _ours(line[2:]))


def _upper_dir() -> Path | None:
    """overlay2's writable (upper) directory of the node, when docker keeps the node there and this process can read
    it; None otherwise (then each snapshot asks ``docker diff``)."""
    driver = json.loads(docker("inspect", "-f", "{{json .GraphDriver}}", NODE).stdout or "null") or {}
    upper = Path((driver.get("Data") or {}).get("UpperDir") or "/nonexistent")
    return upper if driver.get("Name") == "overlay2" and upper.is_dir() and os.access(upper, os.R_OK) else None


def _layer(upper: Path | None) -> list[str]:
    """The writable layer: every path in overlay2's upper directory with its kind (a whiteout is a deleted path).
    That directory holds every path ``docker diff`` lists (an added, changed or deleted path, and each parent
    directory, which overlay copies up), and it is read here in milliseconds, where ``docker diff`` costs the daemon
    about half a second of CPU per call on this node (two per case); the matrix checks, at the reference and once
    every case has ended, that every path docker diff lists is here. Without overlay2: ``docker diff``."""
    if upper is None:
        return _diff()
    lines = []
    for root, dirs, files in os.walk(upper):
        for name in dirs + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            kind = ("deleted" if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0 else "dir" if stat.S_ISDIR(
                info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode)
                else "other")
            lines.append(f"{kind} /{os.path.relpath(path, upper)}")
    return sorted(line for line in lines if not _ours(line.split(" ", 1)[1]))


def _snapshot(boot_diff: list[str], upper: Path | None) -> dict:
    """The writable layer, and snapshot.py's tmpfs, units, sysctl and boot-file hashes (one docker exec)."""
    paths = [line[2:] for line in boot_diff]
    inside = subprocess.run(["docker", "exec", "-i", NODE, "python3", "-", json.dumps(paths)], input=SNAPSHOT,
                            capture_output=True, text=True, check=True, timeout=120)
    return {"layer": _layer(upper), **json.loads(inside.stdout)}


def _unlisted(snapshot: dict, upper: Path | None) -> list[str]:
    """The paths ``docker diff`` lists, asked right after the snapshot, that the snapshot's writable layer does not
    hold (none, or _layer misses changes)."""
    if upper is None:
        return []  # the snapshots are docker diff itself
    listed = {line.split(" ", 1)[1] for line in snapshot["layer"]}
    return [line for line in _diff() if line[2:] not in listed]


def _changes(reference: dict, snapshot: dict, in_flight: bool = True) -> list[str]:
    """What differs, one line per path, unit, sysctl or file. For sysctl, only keys both sides have: the node
    cannot load a kernel module (no CAP_SYS_MODULE), so a key that appears or goes is another container's module
    on this machine, not a case's doing. With in_flight (other cases may be running), what running modules hold in
    /tmp for a moment (IN_FLIGHT) is left out; the snapshot taken once every case has ended compares it too
    (in_flight=False)."""
    lines = [f"layer: {line}" for line in sorted(set(reference["layer"]) ^ set(snapshot["layer"]))]
    for part in ("tmpfs", "units", "sysctl", "boot files"):
        before, after = reference[part], snapshot[part]
        keys = set(before) & set(after) if part == "sysctl" else set(before) | set(after)
        if part == "tmpfs" and in_flight:
            keys = {key for key in keys if not IN_FLIGHT.match(key)}
        lines += [f"{part}: {key}: {before.get(key)} -> {after.get(key)}"
                  for key in sorted(keys) if before.get(key) != after.get(key)]
    return lines


def _inventory(data: dict, workdir: Path) -> Path:
    """The hosts.yml a case runs with: a baseline's, or the case's own layout beside the kubernetes group_vars."""
    if "hosts" not in data:
        return INVENTORIES[data.get("inventory", "compose")] / "hosts.yml"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "hosts.yml").write_text(yaml.safe_dump(data["hosts"]))
    (workdir / "group_vars").symlink_to(INVENTORIES["kubernetes"] / "group_vars")
    return workdir / "hosts.yml"


def _play(extra: dict, report_dir: str, inventory: Path, playbook: str = "until_host_layer"
          ) -> subprocess.CompletedProcess:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(extra, handle)
    try:
        return subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory),
             str(PLAYBOOKS[playbook]), "-e", f"@{handle.name}", "-e", f"gpuops_report_dir={report_dir}"],
            capture_output=True, text=True, env=ansible_env(), cwd=REPO, timeout=600, check=False,
        )
    finally:
        os.unlink(handle.name)


# The control: one change of each kind the snapshot must see (run after every case, on the node they used).
CONTROL = {
    "layer": "touch /etc/gpuops-control && rm -f /etc/motd",  # a path added, one deleted (a whiteout)
    "tmpfs": "echo control > /tmp/gpuops-control",
    "units": "systemd-run --unit gpuops-control /bin/sleep 600",
    # docker mounts /proc/sys read-only, so a case cannot set a sysctl here; the control makes it writable first
    # (the node's own network namespace: nothing outside the node changes).
    "sysctl": "mount -o remount,rw /proc/sys && sysctl -q -w net.ipv4.ip_forward=$((1 - $(sysctl -n "
    "net.ipv4.ip_forward))) && mount -o remount,ro /proc/sys",
    # in the boot diff already: neither the writable layer nor docker diff can show this
    "boot files": "echo control >> /var/log/wtmp",
}


@pytest.fixture(scope="module")
def node():
    start_systemd_node(NODE, IMAGE)
    # Timers would start their services in the middle of the matrix; stopped before the reference is taken.
    docker("exec", NODE, "systemctl", "stop", "*.timer")
    time.sleep(2)  # boot-time writers (journald) settle before the reference
    yield NODE
    docker("rm", "-f", "-v", NODE, check=False)


@pytest.fixture(scope="module")
def matrix(node, tmp_path_factory, request):
    """Run the baselines, then every selected case, then the control; return ({case: (result, changes)},
    baselines, control, ended, unlisted). changes lists what differed from the reference in the snapshot taken when
    the case started, then in the one taken when it ended; baselines is {inventory: (result, changes)} for the
    compose and the kubernetes baseline; control is {kind: changes} after each change of CONTROL, made in turn; ended is
    what differs once every case has ended, what IN_FLIGHT leaves out included; unlisted is, at the reference,
    once every case has ended and after the control, the paths docker diff lists that the writable layer did not."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if hasattr(item, "callspec") and "case" in item.callspec.params}
    reports = tmp_path_factory.mktemp("reports")
    boot_diff = _diff()
    upper = _upper_dir()
    reference = _snapshot(boot_diff, upper)
    unlisted = {"reference": _unlisted(reference, upper)}

    worker = threading.local()  # .last: the snapshot this worker's previous run ended with

    def checked(play):
        """The run, and what its start and end snapshots show. A worker's run starts with the snapshot its previous run
        ended with, taken in this worker a few milliseconds before (the next case's file read, nothing run on the
        node); only a worker's first run takes one of its own. A second snapshot at that moment would see nothing
        more: a change another worker's case makes shows in that case's end snapshot and in every later one; only a
        change made and undone within one case would show in neither, and a snapshot of another worker's finds one
        only by chance, if it falls in between."""
        start = getattr(worker, "last", None) or _snapshot(boot_diff, upper)
        result = play()
        worker.last = _snapshot(boot_diff, upper)
        return result, [f"at the start: {c}" for c in _changes(reference, start)] + _changes(reference, worker.last)

    def baseline(name: str):
        inventory, playbook = BASELINES[name]
        return name, checked(lambda: _play({}, str(reports / f"baseline-{name}"), INVENTORIES[inventory] / "hosts.yml",
                                           playbook))

    def run(case: Path):
        data = yaml.safe_load(case.read_text())
        started = time.monotonic()
        inventory = _inventory(data, reports / f"{case.stem}-inventory")
        result, changes = checked(lambda: _play(data.get("vars") or {}, str(reports / case.stem), inventory,
                                                data.get("playbook", "until_host_layer")))
        print(f"bad input {case.stem}: rc {result.returncode}, {time.monotonic() - started:.0f} s")
        return case.stem, (result, changes)

    def run_retired(inventory: str, cases: list[Path]):
        merged: dict = {}
        for case in cases:
            case_vars = yaml.safe_load(case.read_text())["vars"]
            assert not set(case_vars) & set(merged), f"{case.stem} sets a variable another retired case sets"
            merged |= case_vars
        # each case expects "<its variable> is set": with foo_x and x in one run, x's case would pass on foo_x's line
        inside = sorted((a, b) for a in merged for b in merged if a != b and a in b)
        assert not inside, f"retired names inside others cannot share a run: {inside}"
        started = time.monotonic()
        hosts = INVENTORIES[inventory] / "hosts.yml"
        result = checked(lambda: _play(merged, str(reports / f"retired-{inventory}"), hosts))
        print(f"bad input: {len(cases)} retired names on the {inventory} baseline in one run: rc "
              f"{result[0].returncode}, {time.monotonic() - started:.0f} s")
        return [(case.stem, result) for case in cases]

    chosen = [c for c in CASES if c in selected]
    retired = {inventory: [c for c in chosen if _retired_group(c) == inventory] for inventory in INVENTORIES}
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        wanted = {_baseline_of(yaml.safe_load(c.read_text())) for c in chosen} | set(INVENTORIES)
        # every run submitted at once (the baselines, then the shared retired-name runs, then the cases): no worker
        # waits for the slowest baseline before the cases start
        baseline_runs = pool.map(baseline, [b for b in BASELINES if b in wanted])
        grouped = [pool.submit(run_retired, inventory, cases) for inventory, cases in retired.items() if cases]
        results = dict(pool.map(run, [c for c in chosen if _retired_group(c) is None]))
        results |= {stem: result for future in grouped for stem, result in future.result()}
        baselines = dict(baseline_runs)
    last = _snapshot(boot_diff, upper)
    ended = _changes(reference, last, in_flight=False)
    unlisted["every case ended"] = _unlisted(last, upper)
    control = {}
    for kind, command in CONTROL.items():
        docker("exec", NODE, "sh", "-c", command)
        last = _snapshot(boot_diff, upper)
        control[kind] = _changes(reference, last)
    unlisted["the control made"] = _unlisted(last, upper)
    return results, baselines, control, ended, unlisted


def test_the_matrix_has_at_least_30_cases() -> None:
    assert len(CASES) >= MIN_CASES, [c.stem for c in CASES]
    for case in CASES:
        data = yaml.safe_load(case.read_text())
        assert {"expect"} <= set(data) <= {"expect", "absent", "vars", "inventory", "hosts", "playbook"}, case.name
        assert data.get("playbook", "until_host_layer") in PLAYBOOKS, case.name
        assert data["expect"], case.name
        assert data.get("vars") or data.get("hosts"), case.name
        assert data.get("inventory", "compose") in INVENTORIES, case.name


def test_site_runs_these_plays_before_the_host_layer() -> None:
    site = [p["ansible.builtin.import_playbook"] for p in yaml.safe_load((REPO / "playbooks/site.yml").read_text())]
    here = [Path(p["ansible.builtin.import_playbook"]).name
            for p in yaml.safe_load((HERE / "until_host_layer.yml").read_text())]
    assert site[: len(here)] == here
    assert site[len(here)] == "host.yml"


@pytest.mark.parametrize("inventory", list(BASELINES))
def test_the_baseline_passes_every_check_and_changes_nothing(matrix, inventory: str) -> None:
    _results, baselines, _control, _ended, _unlisted = matrix
    if inventory not in baselines:
        pytest.skip(f"no selected case varies the {inventory} baseline")
    baseline, changes = baselines[inventory]
    assert baseline.returncode == 0, baseline.stdout[-3000:] + baseline.stderr[-2000:]
    assert not changes, "\n".join(changes)


def test_the_snapshot_sees_each_kind_of_change(matrix) -> None:
    """The control, made after every case: each change of CONTROL, made in turn, shows in its own part of the
    snapshot (and the boot file's shows nowhere else: the writable layer, as docker diff, would have missed it)."""
    _results, _baselines, control, _ended, _unlisted = matrix
    earlier: set[str] = set()
    for kind, changes in control.items():
        new = set(changes) - earlier
        parts = {line.split(":", 1)[0] for line in new}
        assert kind in parts, f"{kind}: {CONTROL[kind]!r} was not seen; new changes: {sorted(new)}"
        if kind == "boot files":
            assert parts == {"boot files"}, f"the appended wtmp showed elsewhere too: {sorted(new)}"
        earlier |= new


def test_the_writable_layer_holds_every_path_docker_diff_lists(matrix) -> None:
    """The snapshots read the writable layer instead of asking docker diff each time: at the reference, once every
    case has ended and after the control (which adds a path), docker diff lists nothing that layer did not hold."""
    _results, _baselines, _control, _ended, unlisted = matrix
    assert not any(unlisted.values()), unlisted


def test_nothing_is_left_once_every_case_has_ended(matrix) -> None:
    _results, _baselines, _control, ended, _unlisted = matrix
    assert not ended, "the node differs from its reference after the last case:\n" + "\n".join(ended)


def _retired_group(case: Path) -> str | None:
    """The baseline a retired-name case runs on together with the others of it, or None for a case run alone. A
    retired-<name> case sets a retired variable (or a few) on the compose or kubernetes baseline and expects its own
    refusal; _gpuops_vars' problems pass names every retired variable set, all at once, so those cases share one run
    per baseline (60-odd ansible-playbook runs fewer), and each is judged on that run as a case run alone is: it
    failed, printed the case's fragments, and changed nothing on the node."""
    data = yaml.safe_load(case.read_text())
    if not case.stem.startswith("retired-") or not set(data) <= {"expect", "vars", "inventory"}:
        return None
    return data.get("inventory", "compose")


def _baseline_of(data: dict) -> str:
    """The baseline a case varies: a case's own layout runs with the kubernetes baseline's group_vars; a health.yml
    case varies the health.yml dry run, a grow.yml case the grow.yml plan check (no flag: the plan is built and
    checked on the controller, nothing written), a burnin.yml case the burn-in of the node without GPUs (read by
    gpu_facts only)."""
    if data.get("playbook") in ("health", "grow", "burnin"):
        return data["playbook"]
    return "kubernetes" if "hosts" in data else data.get("inventory", "compose")


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_no_expected_fragment_is_in_the_accepted_output(matrix, case: Path) -> None:
    """A fragment the accepted run prints too would be found whether or not the case was refused."""
    _results, baselines, _control, _ended, _unlisted = matrix
    data = yaml.safe_load(case.read_text())
    baseline, _changes = baselines[_baseline_of(data)]
    output = baseline.stdout + baseline.stderr
    shared = [f for f in data["expect"] if f in output]
    assert not shared, f"{case.stem}: {shared} also in the accepted {_baseline_of(data)} run's output"


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_bad_input_is_refused_before_any_change(matrix, case: Path) -> None:
    results, _baseline, _control, _ended, _unlisted = matrix
    result, changes = results[case.stem]
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case.stem} was accepted:\n{output[-3000:]}"
    assert "unreachable=1" not in output, output[-3000:]
    missing = [f for f in yaml.safe_load(case.read_text())["expect"] if f not in output]
    errors = "\n".join(line for line in output.splitlines() if "ERROR" in line or "fatal:" in line or "msg" in line)
    assert not missing, f"{case.stem}: missing {missing} in:\n{errors[-4000:]}"
    found = [f for f in yaml.safe_load(case.read_text()).get("absent", []) if f in output]
    assert not found, f"{case.stem}: {found} printed in:\n{errors[-4000:]}"
    assert not changes, f"{case.stem}: the host changed:\n" + "\n".join(changes)
