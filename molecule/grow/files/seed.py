"""Test data for the grow scenario, logged through MLflow's own client inside the source server's container.

  seed   3 experiments x 2 runs: params, tags, a metric history of 200 steps, an artifact (model/weights.txt)
  late   one more run in the first experiment (the run logged after the copy, which verify must catch)
  change RUN_ID  set the run's tag team=changed (the failed verify the rollback test injects on the target)
  get    print {run_id: tags} of every run, as JSON
  users  (as the admin) the Compose members' MLflow users of GROW_MEMBERS ({name: password}; alice and bob), as
         compose_stack makes one per member; alice creates the experiment alice-exp (the auth app grants her MANAGE
         on it) and the registered model alice-model; the admin grants bob EDIT on alice-exp
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

client = MlflowClient()
command = sys.argv[1]
if command == "seed":
    now = int(time.time() * 1000)
    for e in range(3):
        exp = client.create_experiment(f"grow-exp-{e}", tags={"owner": "vision"})
        for r in range(2):
            run = client.create_run(exp, run_name=f"run-{e}-{r}", tags={"team": "vision", "seed": str(r)})
            rid = run.info.run_id
            client.log_param(rid, "lr", str(0.1 * (r + 1)))
            client.log_param(rid, "batch_size", "64")
            client.log_batch(rid, metrics=[Metric("loss", 1.0 / (s + 1), now + s, s) for s in range(200)])
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "weights.txt"
                path.write_text(f"weights of {e}/{r}\n")
                client.log_artifact(rid, str(path), artifact_path="model")
            client.set_terminated(rid)
    print("seeded")
elif command == "late":
    exp = client.get_experiment_by_name("grow-exp-0")
    run = client.create_run(exp.experiment_id, run_name="late")
    client.log_param(run.info.run_id, "late", "yes")
    print(run.info.run_id)
elif command == "change":
    client.set_tag(sys.argv[2], "team", "changed")
    print("changed")
elif command == "users":
    from mlflow.server import get_app_client

    members = json.loads(os.environ["GROW_MEMBERS"])
    auth = get_app_client("basic-auth", tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    for name, password in sorted(members.items()):
        auth.create_user(name, password)
    admin = (os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"])
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = "alice", members["alice"]
    exp = client.create_experiment("alice-exp")
    client.create_registered_model("alice-model")
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = admin
    auth.grant_user_permission("bob", "experiment", exp, "EDIT")
    print(exp)
elif command == "get":
    runs = {}
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id]):
            runs[run.info.run_id] = run.data.tags
    print(json.dumps(runs))
