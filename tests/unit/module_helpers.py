"""Helpers shared by the module and module_utils tests.

run_main runs a module's main() in-process, as Ansible would: the arguments go in through ansible-core's own
patch_module_args, the result comes back from the JSON that exit_json / fail_json print.
"""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_main(module, args: dict, capsys) -> tuple[int, dict]:
    """(exit code, result) of ``module.main()`` with ``args``; 0 is exit_json, 1 is fail_json."""
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def assert_warnings(warnings: list[str], expected: list[str]) -> None:
    """Each expected substring is in its own warning, and there is no other warning."""
    unmatched = list(warnings)
    for text in expected:
        found = next((warning for warning in unmatched if text in warning), None)
        assert found is not None, f"no warning contains {text!r}; warnings: {warnings}"
        unmatched.remove(found)
    assert not unmatched, f"unexpected warnings: {unmatched}"
