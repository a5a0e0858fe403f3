# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Which OS a role supports: one table per role, its ``meta/main.yml`` ``galaxy_info.platforms``.

Read from two places, by the same functions and for the same roles, those a site.yml run uses
(``playbooks/vars/run_roles.yml``): preflight (``preflight.os_supported``), which judges every role a GPU node will
run (the host layer's, then the platform's), and the inputs pass (filter ``gpuops.cluster.os_refusal``), which judges
every role it checks on any host, once, in one refusal. So the two agree on every OS, in the same words (``refusal``).

Galaxy names a platform as Galaxy does: ``EL`` for the Red Hat Enterprise Linux family, Debian and Ubuntu releases
by code name. ``GALAXY_DISTRIBUTIONS`` and ``RELEASES`` translate those names into what ``ansible_facts`` says
(``distribution``, ``distribution_version``); they describe the distributions, not what a role supports.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

COLLECTION_ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = COLLECTION_ROOT / "roles"
RUN_ROLES_FILE = COLLECTION_ROOT / "playbooks" / "vars" / "run_roles.yml"
HOST_LAYER = "host"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it: read in every host's worker

# Galaxy platform name -> the ansible_facts['distribution'] values it stands for (any other name stands for itself).
GALAXY_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {"EL": ("RedHat", "Rocky", "AlmaLinux")}
# Galaxy version (a release code name) -> the release as ansible_facts['distribution_version'] begins.
RELEASES: dict[str, dict[str, str]] = {
    "Debian": {"bullseye": "11", "bookworm": "12", "trixie": "13"},
    "Ubuntu": {"focal": "20.04", "jammy": "22.04", "noble": "24.04"},
}


def supported_from_platforms(platforms: Any, where: str = "platforms") -> dict[str, list[str]]:
    """Galaxy ``platforms`` ([{name, versions}]) as distribution -> releases (``ansible_facts`` names, in order);
    ``all`` stays ``all``. A code name this module does not know is an error, naming it and the file."""
    supported: dict[str, list[str]] = {}
    for entry in platforms or []:
        name = str(entry.get("name"))
        for version in entry.get("versions") or ["all"]:
            text = str(version)
            release = RELEASES.get(name, {}).get(text, text)
            if release != "all" and not release[0].isdigit():
                known = ", ".join(RELEASES.get(name, {})) or "none"
                raise ValueError(
                    f"{where}: {name} version {text!r} is not a release gpuops.cluster knows (known code names: "
                    f"{known}). Fix: add it to plugins/plugin_utils/os_support.py RELEASES"
                )
            for distribution in GALAXY_DISTRIBUTIONS.get(name, (name,)):
                supported.setdefault(distribution, [])
                if release not in supported[distribution]:
                    supported[distribution].append(release)
    return supported


def role_supported(role_path: str | Path) -> dict[str, list[str]]:
    """The OS table of the role at ``role_path``: its meta/main.yml platforms, as ``supported_from_platforms``."""
    meta = Path(role_path) / "meta" / "main.yml"
    data = yaml.load(meta.read_text(encoding="utf-8"), Loader=_LOADER) or {}
    return supported_from_platforms((data.get("galaxy_info") or {}).get("platforms"), str(meta))


@cache
def role_table(role: str) -> dict[str, list[str]]:
    """This collection's ``role``'s table (``role_supported`` of its folder), read once per process; only read."""
    return role_supported(ROLES_DIR / role)


@cache
def run_roles() -> MappingProxyType[str, tuple[str, ...]]:
    """The roles a site.yml run uses, per layer and platform (``_gpuops_run_roles`` of playbooks/vars/run_roles.yml,
    the file the plays read), read once per process and shared read-only (a mapping proxy of tuples)."""
    layers = yaml.load(RUN_ROLES_FILE.read_text(encoding="utf-8"), Loader=_LOADER)["_gpuops_run_roles"]
    return MappingProxyType({layer: tuple(roles or ()) for layer, roles in layers.items()})


def platforms_with_play() -> list[str]:
    """The platforms run_roles() lists roles for: each has its play (playbooks/<platform>.yml)."""
    return [name for name in run_roles() if name != HOST_LAYER]


def host_roles(platform: str | None) -> list[str]:
    """The roles a GPU node runs: the host layer's, then the platform's (none while no platform is decided)."""
    roles = run_roles()
    return list(roles.get(HOST_LAYER, ())) + list(roles.get(platform, ()) if platform else ())


def is_supported(distribution: str, version: str, supported: dict[str, list[str]]) -> bool:
    """A host's version matches a release when it equals it or starts with it and a dot (12 matches 12.7)."""
    version = str(version or "")
    return any(r in ("all", version) or version.startswith(r + ".") for r in supported.get(distribution or "", []))


def listing(supported: dict[str, list[str]]) -> str:
    """``Debian 12/13; Ubuntu 22.04/24.04``."""
    return "; ".join(f"{d} {'/'.join(v)}" for d, v in supported.items()) or "none"


def common(tables: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """The releases every table supports (``all`` in one table takes the other's releases)."""
    if not tables:
        return {}
    result = {d: list(v) for d, v in tables[0].items()}
    for table in tables[1:]:
        merged = {}
        for distribution, releases in result.items():
            other = table.get(distribution)
            if other is None:
                continue
            if "all" in other:
                kept = releases
            elif "all" in releases:
                kept = list(other)
            else:
                kept = [r for r in releases if r in other]
            if kept:
                merged[distribution] = kept
        result = merged
    return result


def refusal(roles: list[str], distribution: str, version: str) -> str:
    """The one refusal of ``distribution`` ``version`` by ``roles``' tables, which preflight (``os_supported``) and the
    inputs pass (``os_refusal``) both print: the OS found, every role that refuses it, what every role judged supports,
    where that is written, and the fix; the empty string when each supports it."""
    tables = {role: role_table(role) for role in roles}
    refused = [role for role, table in tables.items() if not is_supported(distribution, version, table)]
    if not refused:
        return ""
    found = f"{distribution} {version}".strip() or "an unknown OS"
    return (
        f"{found} is not supported by {', '.join(f'gpuops.cluster.{role}' for role in refused)}; supported by every "
        f"role this host runs: {listing(common(list(tables.values())))} (each role's meta/main.yml platforms, read by "
        "preflight and the inputs pass alike). Fix: run this host on one of those releases, or remove it from the "
        "group that runs those roles."
    )


def os_refusal(roles: list[str], facts: dict[str, Any]) -> str:
    """The inputs pass's ``refusal`` of the host's OS (``ansible_facts`` names) by each of ``roles`` that a site.yml
    run uses (``run_roles()``, the roles preflight judges; another, such as burnin or training_image, which their own
    playbooks run, is not judged)."""
    used = {role for layer in run_roles().values() for role in layer}
    distribution = str(facts.get("distribution") or "")
    version = str(facts.get("distribution_version") or "")
    return refusal([role for role in roles if role in used], distribution, version)
