#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.docker_daemon_config: thin wrapper over module_utils.docker_daemon."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Merge settings into Docker's daemon.json, validate, back up, then swap in
version_added: "0.1.0"
description:
  - Merges O(config) into the Docker daemon configuration file (C(/etc/docker/daemon.json)), keeping every key
    it does not set, such as the C(runtimes) entry that C(nvidia-ctk runtime configure) writes.
  - Nested objects (C(log-opts), C(runtimes), C(default-ulimits)) merge key by key; other values, lists included,
    are replaced. A value of V(null) deletes that key; O(remove_keys) deletes keys by dotted path.
  - The merged file is written to a temporary file next to the target, checked with C(dockerd --validate
    --config-file) (Docker Engine 23.0 and later), and only then moved into place, with a backup of the previous
    file when O(backup=true).
  - An existing file that is not a JSON object is reported, with line and column, and left untouched; dockerd
    would not start with it either.
  - The comparison is on parsed content, so a file that differs only in whitespace or key order is not rewritten.
  - It does not restart dockerd; notify a handler on RV(ignore:changed).
author:
  - gpuops.cluster maintainers
options:
  path:
    description: Daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  config:
    description:
      - >-
        Settings to merge, as dockerd names them, for example
        C({"live-restore": true, "log-opts": {"max-size": "50m"}}).
    type: dict
    required: true
  remove_keys:
    description: Keys to delete, as dotted paths (V(log-opts.max-file)).
    type: list
    elements: str
    default: []
  validate:
    description:
      - Check the merged file with C(dockerd --validate) before swapping it in. Needs Docker Engine 23.0 or later.
      - Set to V(false) only to write a configuration before dockerd is installed.
    type: bool
    default: true
  dockerd:
    description: The dockerd binary used for validation (name on the PATH or absolute path).
    type: str
    default: dockerd
  backup:
    description: Keep a timestamped copy of the previous file next to it when it changes.
    type: bool
    default: true
  mode:
    description: Permissions of the written file.
    type: raw
    default: "0644"
attributes:
  check_mode:
    support: full
    description: Reports what would change, with the diff; writes nothing and runs no validation.
  diff_mode:
    support: full
    description: Shows the file before and after, as normalized JSON.
  idempotent:
    support: full
    description: A second run with the same O(config) reports no change.
notes:
  - Runs C(dockerd --validate) with C(LC_ALL=C).
seealso:
  - name: dockerd reference, daemon configuration file
    description: Every key daemon.json accepts.
    link: https://docs.docker.com/reference/cli/dockerd/#daemon-configuration-file
"""

EXAMPLES = r"""
- name: Log rotation, live restore and data root, keeping the NVIDIA runtime entry
  gpuops.cluster.docker_daemon_config:
    config:
      log-driver: json-file
      log-opts:
        max-size: 50m
        max-file: "5"
      live-restore: true
      data-root: /var/lib/docker
  notify: Restart docker

- name: Drop a setting someone added
  gpuops.cluster.docker_daemon_config:
    config: {}
    remove_keys: [debug]
"""

RETURN = r"""
config:
  description: The whole configuration after the merge (what is, or in check mode would be, in the file).
  returned: success
  type: dict
  sample:
    live-restore: true
    log-driver: json-file
    runtimes: {"nvidia": {"path": "nvidia-container-runtime"}}
backup_file:
  description: Backup of the previous file, when one was made.
  returned: changed and a backup was made
  type: str
  sample: /etc/docker/daemon.json.12345.2026-01-01@10:00:00~
validation:
  description: Output of C(dockerd --validate) for the candidate file.
  returned: when validated
  type: str
  sample: configuration OK
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import (
    DaemonConfigError,
    plan,
    render,
    validate,
)


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/docker/daemon.json"},
            "config": {"type": "dict", "required": True},
            "remove_keys": {"type": "list", "elements": "str", "default": []},
            "validate": {"type": "bool", "default": True},
            "dockerd": {"type": "str", "default": "dockerd"},
            "backup": {"type": "bool", "default": True},
            "mode": {"type": "raw", "default": "0644"},
        },
        supports_check_mode=True,
    )


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _run(module: AnsibleModule):
    def run(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    return run


def main() -> None:
    module = build_module()
    path = module.params["path"]
    try:
        result = plan(_read(path), module.params["config"], module.params["remove_keys"], path)
    except DaemonConfigError as exc:
        module.fail_json(msg=str(exc), path=path)
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}. Fix: check the path and permissions.", path=path)

    response = {"changed": result["changed"], "config": result["after"], "path": path}
    if module._diff:
        response["diff"] = {
            "before": render(result["before"]) if result["before_text"] else "",
            "after": result["after_text"],
            "before_header": path,
            "after_header": path,
        }
    if not result["changed"] or module.check_mode:
        module.exit_json(**response)

    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, candidate = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(result["after_text"])
    except OSError as exc:
        module.fail_json(msg=f"cannot write a candidate file in {directory}: {exc}. Fix: check permissions.")

    try:
        if module.params["validate"]:
            dockerd = module.get_bin_path(module.params["dockerd"]) or module.params["dockerd"]
            if not os.path.isabs(dockerd):
                module.fail_json(
                    msg=f"dockerd ('{dockerd}') not found on the PATH, so the merged {path} cannot be validated. "
                    "Fix: install Docker Engine first, or set validate: false.",
                    config=result["after"],
                )
            ok, message = validate(_run(module), dockerd, candidate)
            response["validation"] = message
            if not ok:
                module.fail_json(
                    msg=f"dockerd rejects the merged {path}: {message}. Expected a configuration dockerd accepts; "
                    f"the file was left unchanged. Fix: correct the keys given in config (see dockerd --help).",
                    config=result["after"],
                )
        if module.params["backup"] and result["before_text"]:
            response["backup_file"] = module.backup_local(path)
        module.atomic_move(candidate, path)
        candidate = None
        module.set_mode_if_different(path, module.params["mode"], False)
    except DaemonConfigError as exc:
        module.fail_json(msg=str(exc), config=result["after"])
    finally:
        if candidate and os.path.exists(candidate):
            os.unlink(candidate)
    module.exit_json(**response)


if __name__ == "__main__":
    main()
