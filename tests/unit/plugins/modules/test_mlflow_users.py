"""mlflow_users (module and module_utils): each user exists with its password, a second run changes nothing.

A LABELLED STAND-IN of MLflow's basic-auth REST API (no MLflow server runs in unit tests), answering as MLflow 3.17.2
does on the calls our code makes: users/get as the admin (200 - the admin too is in MLflow's user store - or 404
RESOURCE_DOES_NOT_EXIST for a missing user),
experiments/search for any authenticated user (401 for a wrong password), users/create (400 when the user exists)
and users/update-password, both for the admin only (403 otherwise). The real server is exercised by the compose
Molecule scenario (molecule/compose/tests/test_compose.py).
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import ClassVar

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils import mlflow_users as logic
from ansible_collections.gpuops.cluster.plugins.modules import mlflow_users as module
from module_helpers import run_main

ADMIN = ("admin", "admin-password-32-characters-long")
SCRIPT = Path(logic.__file__)


class StandIn(http.server.BaseHTTPRequestHandler):
    """MLflow's auth API, as far as mlflow_users uses it (see the module docstring)."""

    users: ClassVar[dict] = {}
    calls: ClassVar[list] = []
    fail_get: bool = False

    def log_message(self, *args):
        pass

    def _who(self):
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        user, _sep, password = base64.b64decode(header[6:]).decode().partition(":")
        known = dict(self.users, **{ADMIN[0]: ADMIN[1]})
        return user if known.get(user) == password else None

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:  # noqa: PLR0911  (one return per answer of the API it stands in for)
        path, _sep, query = self.path.partition("?")
        endpoint = path.removeprefix("/api/2.0/mlflow/")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        self.calls.append((self.command, endpoint))
        who = self._who()
        if who is None:
            return self._answer(401, {"error_code": "UNAUTHENTICATED"})
        if endpoint == "experiments/search":
            return self._answer(200, {"experiments": []})
        if who != ADMIN[0]:
            return self._answer(403, {"error_code": "PERMISSION_DENIED"})
        if endpoint == "users/get":
            if self.fail_get:
                return self._answer(500, {"error_code": "INTERNAL_ERROR", "message": "database is locked"})
            name = urllib.parse.parse_qs(query)["username"][0]
            if name not in self.users and name != ADMIN[0]:
                return self._answer(404, {"error_code": "RESOURCE_DOES_NOT_EXIST",
                                          "message": f"User with username={name} not found"})
            return self._answer(200, {"user": {"username": name, "is_admin": False}})
        if endpoint == "users/create":
            if body["username"] in self.users:
                return self._answer(400, {"error_code": "RESOURCE_ALREADY_EXISTS"})
            self.users[body["username"]] = body["password"]
            return self._answer(200, {"user": {"username": body["username"]}})
        if endpoint == "users/update-password":
            self.users[body["username"]] = body["password"]
            return self._answer(200, {})
        return self._answer(404, {"error_code": "ENDPOINT_NOT_FOUND"})

    do_GET = do_POST = do_PATCH = _handle  # http.server's method names


@pytest.fixture
def mlflow():
    StandIn.users = {"bob": "bobs-old-password-123", "carol": "carols-password-1234"}
    StandIn.calls = []
    StandIn.fail_get = False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


WANTED = {"alice": "alices-password-12345", "bob": "bobs-new-password-123", "carol": "carols-password-1234"}
WRITES = {("POST", "users/create"), ("PATCH", "users/update-password")}


def test_missing_user_created_wrong_password_set_right_one_left_alone_then_nothing(mlflow):
    done = logic.ensure_users(mlflow, *ADMIN, WANTED)
    assert done == {"alice": logic.CREATED, "bob": logic.PASSWORD_SET, "carol": logic.UNCHANGED}
    assert StandIn.users == WANTED
    assert [c for c in StandIn.calls if c in WRITES] == [("POST", "users/create"), ("PATCH", "users/update-password")]
    StandIn.calls = []
    assert logic.ensure_users(mlflow, *ADMIN, WANTED) == dict.fromkeys(WANTED, logic.UNCHANGED)
    assert not [c for c in StandIn.calls if c in WRITES], "a second run only reads"
    # one password check per user, and one of the admin's (each call is a password-hash check for MLflow)
    assert StandIn.calls == [("GET", "experiments/search")] * len(WANTED) + [("GET", "users/get")]


