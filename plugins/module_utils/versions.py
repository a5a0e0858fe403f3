# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Dotted-version helpers: parse strictly, compare numerically, as tuples of integers padded with zeros, so
``570.26`` == ``570.26.0`` and ``570.26`` < ``570.124.06`` (NVIDIA's middle number is a plain integer)."""

from __future__ import annotations

import re
from typing import Union

Version = tuple[int, ...]
VersionLike = Union[str, Version]

_DOTTED = re.compile(r"^[0-9]+(?:\.[0-9]+)*$")
_PACKAGE_SUFFIX = re.compile(r"^([0-9]+(?:\.[0-9]+)+)[-+~]\S*$")


def parse_version(
    value: object,
    name: str = "version",
    max_parts: int | None = None,
    example: str = "550.90.07",
) -> Version:
    """Parse ``'550.90.07'`` into ``(550, 90, 7)``; raise ValueError saying what was wrong and what is expected."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            f"{name} must be a dotted version string such as '{example}', got {type(value).__name__} {value!r}; "
            "quote it in YAML so it is not read as a number"
        )
    text = value.strip()
    if not _DOTTED.match(text):
        package = _PACKAGE_SUFFIX.match(text)
        if package:
            raise ValueError(
                f"{name} '{text}' looks like a package version; give the plain dotted version, "
                f"e.g. '{package.group(1)}'"
            )
        raise ValueError(f"{name} '{text}' is not a dotted version of digits, e.g. '{example}'")
    parts = tuple(int(part) for part in text.split("."))
    if max_parts is not None and len(parts) > max_parts:
        raise ValueError(f"{name} '{text}' has {len(parts)} parts; at most {max_parts} are expected, e.g. '{example}'")
    return parts


def parse_driver_version(value: object, name: str = "driver_version") -> Version:
    """An NVIDIA driver version as nvidia-smi prints it: ``550.90.07`` or ``570.26`` (never a bare branch)."""
    if isinstance(value, str) and value.strip().isdigit():
        branch = value.strip()
        raise ValueError(
            f"{name} '{branch}' is a branch, not a version: pin the full version as nvidia-smi prints it, "
            "e.g. 550.90.07 (see `nvidia-smi --query-gpu=driver_version --format=csv,noheader` on the host, "
            f"or `apt-cache madison nvidia-driver-{branch}`)"
        )
    return parse_version(value, name=name, max_parts=3, example="550.90.07")


def parse_cuda_version(value: object, name: str = "cuda_version") -> Version:
    """A CUDA toolkit version: ``12.4`` (major.minor) or ``12.4.1`` (with the update)."""
    if isinstance(value, str) and value.strip().isdigit():
        raise ValueError(
            f"{name} '{value.strip()}' names only a CUDA major; give major.minor or major.minor.update, "
            "e.g. '12.4' or '12.4.1'"
        )
    return parse_version(value, name=name, max_parts=3, example="12.4.1")


def compare_versions(left: VersionLike, right: VersionLike) -> int:
    """-1, 0 or 1 as left is older than, equal to or newer than right (each a parsed tuple or a dotted string; missing
    parts count as 0)."""
    a, b = (value if isinstance(value, tuple) else parse_version(value) for value in (left, right))
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def version_ge(left: VersionLike, right: VersionLike) -> bool:
    return compare_versions(left, right) >= 0


def version_eq(left: VersionLike, right: VersionLike) -> bool:
    return compare_versions(left, right) == 0


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)
