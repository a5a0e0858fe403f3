# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Filters used by the compose_stack role (and usable anywhere):

* ``ref | gpuops.cluster.mirror_image(mirror)``: rewrite an image reference to a registry mirror;
* ``ref | gpuops.cluster.image_pinned``: true when a tag other than latest, or a digest, is given;
* ``rules | gpuops.cluster.cap_rule_for(maximum)``: shorten alert ``for:`` durations (tests);
* ``{name: value} | gpuops.cluster.weak_secrets``: the one password rule of both platforms' inputs passes.

Thin: the image and alert logic lives in plugins/plugin_utils/{images,alert_rules}.py (controller-only);
documentation in the .yml files next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.plugin_utils.lazy_import import lazy

alert_rules = lazy("alert_rules")
images = lazy("images")
platform = lazy("platform")


def mirror_image(ref: object, mirror: object = "") -> str:
    try:
        return images.mirror_image(str(ref), str(mirror or ""))
    except ValueError as exc:
        raise AnsibleFilterError(f"mirror_image: {exc}") from exc


def image_pinned(ref: object) -> bool:
    try:
        return images.is_pinned(str(ref))
    except ValueError as exc:
        raise AnsibleFilterError(f"image_pinned: {exc}") from exc


def cap_rule_for(rules: object, maximum: object = "") -> dict:
    try:
        return alert_rules.cap_rule_for(rules, str(maximum or ""))
    except ValueError as exc:
        raise AnsibleFilterError(f"cap_rule_for: {exc}") from exc


# The well-known defaults of MIN_LENGTH characters or more (shorter ones are refused for their length).
KNOWN_DEFAULTS = frozenset({"password1234"})
MIN_LENGTH = 12


def weak_secrets(secrets: object) -> list:
    problems = []
    for name, value in dict(secrets or {}).items():
        kind = platform.type_name(value)
        if kind != "str":
            why = f"of type {kind}, not a string"
        elif len(str(value)) < MIN_LENGTH:
            why = f"{len(str(value))} characters long"
        elif str(value).lower() in KNOWN_DEFAULTS:
            why = "a well-known default"
        else:
            continue
        problems.append(f"{name} is {why} (the value is not shown)")
    return problems


class FilterModule:
    """gpuops.cluster compose stack filters."""

    def filters(self) -> dict:
        return {
            "mirror_image": mirror_image,
            "image_pinned": image_pinned,
            "cap_rule_for": cap_rule_for,
            "weak_secrets": weak_secrets,
        }
