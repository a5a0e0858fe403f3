#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.mlflow_users: MLflow basic-auth users, each with its password, idempotently."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mlflow_users
short_description: MLflow basic-auth users exist, each with the given password (MLflow's auth REST API, as the admin)
version_added: "0.2.0"
description:
  - For each entry of O(users), from the managed host (so a loopback-bound MLflow is reachable) - tries the user's
    password on C(experiments/search); when MLflow refuses it, reads the user as the admin (C(users/get)), creates a
    missing one (C(users/create)) or sets the password of an existing one (C(users/update-password)).
  - The admin's login is checked in every run - by that C(users/get), or by one C(users/get) of the admin when every
    user already had its password.
  - A second run with the same passwords reads and changes nothing, in one call per user and one as the admin (each
    call is a password-hash check for MLflow). New users are not admins; what they may do on experiments they did not
    create is the server's C(default_permission).
  - The logic is C(plugins/module_utils/mlflow_users.py) (standard library only), which also runs as a script where
    there is no Ansible.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  url:
    description: MLflow's base URL, e.g. V(http://127.0.0.1:5000).
    type: str
    required: true
  admin_username:
    description: MLflow admin user.
    type: str
    required: true
  admin_password:
    description: MLflow admin password; never shown.
    type: str
    required: true
  users:
    description: The users, each with its password (never shown).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: MLflow user name.
        type: str
        required: true
      password:
        description: The user's password.
        type: str
        required: true
attributes:
  check_mode:
    support: full
    description: Only reads, and reports which users would be created or get their password set.
  diff_mode:
    support: none
    description: Passwords are not shown; RV(users) says what was done per user.
  idempotent:
    support: full
    description: A user that exists with its password is left alone.
seealso:
  - name: MLflow authentication REST API
    description: users/get, users/create, users/update-password.
    link: https://mlflow.org/docs/latest/api_reference/auth/rest-api.html
"""

EXAMPLES = r"""
- name: One MLflow user per member
  gpuops.cluster.mlflow_users:
    url: http://127.0.0.1:5000
    admin_username: admin
    admin_password: "{{ mlflow_admin_password }}"
    users:
      - {name: alice, password: "{{ alice_password }}"}
      - {name: bob, password: "{{ bob_password }}"}
  no_log: true
"""

RETURN = r"""
users:
  description:
    - Per user, what was done (in check mode, what would be done) - V(created), V(password set) or V(unchanged).
  returned: success
  type: dict
  sample: {alice: created, bob: unchanged}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.mlflow_users import (
    UNCHANGED,
    MlflowUsersError,
    ensure_users,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "admin_username": {"type": "str", "required": True},
            "admin_password": {"type": "str", "required": True, "no_log": True},
            "users": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "name": {"type": "str", "required": True},
                    "password": {"type": "str", "required": True, "no_log": True},
                },
            },
        },
        supports_check_mode=True,
    )
    params = module.params
    users = {user["name"]: user["password"] for user in params["users"]}
    if len(users) != len(params["users"]):
        module.fail_json(msg=f"mlflow_users: each user once; got {[user['name'] for user in params['users']]}")
    try:
        done = ensure_users(params["url"], params["admin_username"], params["admin_password"], users,
                            check_mode=module.check_mode)
    except MlflowUsersError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=any(action != UNCHANGED for action in done.values()), users=done)


if __name__ == "__main__":
    main()
