# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""MLflow basic-auth users (one per member or team), each with the password we hold, through MLflow's auth REST API.

Standard library only, so one file serves both platforms: the gpuops.cluster.mlflow_users module runs it on the
Compose host, and it runs as a plain script (``python3 mlflow_users.py URL SECRETS_DIR``) where there is no
Ansible, e.g. in the MLflow image of Kubernetes' users Job.

Per user, its password is tried first; only a refused one leads to calls as the admin, whose login is checked in
every run. What each call is, and why a second run changes nothing: the module's documentation
(docs/modules/mlflow_users.md).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

API = "/api/2.0/mlflow/"
CREATED, PASSWORD_SET, UNCHANGED = "created", "password set", "unchanged"
OK, UNAUTHORIZED, NOT_FOUND = 200, 401, 404
ARGS = 3  # the script, MLflow's URL, the secrets directory
TIMEOUT = 30  # seconds to wait for each answer


class MlflowUsersError(Exception):
    """MLflow answered something that leaves a user's state unknown; the message says what and the fix."""


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _request(base_url: str, method: str, path: str, authorization: str, body: dict | None):
    """One call; returns (status, text). Never through a proxy (MLflow is on the host or in the cluster)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": authorization}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(base_url.rstrip("/") + API + path, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=TIMEOUT) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as error:
        raise MlflowUsersError(f"MLflow at {base_url} did not answer ({getattr(error, 'reason', error)}); "
                               "Fix: start it (docker compose ps mlflow) and check the URL") from error


def _refused(what: str, status: int, text: str) -> MlflowUsersError:
    return MlflowUsersError(f"{what}: MLflow answered {status} {text.strip()[:300]}")


def _admin_get(base_url: str, admin_user: str, admin: str, name: str) -> tuple[int, str]:
    """``users/get`` of ``name`` as the admin: (status, text); a refused admin login is an error."""
    status, text = _request(base_url, "GET", "users/get?" + urllib.parse.urlencode({"username": name}), admin, None)
    if status == UNAUTHORIZED:
        raise MlflowUsersError(f"MLflow refused the admin login {admin_user!r} (401). Fix: the admin password "
                               "must be the one MLflow's user store holds (it is only read when the store is "
                               "created); set it through users/update-password")
    return status, text


def ensure_users(base_url: str, admin_user: str, admin_password: str, users: dict, check_mode: bool = False) -> dict:
    """Make each user of ``users`` (name -> password) exist with that password; return name -> what was done
    (``created``, ``password set``, ``unchanged``; in check mode, what would be done)."""
    admin = _basic(admin_user, admin_password)
    admin_checked = False
    done = {}
    for name, password in sorted(users.items()):
        status, text = _request(base_url, "GET", "experiments/search?max_results=1", _basic(name, password), None)
        if status == OK:
            done[name] = UNCHANGED
            continue
        if status != UNAUTHORIZED:
            raise _refused(f"trying user {name!r}'s password", status, text)
        status, text = _admin_get(base_url, admin_user, admin, name)
        admin_checked = True
        if status == NOT_FOUND:
            action = CREATED
        elif status == OK:
            action = PASSWORD_SET
        else:
            raise _refused(f"reading user {name!r} as {admin_user!r}", status, text)
        if not check_mode:
            method, path = ("POST", "users/create") if action == CREATED else ("PATCH", "users/update-password")
            status, text = _request(base_url, method, path, admin, {"username": name, "password": password})
            if status != OK:
                raise _refused(f"{method} {path} for user {name!r}", status, text)
        done[name] = action
    if users and not admin_checked:
        status, text = _admin_get(base_url, admin_user, admin, admin_user)
        if status != OK:
            raise _refused(f"reading the admin {admin_user!r} as itself", status, text)
    return done


def main(argv: list) -> int:
    """``mlflow_users.py URL SECRETS_DIR``: the users in SECRETS_DIR/users.json (name -> password), as the admin in
    SECRETS_DIR/admin_username and admin_password (the layout of Kubernetes' mlflow-team-users Secret)."""
    if len(argv) != ARGS:
        sys.stderr.write(f"usage: {argv[0]} MLFLOW_URL SECRETS_DIR\n")
        return 2
    secrets = argv[2]

    def read(name: str) -> str:
        with open(os.path.join(secrets, name), encoding="utf-8") as handle:
            return handle.read()

    try:
        done = ensure_users(argv[1], read("admin_username").strip(), read("admin_password"),
                            json.loads(read("users.json")))
    except MlflowUsersError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    for name, action in done.items():
        sys.stdout.write(f"{name} {action}\n")
    return 0


if __name__ == "__main__":  # the script entry (training_stack's Job); written without print and sys.exit, which
    raise SystemExit(main(sys.argv))  # module_utils code may not call (ansible-test's pylint)
