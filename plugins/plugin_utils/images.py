# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Container image references: parse, check they are pinned, rewrite them to a registry mirror.

A mirror (``gpuops_registry_mirror``, e.g. ``registry.lan:5000`` or ``harbor.lan/proxy``) replaces
the registry part of a reference and keeps the repository path, tag and digest:

    nvcr.io/nvidia/k8s/dcgm-exporter:4.4.2-4.7.0-ubuntu22.04 -> registry.lan:5000/nvidia/k8s/dcgm-exporter:4.4.2-...
    grafana/grafana:11.6.0                                   -> registry.lan:5000/grafana/grafana:11.6.0
    debian:trixie                                            -> registry.lan:5000/library/debian:trixie

so a site mirrors each image under its upstream path (``skopeo copy``, ``crane copy``, or a
pull-through cache per upstream registry).
"""

from __future__ import annotations

import re

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


def split_reference(ref: str) -> dict:
    """``'quay.io/prometheus/prometheus:v2.53.3'`` -> registry, path, tag, digest (Docker's normalisation)."""
    if not isinstance(ref, str) or not ref or ref != ref.strip() or " " in ref:
        raise ValueError(f"{ref!r} is not an image reference such as 'quay.io/prometheus/prometheus:v2.53.3'")
    rest, _sep, digest_text = ref.partition("@")
    digest = digest_text if "@" in ref else None
    if digest is not None and not _DIGEST.match(digest):
        raise ValueError(f"{ref!r}: digest {digest!r} is not sha256:<64 hex>")
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ValueError(f"{ref!r}: tag {tag!r} is not a valid tag")
    first, _sep, remainder = rest.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = "docker.io", rest
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    if not path or path != path.lower():
        raise ValueError(f"{ref!r}: repository {path!r} must be lower case")
    return {"registry": registry, "path": path, "tag": tag, "digest": digest}


def is_pinned(ref: str) -> bool:
    """A reference is pinned when it names a digest, or a tag other than ``latest``."""
    parts = split_reference(ref)
    return bool(parts["digest"]) or (parts["tag"] is not None and parts["tag"] != "latest")


def mirror_image(ref: str, mirror: str | None) -> str:
    """Rewrite ``ref`` to pull from ``mirror``; an empty mirror returns ``ref`` unchanged."""
    parts = split_reference(ref)
    if not mirror:
        return ref
    mirror = mirror.strip().rstrip("/")
    if "://" in mirror:
        raise ValueError(f"registry mirror {mirror!r} must be host[:port][/prefix], without a scheme")
    out = f"{mirror}/{parts['path']}"
    if parts["tag"]:
        out += f":{parts['tag']}"
    if parts["digest"]:
        out += f"@{parts['digest']}"
    return out
