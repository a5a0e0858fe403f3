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
"""

EXAMPLES = r"""
- name: The MLflow users script, for a ConfigMap
  ansible.builtin.set_fact:
    users_script: "{{ lookup('gpuops.cluster.shipped_script', 'mlflow_users') }}"
"""

RETURN = r"""
_raw:
  description: The text of each named file.
  type: list
  elements: str
"""

import re
from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

_MODULE_UTILS = Path(__file__).resolve().parents[1] / "module_utils"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SCRIPT_ENTRY = 'if __name__ == "__main__":'


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
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
            found.append(text)
        return found
