# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""``spec | gpuops.cluster.argument_spec_inputs``: a role's argument spec for checking what the inventory gives.

site.yml checks the inputs of every role a run will use before the host layer
(playbooks/check_inputs.yml), with ``ansible.builtin.validate_argument_spec`` outside the role. There the
role's defaults are not loaded, and a templated default such as ``"{{ gpuops_members | default([]) }}"``
would be type-checked as a string. So the spec is used without its defaults: what the inventory sets is
checked against the types, choices and element types; what it leaves unset keeps the role's default,
which the role's own unit test (tests/unit/test_argument_specs.py) holds to the spec.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def _strip(options: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, spec in options.items():
        entry = {k: v for k, v in spec.items() if k != "default"}
        if isinstance(spec.get("options"), dict):
            entry["options"] = _strip(spec["options"])
        out[name] = entry
    return out


def argument_spec_inputs(document: object, entry_point: str = "main") -> dict:
    """The options of ``entry_point`` in a role's meta/argument_specs.yml document, defaults removed."""
    if not isinstance(document, dict) or not isinstance(document.get("argument_specs"), dict):
        raise AnsibleFilterError("argument_spec_inputs: expected the parsed meta/argument_specs.yml "
                                 "(argument_specs: ...)")
    entry = document["argument_specs"].get(entry_point)
    if not isinstance(entry, dict):
        raise AnsibleFilterError(f"argument_spec_inputs: no entry point {entry_point!r} in the argument spec")
    return _strip(entry.get("options") or {})


class FilterModule:
    """gpuops.cluster input-check filters."""

    def filters(self) -> dict:
        return {"argument_spec_inputs": argument_spec_inputs}
