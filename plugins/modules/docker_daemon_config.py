#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.docker_daemon_config: thin wrapper over module_utils.docker_daemon."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Merge settings into Docker's daemon.json, validate, back up, then swap in
version_added: "0.2.0"
description:
  - Merges O(config) into the Docker daemon configuration file (C(/etc/docker/daemon.json)), keeping every key
    it does not set, such as the C(runtimes) entry that C(nvidia-ctk runtime configure) writes.
  - Nested objects (C(log-opts), C(runtimes), C(default-ulimits)) merge key by key; other values, lists included,
    are replaced. A value of V(null) deletes that key, at any depth.
  - The merged file is written to a temporary file next to the target, validated (see O(validate)), and only then
    moved into place (mode 0644), with a timestamped backup of the previous valid file (RV(backup_file)).
  - An existing file that is not a JSON object (a syntax error, reported with line and column, a list, or bytes
    that are not UTF-8) is first copied byte for byte to C(<path>.gpuops-invalid-<sha1>) (mode 0600; the first
    12 hex digits of its SHA-1, so a rerun finds the same copy and never overwrites it). Then O(invalid) decides
    whether the module stops or starts over from an empty configuration.
  - The comparison is on parsed content, so a file that differs only in whitespace or key order is not rewritten.
  - It does not restart dockerd; the C(daemon_json) entry point of the gpuops.cluster.docker_engine role does, and
    puts RV(backup_file) back when dockerd does not start.
author:
  - gpuops.cluster maintainers (@gpuops)
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
  invalid:
    description:
      - What to do when the existing file is not a JSON object. It is always backed up first, byte for byte, to
        C(<path>.gpuops-invalid-<sha1>) (RV(invalid_backup)).
      - V(fail) stops, naming the backup, and leaves the file in place (dockerd would not start with it either,
        and it usually means someone was editing it).
      - V(replace) starts from an empty configuration, so only O(config) ends up in the file, and warns.
    type: str
    choices: [fail, replace]
    default: fail
  validate:
    description:
      - Check the merged candidate file before swapping it in. With Docker Engine 23.0 or later this is
        C(dockerd --validate --config-file <candidate>). An older dockerd (such as 20.10, Debian 12) has no
        C(--validate); the module then checks what such a dockerd would refuse at start or at the first
        container. Every C(runtimes) entry needs a C(path) that is an executable (absolute, or found on the
        PATH), and none may be named C(runc). C(default-runtime) must be C(runc) or a configured runtime.
        C(log-opts) values must be strings, and C(default-ulimits) entries need a string C(Name) and integer
        C(Soft) and C(Hard). Unknown keys are not caught that way. RV(validated_by) says which check ran.
      - Set to V(false) only to write a configuration before dockerd is installed.
    type: bool
    default: true
  dockerd:
    description: The dockerd binary used for validation (name on the PATH or absolute path).
    type: str
    default: dockerd
attributes:
  check_mode:
    support: full
    description: >-
      Reports what would change, with the diff; writes nothing (not even the backup of an invalid file) and runs no
      validation.
  diff_mode:
    support: full
    description: Shows the file before and after, as normalized JSON (an invalid file as it is).
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
      data-root: /srv/docker

- name: Drop a setting someone added
  gpuops.cluster.docker_daemon_config:
    config: {debug: null}

- name: Add the nvidia runtime; a corrupted file is kept as daemon.json.gpuops-invalid-<sha1> and replaced
  gpuops.cluster.docker_daemon_config:
    config:
      runtimes:
        nvidia: {path: /usr/bin/nvidia-container-runtime, runtimeArgs: []}
      default-runtime: nvidia
    invalid: replace
  register: daemon_json
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
path:
  description: The daemon configuration file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
backup_file:
  description:
    - Backup of the previous file, when one was made. Put it back if dockerd does not start with the new file.
    - Not set when there was no previous file, or it was invalid (see RV(invalid_backup)).
  returned: changed and a backup was made
  type: str
  sample: /etc/docker/daemon.json.12345.2026-01-01@10:00:00~
invalid_backup:
  description: Byte-for-byte copy of an existing file that is not a JSON object (in check mode, where it would go).
  returned: when the existing file is not a JSON object, on failure (O(invalid=fail)) too
  type: str
  sample: /etc/docker/daemon.json.gpuops-invalid-3f786850e387
invalid_reason:
  description: Why the existing file was not usable.
  returned: when the existing file is not a JSON object, on failure (O(invalid=fail)) too
  type: str
  sample: "not valid JSON (line 1, column 62: Expecting ',' delimiter)"
validation:
  description: Output of C(dockerd --validate), or what the built-in check found, for the candidate file.
  returned: when validated
  type: str
  sample: configuration OK
validated_by:
  description: V(dockerd) (C(dockerd --validate)) or V(builtin) (a dockerd older than 23.0 has no C(--validate)).
  returned: when validated
  type: str
  sample: dockerd
