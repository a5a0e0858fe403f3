#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Ansible module gpuops.cluster.file_set: a set of files under one directory, compared and written in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: A set of files under one directory, each with its content, mode and owner, in one call
version_added: "0.2.0"
description:
  - Compares every file of O(files) under O(dest) with its wanted content, mode, owner and group, and writes only
    those that differ, in one module run (instead of a probe and one copy per file).
  - A file whose content differs is written to a temporary file in its own directory, synced, given its mode and
    owner, then renamed over the old one. A file whose content is right but whose mode or owner is not gets only
    C(chown) and C(chmod).
  - Missing directories above a file are created with O(directory_mode), owned by the user the module runs as;
    existing ones are left as they are.
  - Regular, non-hidden files directly under a directory of O(prune) that are not in O(files) are removed, and so is
    each path of O(absent).
  - Every path is relative to O(dest); an absolute path or one with a C(..) component is refused.
  - The content is never returned or logged. Set C(no_log) on the task when the content is a secret, as for any
    module argument that templates one.
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  dest:
    description: The directory the paths of O(files), O(prune) and O(absent) are relative to.
    type: path
    required: true
  files:
    description: The files, each at most once.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file's path relative to O(dest), such as C(prometheus/rules/gpu.yml).
        type: str
        required: true
      content:
        description: The file's text, written as UTF-8.
        type: str
        required: true
      mode:
        description: The file's mode, when not O(mode).
        type: str
      owner:
        description: The file's owner (a name or a uid), when not O(owner).
        type: raw
      group:
        description: The file's group (a name or a gid), when not O(group).
        type: raw
  mode:
    description: Each file's mode, a quoted octal string with its leading zero.
    type: str
    default: "0644"
  owner:
    description: Each file's owner, a name or a uid; by default the user the module runs as.
    type: raw
  group:
    description: Each file's group, a name or a gid; by default the group the module runs as.
    type: raw
  directory_mode:
    description: The mode of the directories this module creates.
    type: str
    default: "0755"
  prune:
    description:
      - Directories, relative to O(dest), that hold only files of this set; any other regular, non-hidden file
        directly in one of them is removed. A missing directory is skipped.
    type: list
    elements: str
    default: []
  absent:
    description: Paths, relative to O(dest), of files that must not exist; each is removed when present.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reports what would be written and removed, and changes nothing.
  diff_mode:
    support: none
    description: The content may be a secret; RV(written) and RV(removed) say what changed.
  idempotent:
    support: full
    description: A file already as wanted is not touched (its inode and mtime stay).
"""

EXAMPLES = r"""
- name: The compose project's files, and no rule file it no longer ships
  gpuops.cluster.file_set:
    dest: /opt/gpuops/stack
    files:
      - {path: compose.yaml, content: "{{ compose_yaml }}"}
      - {path: prometheus/rules/gpu.yml, content: "{{ gpu_rules }}"}
    owner: root
    group: root
    mode: "0644"
    prune: [prometheus/rules]
    absent: [compose.no-gpu.yaml]

- name: The secrets, the service's but one (0600)
  gpuops.cluster.file_set:
    dest: /opt/gpuops/stack/secrets
    files:
      - {path: grafana_admin_password, content: "{{ grafana_password }}"}
      - {path: mlflow.env, content: "{{ mlflow_env }}", owner: "0", group: "0"}
    owner: "10100"
    group: "10100"
    mode: "0600"
  no_log: true
"""

RETURN = r"""
written:
  description: Files written or given a new mode or owner (in check mode, those that would be), under O(dest).
  returned: always
  type: list
  elements: str
  sample: [/opt/gpuops/stack/compose.yaml]
