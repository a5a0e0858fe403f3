# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The one way the collection edits containerd's config.toml, as text: runc's ``SystemdCgroup``, which the kubelet's
systemd cgroup driver needs (kube_node), and the top-level ``imports`` list (nvidia_container_toolkit's drop-in).
Everything else in the file (comments, order, other tools' keys) stays as it was.

Config version 2 (containerd 1.x) keeps runc under ``plugins."io.containerd.grpc.v1.cri"``, version 3
(containerd 2.x) under ``plugins."io.containerd.cri.v1.runtime"``. Tested on the real ``containerd config
default`` outputs in tests/unit/plugins/plugin_utils/fixtures/containerd/.
"""

from __future__ import annotations

import re

CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_TYPE = "io.containerd.runc.v2"

_VERSION_RE = re.compile(r"^\s*version\s*=\s*(\d+)\s*(#.*)?$")
_HEADER_RE = re.compile(r"^(\s*)\[(\[?)(.*?)\]\]?\s*(#.*)?$")
_KEY_RE = re.compile(r"^(\s*)SystemdCgroup(\s*=\s*)(true|false)(\s*(#.*)?)$")
_BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
# A one-line top-level imports array; a multi-line one is not rewritten (containerd's validation then refuses the
# duplicate key that would be added).
_IMPORTS_RE = re.compile(r"^imports\s*=\s*\[([^\]\n]*)\][ \t]*$", re.M)


def split_key(text: str) -> tuple[str, ...] | None:
    """A TOML dotted key (``plugins."io.containerd.grpc.v1.cri".containerd``) as its parts; None if not one."""
    parts, pos, text = [], 0, text.strip()
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] in "\"'":
            quote = text[pos]
            end = text.find(quote, pos + 1)
            while quote == '"' and end > 0 and text[end - 1] == "\\":
                end = text.find(quote, end + 1)
            if end < 0:
                return None
            parts.append(text[pos + 1 : end])
            pos = end + 1
        else:
            match = _BARE_KEY_RE.match(text, pos)
            if not match:
                return None
            parts.append(match.group(0))
            pos = match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos == len(text):
            return tuple(parts)
        if text[pos] != ".":
            return None
        pos += 1


def config_version(text: str) -> int:
    """The top-level ``version`` of a config.toml (1 when absent, as containerd reads it)."""
    for line in text.splitlines():
        if _HEADER_RE.match(line):
            break
        match = _VERSION_RE.match(line)
        if match:
            return int(match.group(1))
    return 1


def systemd_cgroup_on(text: str) -> str:
    """``text`` with runc's ``SystemdCgroup = true``; the same text when it is already on.

    A ``SystemdCgroup = false`` in runc's options table is flipped in place; a table without the key gets it
    after its header; a file without the table gets it appended (with the runc table and its runtime_type
    when that is missing too, since containerd would otherwise read runc without a runtime type).
    Raises ValueError for a config version other than 2 or 3.
    """
    version = config_version(text)
    if version not in CRI_PLUGIN:
        raise ValueError(
            f"containerd config.toml has version = {version}: expected 2 (containerd 1.x) or 3 (containerd 2.x); "
            "migrate it with `containerd config migrate`"
        )
    runc = ("plugins", CRI_PLUGIN[version], "containerd", "runtimes", "runc")
    options = (*runc, "options")
    lines = text.splitlines(keepends=True)
    headers = []  # (line index, key parts, indent)
    for index, line in enumerate(lines):
        match = _HEADER_RE.match(line.rstrip("\r\n"))
        if match:
            # an array of tables ([[...]]) ends the table before it but is never runc's options
            headers.append((index, None if match.group(2) else split_key(match.group(3)), match.group(1)))
    for position, (index, key, indent) in enumerate(headers):
        if key != options:
            continue
        end = headers[position + 1][0] if position + 1 < len(headers) else len(lines)
        for body in range(index + 1, end):
            newline = lines[body][len(lines[body].rstrip("\r\n")) :]
            match = _KEY_RE.match(lines[body].rstrip("\r\n"))
            if match:
                if match.group(3) == "true":
                    return text
                lines[body] = f"{match.group(1)}SystemdCgroup{match.group(2)}true{match.group(4)}{newline}"
                return "".join(lines)
        newline = lines[index][len(lines[index].rstrip("\r\n")) :] or "\n"
        if not lines[index].endswith(("\n", "\r")):
            lines[index] += newline
        lines.insert(index + 1, f"{indent}  SystemdCgroup = true{newline}")
        return "".join(lines)
    added = "" if text.endswith("\n") or not text else "\n"
    if not any(key == runc for _index, key, _indent in headers):
        added += f'\n[{dotted(runc)}]\n  runtime_type = "{RUNC_TYPE}"\n'
    added += f"\n[{dotted(options)}]\n  SystemdCgroup = true\n"
    return text + added


def dotted(parts: tuple[str, ...]) -> str:
    """Key parts as a TOML dotted key, quoting the parts that are not bare keys."""
    return ".".join(part if _BARE_KEY_RE.fullmatch(part) else f'"{part}"' for part in parts)


def with_imports(text: str, add: list[str], drop: list[str]) -> str:
    """``text`` whose top-level ``imports`` holds ``add`` and none of ``drop`` (the others kept, in order); the same
    text when it does already. A file without the key gets it on a line of its own at the top."""
    match = _IMPORTS_RE.search(text)
    current = re.findall(r'"([^"]*)"', match.group(1)) if match else []
    wanted = list(dict.fromkeys([path for path in current if path not in drop] + list(add)))
    if match and wanted == current:
        return text
    line = "imports = [" + ", ".join(f'"{path}"' for path in wanted) + "]"
    if match:
        return text[: match.start()] + line + text[match.end() :]
    return f"# imports added by gpuops.cluster.nvidia_container_toolkit\n{line}\n{text}"
