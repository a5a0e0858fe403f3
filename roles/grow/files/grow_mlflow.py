# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Copy the Compose MLflow store into the cluster's, and compare the two servers field by field.

Python standard library only: it runs on the Compose host (or in any MLflow image) with plain python3. What each
step keeps, merges and refuses, and why: docs/growth.md (steps 3 and 4, "MLflow users: a member is not lost").

  grow_mlflow.py copy SOURCE_DIR TARGET_DIR [--owner UID:GID] [--replace] [--skip-user ADMIN]
      Both stores as compose_stack and training_stack lay them out: backend/mlflow.db (SQLite, copied with the
      online backup API), artifacts/ and auth/basic_auth.db (the source's users merged into the target's, which is
      backed up first as auth/basic_auth.db.before-grow). A target holding runs or experiments is refused unless
      --replace. Run `mlflow db upgrade` with the target image afterwards.
  grow_mlflow.py verify SOURCE_URL TARGET_URL --user U --password-file F --target-user U --target-password-file F
      Both servers read through MLflow's REST API and compared; prints a JSON report; exit status 1 when anything
      differs, 2 on an error.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
import urllib.parse
import urllib.request
from pathlib import Path

PAGE = 1000
AUTH_DB = Path("auth") / "basic_auth.db"
# What MLflow's basic-auth app reads since its migration e5f6a7b8c9d0 (MLflow 3.x RBAC): users, their roles and the
# roles' permissions. The older per-resource tables (experiment_permissions...) are kept by MLflow as a paused
# snapshot for its downgrade only; the server neither reads nor writes them, so they are not merged.
AUTH_TABLES = ("users", "roles", "role_permissions", "user_role_assignments", "alembic_version_auth")
# A user's own grants hang off a role named after the user's id; the id changes on the target.
OWN_ROLE = re.compile(r"^__user_(\d+)__$")


def _chown(paths: list[Path], owner: str | None) -> None:
    if not owner:
        return
    uid, _sep, gid = owner.partition(":")
    for path in paths:
        os.chown(path, int(uid), int(gid or uid))


def _snapshot(path: Path, into: str | Path = ":memory:") -> sqlite3.Connection:
    """A copy of a SQLite database (in memory unless ``into`` names a file): SQLite's online backup, consistent while
    its server writes."""
    copy = sqlite3.connect(into)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        db.backup(copy)
    copy.row_factory = sqlite3.Row
    return copy


