# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Merge settings into Docker's /etc/docker/daemon.json without losing anyone else's keys.

daemon.json is written by several tools (this collection's docker_engine and nvidia_container_toolkit
roles, NVIDIA's ``nvidia-ctk runtime configure``, site admins). So we never template it: we read it,
merge our keys in, validate the result (``dockerd --validate`` from Docker 23, ``check_config`` for
older engines) and only then swap it in. A file that does not parse is backed up byte for byte
(``invalid_backup_path``) before the caller either stops or starts over from an empty configuration.

Pure functions, no Ansible imports; the module ``docker_daemon_config`` is a thin wrapper.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable

RunCommand = Callable[[list[str]], tuple[int, str, str]]
IsExecutable = Callable[[str], bool]

# dockerd before 23.0 accepts only "runc" (or a configured runtime) as default-runtime, and refuses a
# configured runtime named "runc" (daemon/config Validate in moby 20.10).
STOCK_RUNTIME = "runc"


class InvalidConfigFile(ValueError):
    """The existing file is not a JSON object; the message is the short fact, e.g. 'not valid JSON (line 1, ...)',
    which the module puts into its refusal with the backup's name and the fix."""


def load_config(text: str | bytes | None) -> dict:
    """Parse daemon.json text (or raw bytes). A missing or blank file is an empty configuration.

    A file that is not a JSON object raises InvalidConfigFile naming the line and column, because
    dockerd refuses to start with it and merging into it would silently drop its content.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidConfigFile(f"not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConfigFile(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    if not isinstance(data, dict):
        raise InvalidConfigFile(f"a JSON {type(data).__name__}, not an object")
    return data


def invalid_backup_path(path: str, data: bytes) -> str:
    """Where an unparsable file is kept, byte for byte: ``<path>.gpuops-invalid-<first 12 hex of its sha1>``.

    The name depends only on the content, so rerunning against the same broken file finds the same
    backup instead of piling up copies, and a different broken file never overwrites an earlier one.
    """
    return f"{path}.gpuops-invalid-{hashlib.sha1(data, usedforsecurity=False).hexdigest()[:12]}"


def merge(existing: dict, desired: dict) -> dict:
    """Return existing with desired merged in.

    Nested objects merge key by key (so ``log-opts`` or ``runtimes`` entries written by others
    stay); any other value, lists included, is replaced. A desired value of None deletes the key, at any depth.
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
    return result


def render(config: dict) -> str:
    """The file text we write: stable key order, two-space indent, trailing newline."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(config: dict, is_executable: IsExecutable) -> list[str]:
    """What dockerd older than 23.0 would refuse, at start or at the first container; [] when none.

    A subset of dockerd's own checks, for engines without ``--validate``: runtimes are objects with a
    ``path`` that is an executable (absolute, or a name dockerd finds on its PATH) and none is named
    ``runc``; ``default-runtime`` is ``runc`` or a configured runtime; ``log-opts`` values are strings;
    ``default-ulimits`` entries have a string Name and integer Soft and Hard. Unknown keys are not
    detected (only dockerd knows its own option list).
    """
    problems: list[str] = []
    runtimes = config.get("runtimes", {})
    if not isinstance(runtimes, dict):
        problems.append(f"runtimes is a {type(runtimes).__name__}; expected an object of name: {{\"path\": ...}}")
        runtimes = {}
    if STOCK_RUNTIME in runtimes:
        problems.append(f"runtime name '{STOCK_RUNTIME}' is reserved")
    for name, runtime in sorted(runtimes.items()):
        path = runtime.get("path") if isinstance(runtime, dict) else None
        if not isinstance(path, str) or not path:
            problems.append(f"runtimes.{name} has no \"path\"; expected {{\"path\": \"/usr/bin/<runtime>\"}}")
        elif not is_executable(path):
            problems.append(f"runtimes.{name}.path {path} is not an executable file (every container on it would fail)")
        args = runtime.get("runtimeArgs", []) if isinstance(runtime, dict) else []
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            problems.append(f"runtimes.{name}.runtimeArgs is {json.dumps(args)}; expected a list of strings")
    default = config.get("default-runtime")
    if default is not None and default != STOCK_RUNTIME and default not in runtimes:
        problems.append(f"specified default runtime '{default}' does not exist (not runc, not in runtimes)")
    log_opts = config.get("log-opts", {})
    if not isinstance(log_opts, dict):
        problems.append(f"log-opts is a {type(log_opts).__name__}; expected an object of strings")
    else:
        problems.extend(
            f"log-opts.{key} is {json.dumps(value)}; dockerd needs a string ({json.dumps(str(value))})"
            for key, value in sorted(log_opts.items()) if not isinstance(value, str)
        )
    ulimits = config.get("default-ulimits", {})
    if not isinstance(ulimits, dict):
        problems.append(f"default-ulimits is a {type(ulimits).__name__}; expected an object of name: ulimit")
    else:
        for name, limit in sorted(ulimits.items()):
            if not (isinstance(limit, dict) and isinstance(limit.get("Name"), str)
                    and _is_int(limit.get("Soft")) and _is_int(limit.get("Hard"))):
                problems.append(
                    f"default-ulimits.{name} is {json.dumps(limit)}; expected "
                    f"{{\"Name\": \"{name}\", \"Soft\": <integer>, \"Hard\": <integer>}}"
                )
    return problems


def validate_candidate(run_command: RunCommand, dockerd: str, config_path: str, config: dict,
                       is_executable: IsExecutable) -> tuple[bool, str, str]:
    """Validate a candidate file the best way this dockerd allows: (ok, message, validated_by).

    ``validated_by`` is ``dockerd`` (``dockerd --validate``, Docker >= 23) or ``builtin``
    (``check_config`` on the parsed candidate, for a dockerd without --validate, e.g. 20.10).
    """
    rc, out, err = run_command([dockerd, "--validate", "--config-file", config_path])
    text = (out + err).strip()
    if rc == 0:
        return True, text or "configuration OK", "dockerd"
    if "unknown flag: --validate" not in text:
        return False, text, "dockerd"
    problems = check_config(config, is_executable)
    if problems:
        return False, "; ".join(problems), "builtin"
    return True, (
        f"{dockerd} has no --validate (Docker Engine older than 23.0); checked instead: runtimes and their "
        "paths, default-runtime, log-opts values, default-ulimits"
    ), "builtin"


def plan(existing: str | bytes | None, desired: dict) -> dict:
    """Everything the module needs to decide: parsed before/after, texts, and whether it changes.

    ``changed`` compares parsed content, so a file that only differs in whitespace or key order
    is left alone. An existing file that is not a JSON object does not raise: ``invalid`` holds the
    InvalidConfigFile (else None) and the merge starts from {}; the caller backs the file up, then
    stops or goes on.
    """
    invalid = None
    try:
        before = load_config(existing)
    except InvalidConfigFile as exc:
        invalid, before = exc, {}
    after = merge(before, desired)
    before_text = existing.decode("utf-8", errors="replace") if isinstance(existing, bytes) else existing
    return {
        "before": before,
        "after": after,
        "before_text": before_text or "",
        "after_text": render(after),
        "invalid": invalid,
        "changed": before != after or existing is None or invalid is not None,
    }
