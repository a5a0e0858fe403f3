# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Lookup plugin: the text of a module_utils file that also runs as a plain script (for a Kubernetes Job)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: shipped_script
author:
  - gpuops.cluster maintainers (@gpuops)
version_added: "0.2.0"
short_description: The source of one of the collection's module_utils files that runs as a plain script
description:
  - Returns the text of C(plugins/module_utils/<name>.py) from this collection, for a file written to run as a
    plain script too (standard library only, with a C(__main__) entry). A Kubernetes Job then runs the same code as
    the module that imports it on a host - for example the per-team MLflow users Job of C(training_stack) runs
    C(mlflow_users.py), the code of the C(gpuops.cluster.mlflow_users) module.
  - A role gets the file through this lookup instead of a path out of its own folder, so it works however the
    collection is installed.
options:
  _terms:
    description: The file's name in C(plugins/module_utils), without C(.py).
    required: true
    type: list
    elements: str
  with_imports:
    description:
      - Return, for each name, a dictionary of file name (C(<name>.py)) to text holding the file and every
        C(plugins/module_utils) file it imports, directly or through another, so that a host can run it from a
        copy of these files alone (in C(<dir>/ansible_collections/gpuops/cluster/plugins/module_utils/), with
        C(<dir>) on C(PYTHONPATH)) - for example the scheduled health sweep of C(gpu_health) runs
        C(gpu_health_metrics.py) this way.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: The MLflow users script, for a ConfigMap
  ansible.builtin.set_fact:
    users_script: "{{ lookup('gpuops.cluster.shipped_script', 'mlflow_users') }}"

- name: The health sweep script and the module_utils it imports, file name to text
  ansible.builtin.set_fact:
    sweep_files: "{{ query('gpuops.cluster.shipped_script', 'gpu_health_metrics', with_imports=true)[0] }}"
"""

RETURN = r"""
_raw:
  description: The text of each named file; with O(with_imports), a dictionary of file name to text per name.
  type: list
  elements: raw
"""

import re
from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

_MODULE_UTILS = Path(__file__).resolve().parents[1] / "module_utils"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SCRIPT_ENTRY = 'if __name__ == "__main__":'
_IMPORT = re.compile(r"ansible_collections\.gpuops\.cluster\.plugins\.module_utils(?:\.(\w+)| import \(?([\w, ]+))")


def imports_of(name: str) -> dict:
    """``{file name: text}`` of ``plugins/module_utils/<name>.py`` and every module_utils file it imports."""
    found, todo = {}, [name]
    while todo:
        current = todo.pop()
        if f"{current}.py" in found:
            continue
        text = (_MODULE_UTILS / f"{current}.py").read_text(encoding="utf-8")
        found[f"{current}.py"] = text
        for module, names in _IMPORT.findall(text):
            todo.extend([module] if module else [part.strip() for part in names.split(",") if part.strip()])
    return dict(sorted(found.items()))


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        with_imports = bool(kwargs.get("with_imports", False))
        found = []
        for term in terms:
            name = str(term)
            path = _MODULE_UTILS / f"{name}.py"
            if not _NAME.fullmatch(name) or not path.is_file():
                known = sorted(p.stem for p in _MODULE_UTILS.glob("*.py") if _SCRIPT_ENTRY in p.read_text("utf-8"))
                raise AnsibleLookupError(f"shipped_script: {name!r} is not a file of plugins/module_utils; "
                                         f"expected one of {known}")
            text = path.read_text(encoding="utf-8")
            if _SCRIPT_ENTRY not in text:
                raise AnsibleLookupError(f"shipped_script: plugins/module_utils/{name}.py does not run as a script "
                                         f"(no {_SCRIPT_ENTRY!r}); only such files can run outside Ansible")
            found.append(imports_of(name) if with_imports else text)
        return found
