# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Copy the Compose MLflow store into the cluster's, and compare the two servers field by field.

Python standard library only: it runs on the Compose host (or in any MLflow image) with plain python3.

  grow_mlflow.py copy SOURCE_DIR TARGET_DIR [--owner UID:GID] [--replace]
      SOURCE_DIR and TARGET_DIR are MLflow stores laid out as compose_stack and training_stack lay them out:
      backend/mlflow.db (SQLite) and artifacts/. The database is copied with SQLite's online backup API (a
      consistent copy while the source server keeps running), the artifacts file by file. Experiment ids, run ids,
      params, metric histories and tags are rows of the database, so they are kept as they are; artifact URIs of
      the form mlflow-artifacts:/... are relative to the server's --artifacts-destination, so they stay valid.
      The schema upgrade is MLflow's own: run `mlflow db upgrade sqlite:///TARGET_DIR/backend/mlflow.db` with the
      target image's MLflow afterwards. Refuses a TARGET_DIR that already holds a database (use --replace).
      --owner gives everything copied to the uid:gid the target server runs as.
  grow_mlflow.py verify SOURCE_URL TARGET_URL [--user U --password-file F]
      Reads both servers through MLflow's REST API and compares: the experiments (ids, names, lifecycle), the runs
      of each (ids, status, lifecycle), every run's params and tags, each metric's history (length, then values),
      and every artifact's SHA-256. Prints a JSON report; exit status 1 when anything differs, 2 on an error.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import sqlite3
import sys
import urllib.parse
import urllib.request
from pathlib import Path

PAGE = 1000
# Tags MLflow's server may set on its own on either side; none today, kept as the one place to list them.
IGNORED_TAGS: frozenset[str] = frozenset()


def _chown(paths: list[Path], owner: str | None) -> None:
    if not owner:
        return
    uid, _sep, gid = owner.partition(":")
    for path in paths:
        os.chown(path, int(uid), int(gid or uid))


def copy_store(source: Path, target: Path, replace: bool = False, owner: str | None = None) -> dict:
    src_db, dst_db = source / "backend" / "mlflow.db", target / "backend" / "mlflow.db"
    if not src_db.is_file():
        raise SystemExit(f"copy: no MLflow database at {src_db}; expected the Compose store's backend/mlflow.db")
    if dst_db.exists() and not replace:
        raise SystemExit(f"copy: {dst_db} exists already; the target store must be empty (or pass --replace)")
    dst_db.parent.mkdir(parents=True, exist_ok=True)
    partial = dst_db.with_suffix(".db.partial")
    partial.unlink(missing_ok=True)
    with sqlite3.connect(f"file:{src_db}?mode=ro", uri=True) as src, sqlite3.connect(partial) as dst:
        src.backup(dst)
    partial.replace(dst_db)
    files = 0
    size = 0
    src_art, dst_art = source / "artifacts", target / "artifacts"
    dst_art.mkdir(parents=True, exist_ok=True)
    if src_art.is_dir():
        for path in sorted(src_art.rglob("*")):
            out = dst_art / path.relative_to(src_art)
            if path.is_dir():
                out.mkdir(parents=True, exist_ok=True)
            elif path.is_file():
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)
                files += 1
                size += path.stat().st_size
    _chown([target, dst_db.parent, dst_db, dst_art, *dst_art.rglob("*")], owner)
    return {"database": str(dst_db), "artifact_files": files, "artifact_bytes": size}


