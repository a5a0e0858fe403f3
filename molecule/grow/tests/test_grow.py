"""The MLflow move of grow.yml against two real MLflow servers (molecule/grow/molecule.yml says what stands in).

The converge copied the Compose store, upgraded the copy's schema with the target image's MLflow, started the
target from training_stack's rendered Deployment and compared both servers field by field. Here: the report says
equal with the seeded counts; a second copy into the non-empty store is refused; a run logged on the source after
the copy is caught by verify; a run changed on the target fails verify, and the rollback (the cluster side removed,
Compose left serving) leaves the Compose MLflow answering with its original runs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
TOOL = "/usr/local/lib/gpuops-grow/grow_mlflow.py"
SOURCE = "gpuops-grow-mlflow-compose"
TARGET = "gpuops-grow-mlflow-cluster"
SEEDED_EXPERIMENTS = 4  # the three seeded and MLflow's Default
SEEDED_RUNS = 6
STEPS = 200
SEED = (Path(__file__).resolve().parents[1] / "files" / "seed.py").read_text()


def _password(side: str) -> str:
    return (EPHEMERAL / "secrets" / f"{side}-admin").read_text().strip()


# Each server's own name: the target admits only the Host names training_stack renders in --allowed-hosts.
URLS = {"compose": "http://127.0.0.1:5000", "cluster": "http://mlflow.mlflow.svc:5000"}


def _client(container: str, side: str, *command: str) -> str:
    run = subprocess.run(["docker", "exec", "-i", "-e", f"MLFLOW_TRACKING_URI={URLS[side]}",
                          "-e", "MLFLOW_TRACKING_USERNAME=admin", "-e", f"MLFLOW_TRACKING_PASSWORD={_password(side)}",
                          container, "python3", "-", *command], input=SEED, capture_output=True, text=True,
                         check=False, timeout=300)
    assert run.returncode == 0, f"{container} {command}: {run.stderr[-2000:]}"
    return run.stdout.strip().splitlines()[-1]


def _verify(host) -> tuple[int, dict]:
    for side in ("compose", "cluster"):
        host.run(f"install -m 0600 /dev/null /root/.{side} && printf %s '{_password(side)}' > /root/.{side}")
    result = host.run(f"python3 {TOOL} verify http://mlflow:5000 http://mlflow.mlflow.svc:5000 --user admin "
                      "--password-file /root/.compose --target-password-file /root/.cluster")
    host.run("rm -f /root/.compose /root/.cluster")
    return result.rc, json.loads(result.stdout)


def test_converge_verified_every_field(host) -> None:
    report = json.loads(host.file("/root/gpuops-grow-verify.json").content_string)
    assert report["equal"] is True, report["differences"]
    assert report["counts"]["experiments"] == {"source": SEEDED_EXPERIMENTS, "target": SEEDED_EXPERIMENTS}
    assert report["counts"]["runs"] == {"source": SEEDED_RUNS, "target": SEEDED_RUNS}
    assert report["metric_points"] == SEEDED_RUNS * STEPS
    assert report["params"] == SEEDED_RUNS * 2
    assert report["artifacts"] == SEEDED_RUNS


def test_copy_into_a_non_empty_store_is_refused(host) -> None:
    result = host.run(f"python3 {TOOL} copy /srv/gpuops/mlflow /mnt/mlflow-store")
    assert result.rc != 0
    assert "exists already; the target store must be empty" in result.stderr


def test_run_after_the_copy_is_caught_then_rollback_keeps_compose_serving(host) -> None:
    late = _client(SOURCE, "compose", "late")
    rc, report = _verify(host)
    assert rc == 1
    assert f"runs.{late}: on the source only" in report["differences"]
    # a run changed on the target: verify fails on that field
    original = json.loads(_client(SOURCE, "compose", "get"))
    changed = next(run_id for run_id in original if run_id != late)
    _client(TARGET, "cluster", "change", changed)
    rc, report = _verify(host)
    assert rc == 1
    assert any(d.startswith(f"runs.{changed}.tags.team: source") for d in report["differences"]), report
    # rollback of the cluster side (the stand-in's server and store), Compose untouched
    subprocess.run(["docker", "rm", "-f", TARGET], check=True, capture_output=True, timeout=120)
    host.run("rm -rf /mnt/mlflow-store/backend /mnt/mlflow-store/artifacts")
    assert json.loads(_client(SOURCE, "compose", "get")) == original
    assert original[changed]["team"] == "vision"
