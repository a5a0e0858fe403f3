"""http_checks: several GETs in one call, each answer reported (an HTTP error is an answer), none judged.

A local HTTP server stands in for the services the compose stack's verify stage reads: a JSON API, an endpoint
behind basic authentication (401 without the right credentials, as MLflow's basic-auth app answers), a body that
is not JSON, and a port nobody listens on.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import threading

import pytest
from ansible_collections.gpuops.cluster.plugins.modules import http_checks as module
from module_helpers import run_main

GOOD = "Basic " + base64.b64encode(b"admin:s3cret-long-password").decode()
RULES = {"status": "success", "data": {"groups": [{"name": "gpuops-gpu-alerts"}]}}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/api/v1/rules":
            self.answer(200, json.dumps(RULES).encode())
        elif self.path == "/users/get":
            self.answer(200 if self.headers.get("Authorization") == GOOD else 401, b'{"user": {}}')
        else:
            self.answer(200, b"<html>not json</html>")

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_answer_is_reported_with_its_status_and_json_none_judged(server, capsys):
    checks = [
        {"name": "rules", "url": f"{server}/api/v1/rules", "json": True},
        {"name": "anonymous", "url": f"{server}/users/get", "status": [401]},
        {"name": "admin", "url": f"{server}/users/get", "url_username": "admin",
         "url_password": "s3cret-long-password"},
        {"name": "wrong", "url": f"{server}/users/get", "url_username": "admin", "url_password": "another-password"},
        {"name": "html", "url": f"{server}/", "json": True},
        {"name": "down", "url": f"http://127.0.0.1:{closed_port()}/", "json": True},
    ]
    code, result = run_main(module, {"checks": checks}, capsys)
    assert (code, result["changed"]) == (0, False), "an unexpected answer is reported, not a failure"
    r = result["answers"]
    assert (r["rules"]["status"], r["rules"]["ok"], r["rules"]["json"]) == (200, True, RULES)
    assert (r["anonymous"]["status"], r["anonymous"]["ok"]) == (401, True)
    assert (r["admin"]["status"], r["admin"]["ok"]) == (200, True), "basic auth sent with the first request"
    assert (r["wrong"]["status"], r["wrong"]["ok"]) == (401, False)
    assert (r["html"]["status"], "json" in r["html"]) == (200, False)
    assert r["html"]["error"].startswith("the body is not JSON")
    assert (r["down"]["status"], r["down"]["ok"], "json" in r["down"]) == (-1, False, False)
    assert "refused" in r["down"]["error"].lower()
    assert "s3cret-long-password" not in json.dumps(result), "the password is never shown"


def test_two_checks_with_one_name_are_refused(server, capsys):
    checks = [{"name": "a", "url": f"{server}/"}, {"name": "a", "url": f"{server}/api/v1/rules"}]
    code, result = run_main(module, {"checks": checks}, capsys)
    assert code == 1
    assert "each check needs its own name" in result["msg"]
