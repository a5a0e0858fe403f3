"""weak_secrets: the one password rule of compose_stack's and training_stack's inputs passes (their refusals are
run by tests/unit/roles/test_compose_stack_render.py and the bad-input cases *password*)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.compose_stack import weak_secrets


@pytest.mark.parametrize(("value", "why"), [
    (123456789012345, "of type int, not a string"),
    (True, "of type bool, not a string"),
    (None, "of type NoneType, not a string"),
    (["a-long-enough-password"], "of type list, not a string"),
    ("", "0 characters long"),
    ("hunter2", "7 characters long"),
    ("PassWord1234", "a well-known default"),
])
def test_a_refused_value_is_named_never_shown(value, why):
    assert weak_secrets({"x.alice": value}) == [f"x.alice is {why} (the value is not shown)"]


def test_a_long_enough_string_passes_and_every_problem_is_listed():
    assert weak_secrets({"a": "a-long-enough-password", "b": "short", "c": "password1234"}) == [
        "b is 5 characters long (the value is not shown)", "c is a well-known default (the value is not shown)"]
    assert weak_secrets({}) == weak_secrets(None) == []