def _tables(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _holds_data(path: Path) -> bool:
    """A tracking database with runs, or experiments other than the Default one every MLflow server makes."""
    db = _snapshot(path)
    tables = _tables(db)
    runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    experiments = (db.execute("SELECT COUNT(*) FROM experiments WHERE name != 'Default'").fetchone()[0]
                   if "experiments" in tables else 0)
    return bool(runs or experiments)


def _revision(db: sqlite3.Connection) -> str | None:
    if "alembic_version_auth" not in _tables(db):
        return None
    row = db.execute("SELECT version_num FROM alembic_version_auth").fetchone()
    return row[0] if row else None


def auth_users(db: sqlite3.Connection) -> dict[str, dict]:
    """username -> is_admin, password hash and grants (workspace, role, resource type, pattern, permission; the
    role is 'own' for the user's own __user_<id>__ role) of a basic-auth database: what the auth app enforces."""
    users = {row["id"]: {"username": row["username"], "is_admin": bool(row["is_admin"]),
                         "password_hash": row["password_hash"], "grants": []}
             for row in db.execute("SELECT id, username, is_admin, password_hash FROM users")}
    for row in db.execute("SELECT a.user_id, r.name, r.workspace, p.resource_type, p.resource_pattern, p.permission "
                          "FROM user_role_assignments a JOIN roles r ON r.id = a.role_id "
                          "JOIN role_permissions p ON p.role_id = r.id"):
        if row[0] in users:
            role = "own" if OWN_ROLE.match(row[1]) else row[1]
            users[row[0]]["grants"].append(f"{row[2]}:{row[3]}:{row[4]}={row[5]} ({role})")
    return {u["username"]: {**u, "grants": sorted(u["grants"])} for u in users.values()}


def auth_problems(source: sqlite3.Connection, target: sqlite3.Connection | None, skip: set[str]) -> list[str]:
    """Why the source's users cannot be merged into the target's auth database; nothing has changed then."""
    carried = sorted(set(auth_users(source)) - skip) if set(AUTH_TABLES) <= _tables(source) else []
    if target is None:
        if not carried:
            return []
        return [f"the cluster's MLflow has no auth database ({AUTH_DB}) yet, and the source has users to carry "
                f"({', '.join(carried)}): the cluster's server creates it, and its admin "
                "from training_stack's Secret, at its first start. Fix: start the cluster's MLflow once "
                "(training_stack), then copy again"]
    missing = {side: sorted(set(AUTH_TABLES) - _tables(db)) for side, db in (("source", source), ("target", target))}
    problems = [f"the {side} auth database lacks the tables {', '.join(tables)} "
                "(MLflow's basic-auth schema with roles, MLflow 3.x); fix: start that MLflow server once with the "
                "pinned image (its auth app upgrades its database at start), then copy again"
                for side, tables in missing.items() if tables]
    if problems:
        return problems
    if _revision(source) != _revision(target):
        problems.append(f"the auth databases are at different schema revisions (source {_revision(source)}, target "
                        f"{_revision(target)}; alembic_version_auth) and rows are merged as they are. Fix: run both "
                        "servers at the same MLflow version once (the auth app upgrades its database at start)")
    taken = sorted(set(carried) & set(auth_users(target)))
    if taken:
        problems.append(f"the MLflow user(s) {', '.join(taken)} of the Compose MLflow exist on the cluster's MLflow "
                        "already (its admin, or the per-team users training_stack makes, named team-<team>); a "
                        "merge would replace their password or permissions. Fix: rename the Compose user (or "
                        "delete the cluster's one) so that no name is on both sides, then copy again")
    roles = {(r["workspace"], r["name"]) for r in target.execute("SELECT workspace, name FROM roles")}
    shared = sorted({(row["workspace"], row["name"]) for row in source.execute(
        "SELECT r.workspace, r.name, u.username FROM roles r JOIN user_role_assignments a ON a.role_id = r.id "
        "JOIN users u ON u.id = a.user_id") if row["username"] in carried and not OWN_ROLE.match(row["name"])} & roles)
    problems += [f"the MLflow role {name} (workspace {workspace}) of a Compose user exists on the cluster's MLflow "
                 "too; fix: rename one of them, then copy again" for workspace, name in shared]
    return problems


def _columns(db: sqlite3.Connection, table: str, without: tuple[str, ...]) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})") if row[1] not in without]


def _insert(db: sqlite3.Connection, table: str, values: dict) -> int:
    names = list(values)
    cursor = db.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        [values[n] for n in names])
    return int(cursor.lastrowid or 0)


def merge_auth(source: sqlite3.Connection, target: sqlite3.Connection, skip: set[str]) -> list[str]:
    """The source's users (but ``skip``), their roles and the roles' permissions, added to ``target`` under new
    ids (a user's own role renamed after its new id). One transaction: all or nothing. The names carried."""
    user_cols = _columns(source, "users", ("id",))
    role_cols = _columns(source, "roles", ("id",))
    perm_cols = _columns(source, "role_permissions", ("id", "role_id"))
    users = {row["id"]: row for row in source.execute("SELECT * FROM users") if row["username"] not in skip}
    new_user, new_role = {}, {}
    with target:
        for old_id, row in sorted(users.items()):
            new_user[old_id] = _insert(target, "users", {c: row[c] for c in user_cols})
        for assignment in source.execute("SELECT user_id, role_id FROM user_role_assignments ORDER BY id"):
            if assignment["user_id"] not in new_user:
                continue
            old_role = assignment["role_id"]
            if old_role not in new_role:
                role = dict(source.execute("SELECT * FROM roles WHERE id = ?", (old_role,)).fetchone())
                own = OWN_ROLE.match(role["name"])
                if own:
                    role["name"] = f"__user_{new_user.get(int(own.group(1)), new_user[assignment['user_id']])}__"
                new_role[old_role] = _insert(target, "roles", {c: role[c] for c in role_cols})
                for perm in source.execute("SELECT * FROM role_permissions WHERE role_id = ?", (old_role,)):
                    _insert(target, "role_permissions",
                            {"role_id": new_role[old_role], **{c: perm[c] for c in perm_cols}})
            _insert(target, "user_role_assignments", {"user_id": new_user[assignment["user_id"]],
                                                      "role_id": new_role[old_role]})
    return sorted(row["username"] for row in users.values())


