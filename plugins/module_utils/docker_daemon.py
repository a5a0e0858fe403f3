# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Merge settings into Docker's /etc/docker/daemon.json without losing anyone else's keys.

daemon.json is written by several tools (this collection's docker_engine role, NVIDIA's
``nvidia-ctk runtime configure``, site admins). So we never template it: we read it, merge our
keys in, validate the result with ``dockerd --validate`` and only then swap it in.

Pure functions, no Ansible imports; the module ``docker_daemon_config`` is a thin wrapper.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

RunCommand = Callable[[list[str]], tuple[int, str, str]]


class DaemonConfigError(ValueError):
    """A daemon.json that cannot be used, with a message that says what to do."""


def load_config(text: str | None, path: str = "/etc/docker/daemon.json") -> dict:
    """Parse daemon.json text. A missing or blank file is an empty configuration.

    A file that is not a JSON object raises DaemonConfigError naming the line and column, because
    dockerd refuses to start with it and merging into it would silently drop its content.
    """
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DaemonConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); dockerd will not "
            f"start with it either. Expected a JSON object. Fix: repair the file by hand (or move it away to "
            f"start from an empty configuration), then run again."
        ) from exc
    if not isinstance(data, dict):
        raise DaemonConfigError(
            f"{path} holds a JSON {type(data).__name__}, not an object; expected {{\"key\": value, ...}}. "
            f"Fix: repair the file by hand (or move it away), then run again."
        )
    return data


def merge(existing: dict, desired: dict, remove_keys: list[str] | tuple[str, ...] = ()) -> dict:
    """Return existing with desired merged in.

    Nested objects merge key by key (so ``log-opts`` or ``runtimes`` entries written by others
    stay); any other value, lists included, is replaced. A desired value of None deletes the key.
    ``remove_keys`` deletes top-level keys (dotted paths such as ``log-opts.max-size`` reach down).
    """
    result = copy.deepcopy(existing)

    def _merge(target: dict, source: dict) -> None:
        for key, value in source.items():
            if value is None:
                target.pop(key, None)
            elif isinstance(value, dict) and isinstance(target.get(key), dict):
                _merge(target[key], value)
            else:
                target[key] = copy.deepcopy(value)

    _merge(result, desired)
    for dotted in remove_keys:
        parts = dotted.split(".")
        node: Any = result
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return result


def render(config: dict) -> str:
    """The file text we write: stable key order, two-space indent, trailing newline."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def validate(run_command: RunCommand, dockerd: str, config_path: str) -> tuple[bool, str]:
    """Ask dockerd itself whether a candidate file is acceptable (``dockerd --validate``, Docker >= 23).

    Returns (ok, message). A dockerd too old for --validate is reported as not validated, not
    as a failure, so the caller can decide.
    """
    rc, out, err = run_command([dockerd, "--validate", "--config-file", config_path])
    text = (out + err).strip()
    if rc == 0:
        return True, text or "configuration OK"
    if "unknown flag: --validate" in text:
        raise DaemonConfigError(
            f"{dockerd} does not support --validate (Docker Engine older than 23.0): {text}. "
            "Fix: upgrade Docker Engine, or set validate: false to write without validation."
        )
    return False, text


def plan(existing_text: str | None, desired: dict, remove_keys: list[str] | tuple[str, ...] = (),
         path: str = "/etc/docker/daemon.json") -> dict:
    """Everything the module needs to decide: parsed before/after, texts, and whether it changes.

    ``changed`` compares parsed content, so a file that only differs in whitespace or key order
    is left alone.
    """
    before = load_config(existing_text, path)
    after = merge(before, desired, remove_keys)
    return {
        "before": before,
        "after": after,
        "before_text": existing_text or "",
        "after_text": render(after),
        "changed": before != after or existing_text is None,
    }
