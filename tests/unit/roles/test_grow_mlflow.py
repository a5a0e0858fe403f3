"""roles/grow/files/grow_mlflow.py: the MLflow users carried over by the growth copy, and verify's user comparison.

The auth databases are MLflow 3.17.2's own (fixtures/mlflow_auth_3.17.2.json: made by MLflow's auth store in the
pinned image, see fixtures/capture_mlflow_auth.py), so the merge runs on the schema, password hashes and grants the
server writes. The tracking databases here are labelled stand-ins: only the two tables the copy's emptiness check
reads (experiments, runs). The servers verify reads are stand-ins answering as MLflow's auth handlers do
(users/list, users/permissions/list); molecule/grow runs the same against real servers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "mlflow_auth_3.17.2.json").read_text(encoding="utf-8"))
_SPEC = importlib.util.spec_from_file_location("grow_mlflow", REPO / "roles" / "grow" / "files" / "grow_mlflow.py")
assert _SPEC is not None
assert _SPEC.loader is not None
gm = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gm)


def _db(path: Path, statements: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript("\n".join(s if s.rstrip().endswith(";") else s + ";" for s in statements))
    return path


def _tracking(path: Path, experiments: list[str], runs: int) -> Path:
    """Stand-in tracking database: the two tables the copy's check reads, not MLflow's full schema."""
    return _db(path, ["CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)",
                      "CREATE TABLE runs (run_uuid TEXT PRIMARY KEY)",
                      *[f"INSERT INTO experiments (experiment_id, name) VALUES ({i}, '{name}')"
                        for i, name in enumerate(experiments)],
                      *[f"INSERT INTO runs VALUES ('run{i}')" for i in range(runs)]])


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    source, target = tmp_path / "compose", tmp_path / "cluster"
    _tracking(source / "backend" / "mlflow.db", ["Default", "grow-exp"], 2)
    _db(source / "auth" / "basic_auth.db", FIXTURE["source"])
    _tracking(target / "backend" / "mlflow.db", ["Default"], 0)  # what the cluster's server made at its first start
    _db(target / "auth" / "basic_auth.db", FIXTURE["target"])
    return source, target


def _users(path: Path) -> dict:
    return gm.auth_users(gm._snapshot(path))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fixture_is_the_pinned_mlflow() -> None:
    assert FIXTURE["mlflow"] == "3.17.2"


def test_members_carried_with_their_hashes_and_grants_the_cluster_users_kept(stores) -> None:
    source, target = stores
    before_src, before_dst = _users(source / gm.AUTH_DB), _users(target / gm.AUTH_DB)
    report = gm.copy_store(source, target, skip_users=("admin",))
    assert report["users"] == ["alice", "bob"]
    after = _users(target / gm.AUTH_DB)
    for name in ("alice", "bob"):
        assert after[name] == before_src[name]
    assert after["alice"]["grants"] == ["default:experiment:1=MANAGE (own)",
                                        "default:registered_model:alice-model=MANAGE (own)"]
    assert after["bob"]["grants"] == ["default:experiment:1=EDIT (own)"]
    # the cluster's admin keeps its own password hash (the Secret's), its team user stays
    assert after["admin"] == before_dst["admin"] != before_src["admin"]
    assert after["team-vision"] == before_dst["team-vision"]
    assert set(after) == {"admin", "team-vision", "alice", "bob"}
    # each member's own role is named after the member's new id, and assigned to that member only
    db = gm._snapshot(target / gm.AUTH_DB)
    for name in ("alice", "bob"):
        (user_id,) = db.execute("SELECT id FROM users WHERE username = ?", (name,)).fetchone()
        roles = [r[0] for r in db.execute("SELECT r.name FROM roles r JOIN user_role_assignments a ON a.role_id = r.id "
                                          "WHERE a.user_id = ?", (user_id,))]
        assert roles == [f"__user_{user_id}__"]
    # the target's database before the merge is kept, and holds no member
    assert set(_users(Path(report["auth_backup"]))) == {"admin", "team-vision"}


def test_a_name_on_both_sides_is_refused_before_anything_is_copied(stores) -> None:
    source, target = stores
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("UPDATE users SET username = 'bob' WHERE username = 'team-vision'")
    digests = {p: _digest(p) for p in (target / "backend" / "mlflow.db", target / gm.AUTH_DB)}
    with pytest.raises(SystemExit, match=r"nothing was copied: the MLflow user\(s\) bob of the Compose MLflow exist"):
        gm.copy_store(source, target, skip_users=("admin",))
    assert {p: _digest(p) for p in digests} == digests
    assert not (target / "artifacts").exists()
    assert not (target / "auth" / "basic_auth.db.before-grow").exists()


def test_the_compose_admin_is_never_carried(stores) -> None:
    source, target = stores
    with pytest.raises(SystemExit, match=r"user\(s\) admin of the Compose MLflow exist"):
        gm.copy_store(source, target)  # without --skip-user: the admin's name is on both sides, refused
    assert gm.copy_store(source, target, skip_users=("admin",))["users"] == ["alice", "bob"]


def test_a_named_role_is_carried_and_a_role_name_on_both_sides_refused(stores) -> None:
    source, target = stores
    with sqlite3.connect(source / gm.AUTH_DB) as db:
        role = db.execute("INSERT INTO roles (name, workspace) VALUES ('reviewers', 'default')").lastrowid
        db.execute("INSERT INTO role_permissions (role_id, resource_type, resource_pattern, permission) "
                   "VALUES (?, 'experiment', '*', 'READ')", (role,))
        db.execute("INSERT INTO user_role_assignments (user_id, role_id) "
                   "SELECT id, ? FROM users WHERE username IN ('alice', 'bob')", (role,))
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("INSERT INTO roles (name, workspace) VALUES ('reviewers', 'default')")
    with pytest.raises(SystemExit, match=r"role reviewers \(workspace default\) of a Compose user exists"):
        gm.copy_store(source, target, skip_users=("admin",))
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("UPDATE roles SET name = 'cluster-reviewers' WHERE name = 'reviewers'")
    gm.copy_store(source, target, skip_users=("admin",))
    after = _users(target / gm.AUTH_DB)
    assert "default:experiment:*=READ (reviewers)" in after["alice"]["grants"]
    assert "default:experiment:*=READ (reviewers)" in after["bob"]["grants"]
    db = gm._snapshot(target / gm.AUTH_DB)
    assert db.execute("SELECT COUNT(*) FROM roles WHERE name = 'reviewers'").fetchone()[0] == 1


def test_other_schema_revision_refused(stores) -> None:
    source, target = stores
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("UPDATE alembic_version_auth SET version_num = 'ffffffffffff'")
    with pytest.raises(SystemExit, match=r"different schema revisions .*target ffffffffffff"):
        gm.copy_store(source, target, skip_users=("admin",))


def test_no_auth_database_on_the_cluster_refused(stores) -> None:
    source, target = stores
    (target / gm.AUTH_DB).unlink()
    with pytest.raises(SystemExit, match=r"no auth database .* source has users to carry \(alice, bob\)"):
        gm.copy_store(source, target, skip_users=("admin",))
    assert not (target / "artifacts").exists()


def test_a_target_database_with_runs_is_refused_the_fresh_one_replaced(stores) -> None:
    source, target = stores
    with sqlite3.connect(target / "backend" / "mlflow.db") as db:  # a run on the fresh one
        db.execute("INSERT INTO runs VALUES ('late')")
    with pytest.raises(SystemExit, match="exists already and holds runs or experiments"):
        gm.copy_store(source, target, skip_users=("admin",))
    assert gm._holds_data(source / "backend" / "mlflow.db")
    (target / "backend" / "mlflow.db").unlink()
    _tracking(target / "backend" / "mlflow.db", ["Default"], 0)
    assert not gm._holds_data(target / "backend" / "mlflow.db")
    gm.copy_store(source, target, skip_users=("admin",))
    dump = [list(gm._snapshot(side / "backend" / "mlflow.db").iterdump()) for side in (source, target)]
    assert dump[0] == dump[1]


def test_an_earlier_backup_is_the_original_and_kept(stores) -> None:
    """A backup left by an earlier attempt (its merge undone by hand, the backup left) is not overwritten."""
    source, target = stores
    backup = Path(gm.copy_store(source, target, skip_users=("admin",))["auth_backup"])
    (target / gm.AUTH_DB).write_bytes(backup.read_bytes())
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("UPDATE users SET username = 'carol' WHERE username = 'team-vision'")
    (target / "backend" / "mlflow.db").unlink()
    gm.copy_store(source, target, skip_users=("admin",))
    assert set(_users(backup)) == {"admin", "team-vision"}
    assert set(_users(target / gm.AUTH_DB)) == {"admin", "carol", "alice", "bob"}


class _StandIn(gm.Server):
    """A server answering users/list and users/permissions/list as MLflow's auth handlers do (jsonify of the user
    list and of _UserRolePermissionRow rows), from an auth database."""

    def __init__(self, path: Path) -> None:
        super().__init__("http://stand-in", "admin", "x")
        self.db = gm._snapshot(path)

    def call(self, path: str, body: dict | None = None, query: dict | None = None) -> dict:
        if path == "/api/2.0/mlflow/users/list":
            return {"users": [{"id": r[0], "username": r[1], "is_admin": bool(r[2]), "roles": []}
                              for r in self.db.execute("SELECT id, username, is_admin FROM users")]}
        assert path == "/api/3.0/mlflow/users/permissions/list"
        assert query
        rows = self.db.execute(
            "SELECT r.id, r.name, r.workspace, p.resource_type, p.resource_pattern, p.permission FROM users u "
            "JOIN user_role_assignments a ON a.user_id = u.id JOIN roles r ON r.id = a.role_id "
            "JOIN role_permissions p ON p.role_id = r.id WHERE u.username = ?", (query["username"],))
        fields = ("role_id", "role_name", "workspace", "resource_type", "resource_pattern", "permission")
        return {"is_admin": False, "permissions": [dict(zip(fields, r)) for r in rows]}


def test_verify_users_equal_after_the_merge_and_a_lost_grant_named(stores) -> None:
    source, target = stores
    gm.copy_store(source, target, skip_users=("admin",))
    src, dst = _StandIn(source / gm.AUTH_DB), _StandIn(target / gm.AUTH_DB)
    assert gm.users(src, {"admin"}) == {name: gm.users(dst, {"admin"})[name] for name in ("alice", "bob")}
    found: list[str] = []
    with sqlite3.connect(target / gm.AUTH_DB) as db:
        db.execute("DELETE FROM role_permissions WHERE permission = 'EDIT'")
        db.execute("DELETE FROM users WHERE username = 'alice'")
    dst = _StandIn(target / gm.AUTH_DB)
    src_users, dst_users = gm.users(src, {"admin"}), gm.users(dst, {"admin"})
    gm._differences("users", src_users, {n: dst_users[n] for n in src_users if n in dst_users}, found)
    assert "users.alice: on the source only" in found
    assert any(d.startswith("users.bob.permissions: source") for d in found), found