"""

import os
import shutil
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils._files import make_dirs, put
from ansible_collections.gpuops.cluster.plugins.module_utils.docker_daemon import (
    invalid_backup_path,
    plan,
    render,
    validate_candidate,
)


def _keep_invalid(module: AnsibleModule, path: str, data: bytes, reason: str) -> tuple[dict, bool]:
    """Copy an unparsable file aside, byte for byte, before anything else; then stop or go on (invalid).

    Returns the result keys to add and whether the backup was written now.
    """
    backup = invalid_backup_path(path, data)
    created = False
    if not module.check_mode and not os.path.exists(backup):
        try:
            put(backup, data, 0o600)
            created = True
        except OSError as exc:
            module.fail_json(msg=f"{path} is {reason}, and copying it to {backup} failed: {exc}. The file was left "
                             "in place. Fix: check the directory's permissions and free space.",
                             path=path, invalid_backup=backup, invalid_reason=reason)
    kept = (f"it would be backed up byte for byte to {backup} (check mode: nothing written)" if module.check_mode
            else f"it was backed up byte for byte to {backup}")
    if module.params["invalid"] == "fail":
        module.fail_json(
            msg=f"{path} is {reason}; {kept} and left in place. dockerd will not start with it either; expected a "
            f"JSON object. Fix: repair it (compare with the backup), or set invalid: replace to start from an empty "
            f"configuration (the backup stays).",
            path=path, invalid_backup=backup, invalid_reason=reason, changed=created,
        )
    module.warn(f"{path} was {reason}; {kept} and it is replaced by a configuration holding only the given settings "
                "(invalid: replace).")
    return {"invalid_backup": backup, "invalid_reason": reason}, created


def _validate(module: AnsibleModule, path: str, candidate: str, config: dict, response: dict, failed: dict) -> None:
    """Validate the candidate; on failure exit with ``failed`` (changed only if an invalid file was backed up)."""
    dockerd = module.get_bin_path(module.params["dockerd"]) or module.params["dockerd"]
    if not os.path.isabs(dockerd):
        module.fail_json(
            msg=f"dockerd ('{dockerd}') not found on the PATH, so the merged {path} cannot be validated. "
            "Fix: install Docker Engine first, or set validate: false.",
            **failed,
        )
    ok, message, by = validate_candidate(module.run_command, dockerd, candidate, config,
                                         lambda name: shutil.which(name) is not None)
    response.update(validation=message, validated_by=by)
    failed.update(validation=message, validated_by=by)
    if not ok:
        rejected = (f"dockerd rejects the merged {path}: {message}" if by == "dockerd" else
                    f"the merged {path} would not work with this dockerd (older than 23.0, so checked without "
                    f"--validate): {message}")
        module.fail_json(
            msg=f"{rejected}. Expected a configuration dockerd accepts; the file was left unchanged. "
            f"Fix: correct the keys given in config, or the file's other entries (see dockerd --help).",
            **failed,
        )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/docker/daemon.json"},
            "config": {"type": "dict", "required": True},
            "invalid": {"type": "str", "choices": ["fail", "replace"], "default": "fail"},
            "validate": {"type": "bool", "default": True},
            "dockerd": {"type": "str", "default": "dockerd"},
        },
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LC_ALL": "C"}
    path = module.params["path"]
    try:
        data = Path(path).read_bytes() if os.path.exists(path) else None
    except OSError as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}. Fix: check the path and permissions.", path=path)
    result = plan(data, module.params["config"])

    response = {"changed": result["changed"], "config": result["after"], "path": path}
    backed_up_invalid = False
    if result["invalid"] is not None:
        kept, backed_up_invalid = _keep_invalid(module, path, data, str(result["invalid"]))
        response.update(kept)
    # What a failure from here on reports: nothing changed, except an invalid file's backup.
    failed = {**response, "changed": backed_up_invalid}
    if module._diff:
        response["diff"] = {
            "before": (render(result["before"]) if result["invalid"] is None else result["before_text"])
            if result["before_text"] else "",
            "after": result["after_text"],
            "before_header": path,
            "after_header": path,
        }
    if not result["changed"] or module.check_mode:
        module.exit_json(**response)

    directory = os.path.dirname(path) or "."
    try:
        make_dirs(directory, 0o755)
        fd, candidate = tempfile.mkstemp(prefix=".daemon.json.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(result["after_text"])
    except OSError as exc:
        module.fail_json(msg=f"cannot write a candidate file in {directory}: {exc}. Fix: check permissions.",
                         **failed)

    try:
        if module.params["validate"]:
            _validate(module, path, candidate, result["after"], response, failed)
        if result["before_text"] and result["invalid"] is None:
            response["backup_file"] = module.backup_local(path)
        module.atomic_move(candidate, path)
        candidate = None
        module.set_mode_if_different(path, "0644", False)
    finally:
        if candidate and os.path.exists(candidate):
            os.unlink(candidate)
    module.exit_json(**response)


if __name__ == "__main__":
    main()