class Server:
    """MLflow's REST API, read-only."""

    def __init__(self, url: str, user: str | None, password: str | None) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if user:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"

    def _open(self, path: str, body: dict | None = None, query: dict | None = None):
        url = self.url + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=self.headers, method="POST" if data else "GET")
        return urllib.request.urlopen(request, timeout=60)

    def call(self, path: str, body: dict | None = None, query: dict | None = None) -> dict:
        with self._open(path, body, query) as answer:
            return json.loads(answer.read() or b"{}")

    def sha256(self, path: str, query: dict | None = None) -> str:
        digest = hashlib.sha256()
        with self._open(path, query=query) as answer:
            for chunk in iter(lambda: answer.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def experiments(self) -> list[dict]:
        found, token = [], None
        while True:
            body = {"max_results": PAGE, "view_type": "ALL", **({"page_token": token} if token else {})}
            page = self.call("/api/2.0/mlflow/experiments/search", body)
            found += page.get("experiments", [])
            token = page.get("next_page_token")
            if not token:
                return found

    def runs(self, experiment_id: str) -> list[dict]:
        found, token = [], None
        while True:
            body = {"experiment_ids": [experiment_id], "max_results": PAGE, "run_view_type": "ALL",
                    **({"page_token": token} if token else {})}
            page = self.call("/api/2.0/mlflow/runs/search", body)
            found += page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                return found

    def history(self, run_id: str, key: str) -> list[tuple]:
        found, token = [], None
        while True:
            query = {"run_id": run_id, "metric_key": key, "max_results": 25000,
                     **({"page_token": token} if token else {})}
            page = self.call("/api/2.0/mlflow/metrics/get-history", query=query)
            found += [(m.get("step", 0), m.get("timestamp"), m.get("value")) for m in page.get("metrics", [])]
            token = page.get("next_page_token")
            if not token:
                return sorted(found, key=lambda m: (m[0], m[1] or 0, str(m[2])))

    def artifacts(self, run: dict) -> dict[str, str]:
        """Relative path -> SHA-256 of every artifact file of ``run``."""
        uri = run["info"].get("artifact_uri") or ""
        proxied = uri.startswith("mlflow-artifacts:")
        root = uri.split(":", 1)[1].lstrip("/") if proxied else ""
        found: dict[str, str] = {}
        pending = [""]
        while pending:
            sub = pending.pop()
            if proxied:
                listing = self.call("/api/2.0/mlflow-artifacts/artifacts",
                                    query={"path": f"{root}/{sub}".rstrip("/")})
            else:
                query = {"run_id": run["info"]["run_id"], **({"path": sub} if sub else {})}
                listing = self.call("/api/2.0/mlflow/artifacts/list", query=query)
            for entry in listing.get("files", []):
                rel = f"{sub}/{entry['path'].rsplit('/', 1)[-1]}".lstrip("/") if proxied else entry["path"]
                if entry.get("is_dir"):
                    pending.append(rel)
                elif proxied:
                    found[rel] = self.sha256(f"/api/2.0/mlflow-artifacts/artifacts/{urllib.parse.quote(root)}/"
                                             f"{urllib.parse.quote(rel)}")
                else:
                    found[rel] = self.sha256("/get-artifact", {"path": rel, "run_uuid": run["info"]["run_id"]})
        return found


def snapshot(server: Server) -> dict:
    """Everything verify compares, of one server."""
    out: dict = {"experiments": {}, "runs": {}}
    for exp in server.experiments():
        out["experiments"][exp["experiment_id"]] = {"name": exp["name"], "lifecycle_stage": exp.get("lifecycle_stage"),
                                                    "tags": {t["key"]: t["value"] for t in exp.get("tags", [])}}
        for run in server.runs(exp["experiment_id"]):
            info, data = run["info"], run.get("data", {})
            run_id = info["run_id"]
            metrics = {m["key"] for m in data.get("metrics", [])}
            histories = {key: server.history(run_id, key) for key in sorted(metrics)}
            out["runs"][run_id] = {
                "experiment_id": info["experiment_id"], "run_name": info.get("run_name"),
                "status": info.get("status"), "lifecycle_stage": info.get("lifecycle_stage"),
                "start_time": info.get("start_time"), "end_time": info.get("end_time"),
                "params": {p["key"]: p["value"] for p in data.get("params", [])},
                "tags": {t["key"]: t["value"] for t in data.get("tags", []) if t["key"] not in IGNORED_TAGS},
                "metric_history_lengths": {k: len(v) for k, v in histories.items()},
                "metric_histories": histories,
                "artifacts": server.artifacts(run),
            }
    return out


def _differences(where: str, source: object, target: object, found: list[str]) -> None:
    if isinstance(source, dict) and isinstance(target, dict):
        for key in sorted(set(source) | set(target), key=str):
            if key not in target:
                found.append(f"{where}.{key}: on the source only")
            elif key not in source:
                found.append(f"{where}.{key}: on the target only")
            else:
                _differences(f"{where}.{key}", source[key], target[key], found)
    elif source != target:
        found.append(f"{where}: source {json.dumps(source)[:200]}, target {json.dumps(target)[:200]}")


def verify(source: Server, target: Server) -> dict:
    src, dst = snapshot(source), snapshot(target)
    found: list[str] = []
    counts = {"experiments": [len(src["experiments"]), len(dst["experiments"])],
              "runs": [len(src["runs"]), len(dst["runs"])]}
    for kind, (a, b) in counts.items():
        if a != b:
            found.append(f"{kind}: {a} on the source, {b} on the target")
    _differences("experiments", src["experiments"], dst["experiments"], found)
    _differences("runs", src["runs"], dst["runs"], found)
    return {
        "equal": not found, "differences": found,
        "counts": {k: {"source": a, "target": b} for k, (a, b) in counts.items()},
        "params": sum(len(r["params"]) for r in src["runs"].values()),
        "tags": sum(len(r["tags"]) for r in src["runs"].values()),
        "metric_points": sum(sum(r["metric_history_lengths"].values()) for r in src["runs"].values()),
        "artifacts": sum(len(r["artifacts"]) for r in src["runs"].values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    cp = sub.add_parser("copy")
    cp.add_argument("source", type=Path)
    cp.add_argument("target", type=Path)
    cp.add_argument("--replace", action="store_true")
    cp.add_argument("--owner", help="uid:gid the target server runs as; everything copied is given to it")
    vf = sub.add_parser("verify")
    vf.add_argument("source")
    vf.add_argument("target")
    vf.add_argument("--user")
    vf.add_argument("--password-file", type=Path)
    vf.add_argument("--target-user")
    vf.add_argument("--target-password-file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "copy":
        print(json.dumps(copy_store(args.source, args.target, args.replace, args.owner)))
        return 0
    password = args.password_file.read_text().strip() if args.password_file else None
    target_password = args.target_password_file.read_text().strip() if args.target_password_file else password
    try:
        report = verify(Server(args.source, args.user, password),
                        Server(args.target, args.target_user or args.user, target_password))
    except (OSError, ValueError) as exc:
        print(json.dumps({"equal": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps(report))
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