removed:
  description: Files removed (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: [/opt/gpuops/stack/prometheus/rules/old.yml]
"""

import grp
import os
import pwd
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils._files import put


def relative(dest: str, path: str, module: AnsibleModule) -> str:
    """``dest/path``, refusing a path that is absolute, empty or has a ``..`` component."""
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts or "." in parts:
        module.fail_json(msg=f"file_set: path {path!r} is absolute, empty or not normal (.., ., //); expected a "
                             "path relative to dest, such as prometheus/rules/gpu.yml")
    return os.path.join(dest, path)


def octal(mode: str, module: AnsibleModule) -> int:
    # A leading 0 is required: YAML reads an unquoted 0640 as the number 416, which would pass as "416".
    if not re.fullmatch(r"0[0-7]{3,4}", mode):
        module.fail_json(msg=f"file_set: mode {mode!r} is not a quoted octal file mode such as '0644'")
    return int(mode, 8)


def ident(value, lookup, default: int, module: AnsibleModule) -> int:
    """A uid or gid from a number or a name (pwd.getpwnam or grp.getgrnam)."""
    if value is None:
        return default
    if str(value).isdigit():
        return int(value)
    try:
        return lookup(str(value))[2]
    except KeyError:
        module.fail_json(msg=f"file_set: no user or group named {value!r} on this host; expected one it has, or an id")


def first(value, default):
    return default if value is None else value


def apply(wanted: dict, doomed: list, directory_mode: int, check_mode: bool, written: list, removed: list) -> None:
    for path, (data, mode, uid, gid) in wanted.items():
        if put(path, data, mode, uid, gid, directory_mode, check_mode):
            written.append(path)
    for path in doomed:
        if os.path.lexists(path) and path not in removed:
            removed.append(path)
            if not check_mode:
                os.unlink(path)


class FileSetModule(AnsibleModule):
    def _log_invocation(self) -> None:
        """The journal gets the paths alone: Ansible masks a no_log value only where it appears whole, and its journal
        line holds each content repr-escaped (a multi-line text would be logged as is)."""
        self.log(f"Invoked with dest={self.params['dest']} paths={[entry['path'] for entry in self.params['files']]}")


def main() -> None:
    module = FileSetModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "str", "required": True},
                "content": {"type": "str", "required": True, "no_log": True},
                "mode": {"type": "str"},
                "owner": {"type": "raw"},
                "group": {"type": "raw"},
            }},
            "mode": {"type": "str", "default": "0644"},
            "owner": {"type": "raw"},
            "group": {"type": "raw"},
            "directory_mode": {"type": "str", "default": "0755"},
            "prune": {"type": "list", "elements": "str", "default": []},
            "absent": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params, dest = module.params, os.path.normpath(module.params["dest"])
    wanted = {}
    for entry in params["files"]:
        path = relative(dest, entry["path"], module)
        if path in wanted:
            module.fail_json(msg=f"file_set: path {entry['path']!r} is given twice; expected each file once")
        wanted[path] = (entry["content"].encode("utf-8"), octal(first(entry["mode"], params["mode"]), module),
                        ident(first(entry["owner"], params["owner"]), pwd.getpwnam, os.geteuid(), module),
                        ident(first(entry["group"], params["group"]), grp.getgrnam, os.getegid(), module))
    doomed = [relative(dest, path, module) for path in params["absent"]]
    if set(doomed) & set(wanted):
        module.fail_json(msg=f"file_set: {sorted(set(doomed) & set(wanted))} in both files and absent; expected either")
    for directory in (relative(dest, path, module) for path in params["prune"]):
        if os.path.isdir(directory):
            doomed += sorted(entry.path for entry in os.scandir(directory)
                             if entry.is_file(follow_symlinks=False) and not entry.name.startswith(".")
                             and entry.path not in wanted)
    written, removed = [], []
    try:
        apply(wanted, doomed, octal(params["directory_mode"], module), module.check_mode, written, removed)
    except OSError as error:
        module.fail_json(msg=f"file_set: {error}; written before it: {written}, removed: {removed}")
    module.exit_json(changed=bool(written or removed), written=written, removed=removed)


if __name__ == "__main__":
    main()
