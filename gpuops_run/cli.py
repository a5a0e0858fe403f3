"""gpuops-run: run a gpuops.cluster playbook through ansible-runner, with live progress, summary.json,
junit.xml and the runner's own artifacts; the exit codes are the parser's epilog (summary.exit_code decides them).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import ansible_runner

from .progress import Progress
from .summary import EXIT_USAGE, RunFold, exit_code, junit_xml, recap_line, summarise

PLAYBOOKS = ("site", "preflight", "validate", "burnin", "diagnose", "upgrade_driver", "health", "grow", "render")


class UsageError(Exception):
    """A usage or inventory problem: printed as one line, exit 4."""


def _collection_roots() -> list[Path]:
    """Where gpuops.cluster can be: the checkout around the working directory, then Ansible's
    collection paths (ANSIBLE_COLLECTIONS_PATH, then the defaults)."""
    roots = []
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        galaxy = folder / "galaxy.yml"
        if galaxy.is_file() and "name: cluster" in galaxy.read_text(errors="replace"):
            roots.append(folder)
            break
    paths = os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")
    defaults = [Path.home() / ".ansible/collections", Path("/usr/share/ansible/collections")]
    for base in [Path(p) for p in paths.split(os.pathsep) if p] + defaults:
        candidate = base / "ansible_collections" / "gpuops" / "cluster"
        if (candidate / "playbooks").is_dir():
            roots.append(candidate.resolve())
    return roots


def resolve_playbook(name: str) -> tuple[Path, Path]:
    """PLAYBOOK -> (playbook file, collection root). A path is taken as it is; a short name
    (site, validate, ...) is looked up in playbooks/ of the checkout or the installed collection."""
    as_path = Path(name)
    if as_path.suffix in (".yml", ".yaml") and as_path.is_file():
        roots = _collection_roots()
        return as_path.resolve(), roots[0] if roots else Path.cwd()
    short = name.removeprefix("gpuops.cluster.")
    for root in _collection_roots():
        candidate = root / "playbooks" / f"{short}.yml"
        if candidate.is_file():
            return candidate, root
    raise UsageError(
        f"playbook '{name}' not found: not a .yml file, and no playbooks/{short}.yml in this checkout or an "
        f"installed gpuops.cluster collection (known: {', '.join(PLAYBOOKS)})")


def check_inventory(inventory: str, root: Path, env: dict) -> None:
    """Refuse a missing or unparsable inventory in one line, before the run."""
    if "," not in inventory and not Path(inventory).exists():
        raise UsageError(f"inventory '{inventory}' does not exist")
    proc = subprocess.run(["ansible-inventory", "-i", inventory, "--list"], cwd=root, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        # The parser's own complaint ("Failed to parse ... with yaml plugin: ...") says more than the generic
        # "No inventory was parsed" that follows it.
        why = next((ln.removeprefix("[WARNING]:").strip() for ln in lines if "Failed to parse" in ln),
                   next((ln for ln in lines if "ERROR" in ln), lines[-1] if lines else "unknown error"))
        origin = next((ln for ln in lines if ln.startswith("Origin:")), "")
        why = f"{why} ({origin})" if origin else why
        raise UsageError(f"inventory '{inventory}' cannot be read: {why}")
    hosts = json.loads(proc.stdout or "{}").get("_meta", {}).get("hostvars", {})
    if not hosts:
        raise UsageError(f"inventory '{inventory}' has no hosts")


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpuops-run",
        description="Run a gpuops.cluster playbook with live progress; write summary.json and junit.xml.",
        epilog="exit codes: 0 ok (burnin: every check PASS), 1 burnin: a check WARN or UNKNOWN, 2 a host failed "
               "(burnin: a check FAIL), 3 hosts unreachable only, 4 usage or inventory error")
    parser.add_argument("playbook", help=f"one of {', '.join(PLAYBOOKS)}, or a playbook file")
    parser.add_argument("-i", "--inventory", required=True, help="inventory file, directory or host list")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], help="as ansible-playbook -e (repeatable)")
    parser.add_argument("--check", action="store_true", help="check mode: predict changes, make none")
    parser.add_argument("--limit", help="as ansible-playbook --limit")
    parser.add_argument("--tags", help="as ansible-playbook --tags")
    parser.add_argument("--artifacts", help="artifacts directory (default: reports/runs/<UTC timestamp>)")

    def error(message: str) -> None:
        raise UsageError(message)

    parser.error = error  # one line and exit 4, instead of argparse's exit 2
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    playbook, root = resolve_playbook(args.playbook)
    inventory = args.inventory if "," in args.inventory else str(Path(args.inventory).resolve())
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    artifacts = Path(args.artifacts or Path("reports") / "runs" / stamp).resolve()
    # A rerun into the same directory starts clean: the runner would add this run's events to the last one's.
    shutil.rmtree(artifacts / "runner" / "artifacts" / "run", ignore_errors=True)
    (artifacts / "runner").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The ansible-playbook next to this interpreter (the venv's), even when the venv is not on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if (root / "ansible.cfg").is_file() and "ANSIBLE_CONFIG" not in env:
        env["ANSIBLE_CONFIG"] = str(root / "ansible.cfg")
    # An inventory source Ansible cannot parse is an error, not an empty inventory and a green run.
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"
    env |= {"ANSIBLE_NOCOLOR": "true", "ANSIBLE_FORCE_COLOR": "false"}
    check_inventory(inventory, root, env)
    extra = [arg for value in args.extra_vars for arg in ("-e", value)]
    for flag, value in (("--limit", args.limit), ("--tags", args.tags)):
        if value:
            extra += [flag, value]
    fold = RunFold()
    cmdline = shlex.join([*extra, *(["--check"] if args.check else [])])
    print(f"gpuops-run: {playbook} -i {inventory} {cmdline}".rstrip(), flush=True)
    result = ansible_runner.run(
        private_data_dir=str(artifacts / "runner"), project_dir=str(root), playbook=str(playbook),
        inventory=inventory, cmdline=cmdline or None,
        envvars={k: v for k, v in env.items() if k.startswith("ANSIBLE_") or k == "PATH"},
        event_handler=Progress(fold), quiet=True, ident="run")
    summary = summarise(fold, rc=result.rc, status=result.status)
    summary |= {"playbook": str(playbook), "inventory": inventory, "check_mode": args.check,
                "ansible_args": extra, "runner_artifacts": str(artifacts / "runner" / "artifacts" / "run")}
    code = exit_code(summary)
    summary["exit_code"] = code
    (artifacts / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (artifacts / "junit.xml").write_text(junit_xml(summary))
    for name, host in summary["hosts"].items():
        print(recap_line(name, host))
    if code == EXIT_USAGE:
        stdout = artifacts / "runner" / "artifacts" / "run" / "stdout"
        text = stdout.read_text(errors="replace") if stdout.exists() else ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        why = next((ln for ln in lines if "ERROR" in ln), lines[-1] if lines else f"runner status {result.status}")
        print(f"gpuops-run: ERROR: the run did not start: {why.strip()}", file=sys.stderr)
    if summary["verdict"]:
        print(f"gpuops-run: verdict {summary['verdict'].get('verdict')} ({summary['verdict'].get('report')})")
    print(f"gpuops-run: exit {code}; summary.json, junit.xml and the runner's artifacts in {artifacts}")
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        return run(_args(argv))
    except UsageError as exc:
        print(f"gpuops-run: ERROR: {exc}", file=sys.stderr)
        return EXIT_USAGE
