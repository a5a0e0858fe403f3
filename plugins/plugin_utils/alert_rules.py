# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Prometheus rule files: durations, and shortening ``for:`` for tests.

A test that has to see an alert fire cannot wait an hour. ``cap_rule_for`` returns a copy of a
rule file (as loaded from YAML) with every ``for:`` longer than a maximum cut to that maximum,
so the shipped file stays the one source and a test stack sets only the cap.
"""

from __future__ import annotations

import copy
import re

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """Prometheus duration (``1h30m``, ``5m``, ``0s``) -> seconds. Raises ValueError otherwise."""
    value = str(text).strip()
    if not value or _PART.sub("", value):
        raise ValueError(f"{text!r} is not a Prometheus duration such as 30s, 5m or 1h30m")
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(value))


def cap_rule_for(rules: dict, maximum: str | None) -> dict:
    """Copy of a rule file with each alert's ``for`` at most ``maximum``; empty maximum: unchanged copy."""
    if not isinstance(rules, dict) or not isinstance(rules.get("groups"), list):
        raise ValueError("expected a Prometheus rule file: a mapping with a 'groups' list")
    result = copy.deepcopy(rules)
    if not maximum:
        return result
    limit = parse_duration(maximum)
    for group in result["groups"]:
        for rule in group.get("rules", []):
            if "for" in rule and parse_duration(rule["for"]) > limit:
                rule["for"] = maximum
    return result
