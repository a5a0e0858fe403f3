# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Action gpuops.cluster.write_objects: write rendered Kubernetes objects (one YAML file per kind and name) and
extra text files into one controller directory, in-process (no module run per file).
Documented in plugins/modules/write_objects.py."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail
from ansible.parsing.yaml.dumper import AnsibleDumper
from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.cluster.plugins.module_utils._files import make_dirs, put, searchable

ARGUMENT_SPEC = {
    "objects": {"type": "list", "elements": "dict", "default": []},
    "files": {"type": "dict", "default": {}},
    "dest": {"type": "path", "required": True},
    "default_name": {"type": "str"},
    "mode": {"type": "str", "default": "0644"},
}


# A file name, or a relative path of such names (the compose project's prometheus/rules/<file>): no "..", no
# hidden or absolute path.
_FILE_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")


def object_file_name(obj: dict, default_name: str | None = None) -> str:
    """``<kind>-<name>.yaml`` (lower-case kind); an object without metadata.name (kubeadm's and the kubelet's
    configuration kinds) takes default_name (the host it belongs to), when given."""
    metadata = (obj.get("metadata") or {}) if isinstance(obj, dict) else None
    name = (metadata.get("name") or default_name) if isinstance(metadata, dict) else None
    if not name or not obj.get("kind"):
        raise AnsibleActionFail(f"write_objects: an object without kind or metadata.name: {obj!r:.200}")
    return f"{str(obj['kind']).lower()}-{name}.yaml"


def planned_files(objects: list[dict], files: dict, default_name: str | None = None) -> dict[str, str]:
    planned: dict[str, str] = {}
    for obj in objects:
        name = object_file_name(obj, default_name)
        if name in planned:
            raise AnsibleActionFail(f"write_objects: two objects would be written to {name}: give them distinct names")
        planned[name] = yaml.dump(obj, Dumper=AnsibleDumper, indent=2, sort_keys=False, default_flow_style=False,
                                  allow_unicode=True)
    for name, text in files.items():
        if not _FILE_PATH.match(name) or ".." in name.split("/") or name in planned:
            raise AnsibleActionFail(f"write_objects: file name {name!r} leaves dest, is hidden, or is taken by an "
                                    "object; expected a name or a relative path of names (prometheus/prometheus.yml)")
        planned[name] = str(text)
    return planned


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        dest = Path(args["dest"])
        planned = planned_files(args["objects"], args["files"], args["default_name"])
        # A leading 0 is required: YAML reads an unquoted 0640 as the number 416, which would pass as "416".
        if not re.fullmatch(r"0[0-7]{3}", args["mode"]):
            raise AnsibleActionFail(f"write_objects: mode {args['mode']!r} is not a quoted octal file mode such as "
                                    "'0640'")
        mode = int(args["mode"], 8)
        created = not dest.is_dir()
        if created and not self._task.check_mode:
            make_dirs(str(dest), searchable(mode))
        written = [str(dest / name) for name, text in planned.items()
                   if put(dest / name, text, mode, check=self._task.check_mode)]
        result.update(changed=created or bool(written), written=written, files=sorted(str(dest / n) for n in planned))
        return result