def copy_store(source: Path, target: Path, replace: bool = False, owner: str | None = None,
               skip_users: tuple[str, ...] = ()) -> dict:
    src_db, dst_db = source / "backend" / "mlflow.db", target / "backend" / "mlflow.db"
    if not src_db.is_file():
        raise SystemExit(f"copy: no MLflow database at {src_db}; expected the Compose store's backend/mlflow.db")
    if dst_db.exists() and not replace and _holds_data(dst_db):
        raise SystemExit(f"copy: {dst_db} exists already and holds runs or experiments; the target store must be "
                         "empty (or pass --replace)")
    src_auth, dst_auth = source / AUTH_DB, target / AUTH_DB
    skip = set(skip_users)
    auth_source = _snapshot(src_auth) if src_auth.is_file() else None
    auth_target = _snapshot(dst_auth) if dst_auth.is_file() else None
    if auth_source is not None:
        problems = auth_problems(auth_source, auth_target, skip)
        if problems:
            raise SystemExit("copy: nothing was copied: " + " | ".join(problems))
    dst_db.parent.mkdir(parents=True, exist_ok=True)
    for leftover in ("-wal", "-shm", "-journal"):  # of the replaced database, stale for the copy
        dst_db.with_name(dst_db.name + leftover).unlink(missing_ok=True)
    partial = dst_db.with_suffix(".db.partial")
    partial.unlink(missing_ok=True)
    _snapshot(src_db, partial).close()
    partial.replace(dst_db)
    src_art, dst_art = source / "artifacts", target / "artifacts"
    dst_art.mkdir(parents=True, exist_ok=True)
    if src_art.is_dir():
        shutil.copytree(src_art, dst_art, dirs_exist_ok=True)
    files = [path for path in src_art.rglob("*") if path.is_file()]
    _chown([target, dst_db.parent, dst_db, dst_art, *dst_art.rglob("*")], owner)
    report = {"database": str(dst_db), "artifact_files": len(files),
              "artifact_bytes": sum(path.stat().st_size for path in files), "users": []}
    if auth_source is not None and auth_target is not None:
        report.update(_merge_users(auth_source, dst_auth, skip, owner))
    return report


def _merge_users(source: sqlite3.Connection, dst_auth: Path, skip: set[str], owner: str | None) -> dict:
    """The merge into the target's auth database (backed up first), then read back: each carried user has the
    source's password hash and grants."""
    backup = dst_auth.with_name(dst_auth.name + ".before-grow")
    if not backup.exists():  # an earlier, rolled-back attempt's backup is the original: keep it
        _snapshot(dst_auth, backup).close()
        _chown([backup], owner)
    try:
        with sqlite3.connect(dst_auth) as target:
            target.row_factory = sqlite3.Row
            carried = merge_auth(source, target, skip)
    except sqlite3.Error as exc:  # the transaction is rolled back: the target's users are as they were
        raise SystemExit(f"copy: the users were not merged ({type(exc).__name__}: {exc}); the cluster's auth "
                         f"database is unchanged, the tracking store and artifacts were copied. Fix the cause, "
                         "then roll back (grow_rollback) and apply again") from exc
    before, after = auth_users(source), auth_users(_snapshot(dst_auth))
    lost = [name for name in carried if after.get(name) != before[name]]
    if lost:
        raise SystemExit(f"copy: the merged user(s) {', '.join(lost)} differ from the source after the merge; the "
                         f"target's auth database before the merge is {backup}")
    return {"users": carried, "auth_database": str(dst_auth), "auth_backup": str(backup)}


