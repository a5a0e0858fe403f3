"""What every GPU-host test shares: running a command or a playbook, the GPUs ``nvidia-smi -L`` lists, keeping outputs.

``LISTED`` is the GPUs ``nvidia-smi -L`` lists here (``[]`` with no nvidia-smi or no working driver), ``NO_GPU`` why
there are none, or None. ``listed_nonempty(items, what)`` is called before each loop over GPUs, links or rows: where
``nvidia-smi -L`` lists GPUs, an empty list is a failure (a test that loops over nothing proves nothing: issue 36,
where four topology tests passed on zero GPUs because the parser read no matrix).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .nvidia_smi_list import parse_nvidia_smi_list

ROOT = Path(__file__).resolve().parents[2]


def run(argv):
    """``(rc, stdout, stderr)`` of ``argv`` under ``LC_ALL=C``, as the modules run their commands."""
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _listed() -> tuple[list, str | None]:
    """GPUs from `nvidia-smi -L`, or why there are none to test."""
    if not shutil.which("nvidia-smi"):
        return [], "no nvidia-smi in PATH: not a GPU host"
    rc, out, err = run(["nvidia-smi", "-L"])
    if rc != 0:
        return [], f"`nvidia-smi -L` exited {rc} ({' '.join((out or err).split())[:200]}): no working driver"
    gpus = parse_nvidia_smi_list(out)
    return gpus, None if gpus else f"`nvidia-smi -L` lists no GPU: {' '.join(out.split())[:200]}"


LISTED, NO_GPU = _listed()


def listed_nonempty(items, what: str):
    """``items``, after asserting it is not empty where ``nvidia-smi -L`` lists GPUs."""
    if LISTED:
        assert items, f"no {what} to check, although `nvidia-smi -L` lists {len(LISTED)} GPU(s)"
    return items


def keep(name: str, content) -> None:
    """Write ``content`` (text, or JSON of anything else) to ``$GPUOPS_LIVE_OUT/name`` when that is set."""
    out = os.environ.get("GPUOPS_LIVE_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, indent=2, default=str)
        (Path(out) / name).write_text(text)


def gpuops_run(playbook: str, inventory: Path, artifacts: Path, *extra: str) -> subprocess.CompletedProcess:
    """``gpuops-run <playbook>`` on ``inventory`` (conftest's ``inventory``: this host); ``GPUOPS_VALIDATE_EXTRA``, a
    JSON dict, is added to validate's extra vars (e.g. images a host without network can reach)."""
    args = [sys.executable, "-m", "gpuops_run", playbook, "-i", str(inventory), "--artifacts", str(artifacts), *extra]
    more = os.environ.get("GPUOPS_VALIDATE_EXTRA")
    if more and playbook == "validate":
        args += ["-e", more]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
