#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.http_checks: several read-only HTTP requests from the host, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: http_checks
short_description: Several read-only HTTP GET requests from the host in one call, each answer reported, none judged
version_added: "0.2.0"
description:
  - Sends one GET per entry of O(checks), from the managed host (so loopback-bound services are reachable), and
    reports each answer's status, whether it is one of the expected ones, and the body parsed as JSON when asked.
  - It never fails on an answer; the caller asserts with its own message (what was expected, and the fix). A service
    that does not answer within 10 seconds is reported with status V(-1) and the reason.
  - One module call instead of one C(ansible.builtin.uri) per request, so a verify stage that only reads costs one
    round trip to the host.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  checks:
    description: The requests, each named; the names key RV(answers).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Key of this request in RV(answers).
        type: str
        required: true
      url:
        description: The URL to GET (http or https).
        type: str
        required: true
      status:
        description: Statuses that count as expected (RV(answers.ok)).
        type: list
        elements: int
        default: [200]
      url_username:
        description: User for HTTP basic authentication (sent with the first request).
        type: str
      url_password:
        description: Password for HTTP basic authentication; never shown.
        type: str
      json:
        description: Parse the body as JSON and return it in RV(answers.json).
        type: bool
        default: false
seealso:
  - module: ansible.builtin.uri
"""

EXAMPLES = r"""
- name: Prometheus' rules, and MLflow without and with credentials, in one call
  gpuops.cluster.http_checks:
    checks:
      - {name: rules, url: "http://127.0.0.1:9090/api/v1/rules", json: true}
      - {name: anonymous, url: "http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1", status: [401]}
      - name: admin
        url: "http://127.0.0.1:5000/api/2.0/mlflow/users/get?username=admin"
        url_username: admin
        url_password: "{{ mlflow_admin_password }}"
  register: stack
  no_log: true

- name: MLflow refuses requests without credentials
  ansible.builtin.assert:
    that: stack.answers.anonymous.ok
    fail_msg: "MLflow answered {{ stack.answers.anonymous.status }} without credentials; expected 401"
"""

RETURN = r"""
answers:
  description: One entry per request, by name.
  returned: always
  type: dict
  sample:
    rules: {url: "http://127.0.0.1:9090/api/v1/rules", status: 200, ok: true, error: "", json: {status: success}}
    anonymous: {url: "http://127.0.0.1:5000/api/2.0/mlflow/experiments/search", status: 401, ok: true, error: ""}
  contains:
    url:
      description: The URL requested.
      type: str
    status:
      description: The HTTP status; V(-1) when the service did not answer.
      type: int
    ok:
      description: RV(answers.status) is one of the expected statuses.
      type: bool
    error:
      description: Why there is no answer, or why the body is not JSON; empty otherwise.
      type: str
    json:
      description: The body parsed as JSON, with O(checks[].json) and a JSON body; absent otherwise.
      type: raw
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

NO_ANSWER = -1
TIMEOUT = 10  # seconds to wait for each answer


def request(check: dict) -> dict:
    """GET one URL; the status and body of any answer (an HTTP error is an answer), -1 and the reason otherwise."""
    out = {"url": check["url"], "status": NO_ANSWER, "error": ""}
    try:
        response = open_url(
            check["url"],
            method="GET",
            url_username=check.get("url_username"),
            url_password=check.get("url_password"),
            force_basic_auth=bool(check.get("url_username")),
            timeout=TIMEOUT,
            validate_certs=True,
        )
        out["status"], body = response.getcode(), response.read()
    except HTTPError as exc:
        out["status"], body = exc.code, exc.read()
    except (URLError, OSError, ValueError) as exc:
        out["error"] = str(getattr(exc, "reason", exc))
        body = b""
    out["ok"] = out["status"] in check["status"]
    if check["json"] and out["status"] != NO_ANSWER:
        try:
            out["json"] = json.loads(body)
        except ValueError as exc:
            out["error"] = f"the body is not JSON ({exc})"
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "checks": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "name": {"type": "str", "required": True},
                    "url": {"type": "str", "required": True},
                    "status": {"type": "list", "elements": "int", "default": [200]},
                    "url_username": {"type": "str"},
                    "url_password": {"type": "str", "no_log": True},
                    "json": {"type": "bool", "default": False},
                },
            },
        },
        supports_check_mode=True,
    )
    names = [check["name"] for check in module.params["checks"]]
    if len(set(names)) != len(names):
        module.fail_json(msg=f"http_checks: each check needs its own name; got {names}")
    results = {check["name"]: request(check) for check in module.params["checks"]}
    module.exit_json(changed=False, answers=results)


if __name__ == "__main__":
    main()