class Server:
    """MLflow's REST API, read-only."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.url = url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Content-Type": "application/json", "Authorization": f"Basic {token}"}

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

    def pages(self, path: str, key: str, body: dict | None = None, query: dict | None = None) -> list:
        """Every ``key`` entry of a paged search (next_page_token), ``body`` for a POST, else ``query``."""
        found, token = [], {}
        while True:
            page = (self.call(path, {**body, **token}) if body is not None
                    else self.call(path, query={**(query or {}), **token}))
            found += page.get(key, [])
            if not page.get("next_page_token"):
                return found
            token = {"page_token": page["next_page_token"]}

    def experiments(self) -> list[dict]:
        return self.pages("/api/2.0/mlflow/experiments/search", "experiments",
                          {"max_results": PAGE, "view_type": "ALL"})

    def runs(self, experiment_id: str) -> list[dict]:
        return self.pages("/api/2.0/mlflow/runs/search", "runs",
                          {"experiment_ids": [experiment_id], "max_results": PAGE, "run_view_type": "ALL"})

    def history(self, run_id: str, key: str) -> list[tuple]:
        metrics = self.pages("/api/2.0/mlflow/metrics/get-history", "metrics",
                             query={"run_id": run_id, "metric_key": key, "max_results": 25000})
        return sorted(((m.get("step", 0), m.get("timestamp"), m.get("value")) for m in metrics),
                      key=lambda m: (m[0], m[1] or 0, str(m[2])))

    def artifacts(self, run: dict) -> dict[str, str]:
        """Relative path -> SHA-256 of every artifact file of ``run``. The server resolves the run's artifact root
        itself, a proxied one (mlflow-artifacts:, --serve-artifacts, as both our servers run) included."""
        run_id = run["info"]["run_id"]
        found: dict[str, str] = {}
        pending = [""]
        while pending:
            sub = pending.pop()
            query = {"run_id": run_id, **({"path": sub} if sub else {})}
            for entry in self.call("/api/2.0/mlflow/artifacts/list", query=query).get("files", []):
                if entry.get("is_dir"):
                    pending.append(entry["path"])
                else:
                    found[entry["path"]] = self.sha256("/get-artifact", {"path": entry["path"], "run_uuid": run_id})
        return found


def users(server: Server, skip: set[str]) -> dict:
    """Every user but ``skip`` as the server's auth API shows it (as the admin): admin or not, and each permission
    (workspace:resource type:pattern=permission, and the role: 'own' for the user's own __user_<id>__ role)."""
    found = {}
    for user in server.call("/api/2.0/mlflow/users/list").get("users", []):
        if user["username"] in skip:
            continue
        listing = server.call("/api/3.0/mlflow/users/permissions/list", query={"username": user["username"]})
        found[user["username"]] = {"is_admin": bool(user.get("is_admin")), "permissions": sorted(
            f"{p['workspace']}:{p['resource_type']}:{p['resource_pattern']}={p['permission']} "
            f"({'own' if OWN_ROLE.match(p.get('role_name') or '') else p.get('role_name')})"
            for p in listing.get("permissions", []))}
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
                "tags": {t["key"]: t["value"] for t in data.get("tags", [])},
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


def verify(source: Server, target: Server, skip_users: tuple[str, ...] = ()) -> dict:
    src, dst = snapshot(source), snapshot(target)
    found: list[str] = []
    # Users: each source user (not the admin) on the target with the same permissions; the target's own users
    # (its admin, the per-team users) are not the source's and are not compared.
    src_users = users(source, set(skip_users))
    dst_users = users(target, set(skip_users))
    _differences("users", src_users, {name: dst_users[name] for name in src_users if name in dst_users}, found)
    counts = {"experiments": [len(src["experiments"]), len(dst["experiments"])],
              "runs": [len(src["runs"]), len(dst["runs"])]}
    _differences("experiments", src["experiments"], dst["experiments"], found)
    _differences("runs", src["runs"], dst["runs"], found)
    return {
        "equal": not found, "differences": found,
        "counts": {k: {"source": a, "target": b} for k, (a, b) in counts.items()},
        "params": sum(len(r["params"]) for r in src["runs"].values()),
        "tags": sum(len(r["tags"]) for r in src["runs"].values()),
        "metric_points": sum(len(h) for r in src["runs"].values() for h in r["metric_histories"].values()),
        "artifacts": sum(len(r["artifacts"]) for r in src["runs"].values()),
        "users": sorted(src_users),
        "user_permissions": sum(len(u["permissions"]) for u in src_users.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    cp = sub.add_parser("copy")
    cp.add_argument("source", type=Path)
    cp.add_argument("target", type=Path)
    cp.add_argument("--replace", action="store_true")
    cp.add_argument("--owner", help="uid:gid the target server runs as; everything copied is given to it")
    cp.add_argument("--skip-user", action="append", default=[],
                    help="a source user not carried over (the Compose admin; the cluster has its own)")
    vf = sub.add_parser("verify")
    vf.add_argument("source")
    vf.add_argument("target")
    vf.add_argument("--user", required=True)
    vf.add_argument("--password-file", type=Path, required=True)
    vf.add_argument("--target-user", required=True)
    vf.add_argument("--target-password-file", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "copy":
        print(json.dumps(copy_store(args.source, args.target, args.replace, args.owner, tuple(args.skip_user))))
        return 0
    try:
        report = verify(Server(args.source, args.user, args.password_file.read_text().strip()),
                        Server(args.target, args.target_user, args.target_password_file.read_text().strip()),
                        (args.user, args.target_user))
    except (OSError, ValueError) as exc:
        print(json.dumps({"equal": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps(report))
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
