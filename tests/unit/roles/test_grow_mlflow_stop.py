"""The grow role's mlflow_stop: the one way the apply (before its copy) and the rollback (before it empties the store)
stop the cluster's MLflow - deployment/mlflow scaled to 0, then its pods waited for until gone, so the store is never
replaced beside a live server.

kubectl is a LABELLED TEST STAND-IN first on PATH: it records its arguments and answers the wait as the test says
(the two answers are kubectl's own wording: a pod that outlived the timeout, and no pod left to wait for). The real
kubectl against an API server is not run here; molecule/grow runs the rollback with a stand-in that stops a real
MLflow container.

Every case is a host of one run (case_hosts.py), with its own stand-in first on PATH (the play's environment) and its
own record of calls: a failed wait stops its own host only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from case_hosts import Case, kubectl_calls, kubectl_stand_in, run_cases

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "grow_mlflow_stop.yml"
KUBECTL = ["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", "-n", "mlflow"]
SCALE = [*KUBECTL, "scale", "deployment/mlflow", "--replicas=0"]
WAIT = [*KUBECTL, "wait", "--for=delete", "pod",
        "--selector=app.kubernetes.io/name=mlflow,app.kubernetes.io/managed-by=gpuops", "--timeout=300s"]
TIMED_OUT = "error: timed out waiting for the condition on pods/mlflow-7d9f8b6c5-x2x4q"
NO_POD = "error: no matching resources found"
# case -> the wait's exit status and stderr
CASES = {"pods-deleted": (0, ""), "no-pod-left": (1, NO_POD), "pod-still-there": (1, TIMED_OUT)}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, list[list[str]]]]:
    """mlflow_stop on every case's host, each with its own kubectl stand-in, whose wait exits with the case's status
    and stderr: each case's outcome and kubectl calls."""
    root = tmp_path_factory.mktemp("mlflow_stop")
    hosts = {}
    for case, (wait_rc, wait_stderr) in CASES.items():
        answer = (f"[ \"$5\" = wait ] && {{ echo '{wait_stderr}' >&2; exit {wait_rc}; }}\n"
                  "echo deployment.apps/mlflow scaled")
        hosts[case] = {"grow_test_bin": str(kubectl_stand_in(root / case, answer))}
    run = run_cases(PLAYBOOK, hosts, root / "run", cache="memory")
    return {case: (run.cases[case], kubectl_calls(root / case)) for case in CASES}


@pytest.mark.parametrize("case", ["pods-deleted", "no-pod-left"])
def test_scaled_to_zero_then_its_pods_waited_for(stopped, case: str) -> None:
    out, calls = stopped[case]
    assert not out.failed, out.text[-3000:]
    assert calls == [SCALE, WAIT]


def test_a_pod_still_there_fails_the_run(stopped) -> None:
    out, calls = stopped["pod-still-there"]
    assert out.failed, out.text[-3000:]
    assert calls == [SCALE, WAIT]
    assert "timed out waiting for the condition" in out.text


def _tasks_from(task: dict) -> str | None:
    return task.get("ansible.builtin.include_tasks")


def test_the_apply_stops_and_waits_before_its_copy() -> None:
    steps = yaml.safe_load((REPO / "roles" / "grow" / "tasks" / "apply.yml").read_text(encoding="utf-8"))
    order = [_tasks_from(task) for task in steps]
    assert order.index("mlflow_stop.yml") < order.index("mlflow_copy.yml"), order
    stop = steps[order.index("mlflow_stop.yml")]
    assert stop["vars"]["training_stack_mlflow_namespace"] == "{{ grow_plan_on_file.mlflow.target.namespace }}"


def test_the_rollback_stops_and_waits_before_it_touches_the_store() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "grow" / "tasks" / "mlflow_rollback.yml").read_text(encoding="utf-8"))
    assert _tasks_from(tasks[0]) == "mlflow_stop.yml", tasks[0]
    assert tasks[0]["when"] == "grow_mlflow_target_dir | length > 0"


def test_one_way_to_stop_it() -> None:
    """No second scale of deployment/mlflow to 0 beside mlflow_stop's (the apply's own had no wait)."""
    sources = [*(REPO / "playbooks").rglob("*.yml"), *(REPO / "roles").rglob("*.yml")]
    scaling = sorted(str(path.relative_to(REPO)) for path in sources
                     if re.search(r"deployment/mlflow,\s*--replicas=0", path.read_text(encoding="utf-8")))
    assert scaling == ["roles/grow/tasks/mlflow_stop.yml"]