def test_a_refused_admin_login_is_caught_when_every_user_is_unchanged(mlflow):
    logic.ensure_users(mlflow, *ADMIN, WANTED)
    with pytest.raises(logic.MlflowUsersError, match="refused the admin login 'admin' \\(401\\)"):
        logic.ensure_users(mlflow, "admin", "not-the-admin-password", WANTED)


def test_check_mode_reports_what_would_be_done_and_only_reads(mlflow):
    before = dict(StandIn.users)
    done = logic.ensure_users(mlflow, *ADMIN, WANTED, check_mode=True)
    assert done == {"alice": logic.CREATED, "bob": logic.PASSWORD_SET, "carol": logic.UNCHANGED}
    assert StandIn.users == before
    assert {method for method, _path in StandIn.calls} == {"GET"}


def test_a_refused_admin_login_says_so_and_changes_nothing(mlflow):
    with pytest.raises(logic.MlflowUsersError, match="refused the admin login 'admin' \\(401\\)"):
        logic.ensure_users(mlflow, "admin", "not-the-admin-password", WANTED)
    assert not [c for c in StandIn.calls if c in WRITES]


def test_an_unexpected_answer_names_the_user_and_the_answer(mlflow):
    StandIn.fail_get = True
    with pytest.raises(logic.MlflowUsersError, match=r"reading user 'alice' as 'admin': MLflow answered 500 .*locked"):
        logic.ensure_users(mlflow, *ADMIN, WANTED)


def test_no_answer_names_the_url_and_the_fix():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(logic.MlflowUsersError, match=f"MLflow at http://127.0.0.1:{port} did not answer.*Fix:"):
        logic.ensure_users(f"http://127.0.0.1:{port}", *ADMIN, WANTED)


def test_the_file_runs_as_a_script_with_the_kubernetes_secret_layout(mlflow, tmp_path):
    (tmp_path / "users.json").write_text(json.dumps(WANTED))
    (tmp_path / "admin_username").write_text(ADMIN[0])
    (tmp_path / "admin_password").write_text(ADMIN[1])
    result = subprocess.run([sys.executable, str(SCRIPT), mlflow, str(tmp_path)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["alice created", "bob password set", "carol unchanged"]
    assert StandIn.users == WANTED
    (tmp_path / "admin_password").write_text("wrong-admin-password")
    result = subprocess.run([sys.executable, str(SCRIPT), mlflow, str(tmp_path)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 1
    assert "refused the admin login" in result.stderr


def _args(url: str, **extra) -> dict:
    users = [{"name": name, "password": password} for name, password in WANTED.items()]
    return {"url": url, "admin_username": ADMIN[0], "admin_password": ADMIN[1], "users": users, **extra}


def test_module_changed_only_when_a_user_was_created_or_its_password_set(mlflow, capsys):
    code, result = run_main(module, _args(mlflow, _ansible_check_mode=True), capsys)
    assert (code, result["changed"]) == (0, True)
    assert result["users"] == {"alice": "created", "bob": "password set", "carol": "unchanged"}
    assert "alice" not in StandIn.users, "check mode changes nothing"
    code, result = run_main(module, _args(mlflow), capsys)
    assert (code, result["changed"]) == (0, True)
    code, result = run_main(module, _args(mlflow), capsys)
    assert (code, result["changed"], set(result["users"].values())) == (0, False, {"unchanged"})
    assert not [password for password in WANTED.values() if password in json.dumps(result)]


def test_module_fails_with_the_reason(mlflow, capsys):
    code, result = run_main(module, _args(mlflow, admin_password="not-the-admin-password"), capsys)
    assert code == 1
    assert "refused the admin login" in result["msg"]
    users = [{"name": "alice", "password": "a" * 20}, {"name": "alice", "password": "b" * 20}]
    code, result = run_main(module, _args(mlflow, users=users), capsys)
    assert (code, "each user once" in result["msg"]) == (1, True)
