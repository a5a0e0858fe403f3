# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Pure helpers of the dnf half of _pinned_packages: version requests, versionlock entries, closure choice.

Versions are EVR tuples (epoch, version, release) of strings; comparison is injected (rpm's own, from the
dnf sack, on the host) so that these functions stay testable without dnf.
"""

from __future__ import annotations

import re

_LOCK_RE = re.compile(r"^(?P<name>.+)-(?:(?P<epoch>[0-9]+):)?(?P<version>[^-:]+)-(?P<release>[^-]+)\.(?P<arch>[^.]+)$")


def evr_string(evr):
    """(epoch, version, release) -> 'V-R', or 'E:V-R' when the epoch is not 0."""
    epoch, version, release = evr
    return f"{epoch}:{version}-{release}" if str(epoch or "0") != "0" else f"{version}-{release}"


def nevr(name, evr):
    """The install spec dnf takes for exactly this version: 'name-V-R' or 'name-E:V-R'."""
    return f"{name}-{evr_string(evr)}"


def lock_entry(name, evr):
    """The versionlock list entry `dnf versionlock add` writes for an installed package: 'name-E:V-R.*'."""
    epoch, version, release = evr
    return f"{name}-{epoch or '0'}:{version}-{release}.*"


def parse_request(requested):
    """'1.0' -> (None, '1.0', None); '1.0-1' -> (None, '1.0', '1'); '2:1.0-1' -> ('2', '1.0', '1'); '' -> None."""
    requested = str(requested).strip()
    if not requested:
        return None
    epoch = None
    if ":" in requested:
        epoch, requested = requested.split(":", 1)
    version, _sep, release = requested.partition("-")
    return epoch, version, release or None


def matches_request(evr, requested):
    """Does the offered EVR match the request? A bare version matches any release (and epoch)."""
    wanted = parse_request(requested)
    if wanted is None:
        return True
    epoch, version, release = wanted
    return (version == evr[1] and (release is None or release == evr[2])
            and (epoch is None or str(epoch) == str(evr[0] or "0")))


def newest(evrs, cmp):
    """The newest EVR of a non-empty list under cmp (rpm's comparison)."""
    best = evrs[0]
    for evr in evrs[1:]:
        if cmp(evr, best) > 0:
            best = evr
    return best


def choose(offered, requested, installed, cmp):
    """The offered EVR to pin for a request: the newest match; '' -> the installed one if offered, else newest."""
    if parse_request(requested) is None and installed is not None and installed in offered:
        return installed
    matching = [evr for evr in offered if matches_request(evr, requested)]
    return newest(matching, cmp) if matching else None


def read_locklist(text):
    """Lock entries (not the '!' excludes) of a versionlock list file -> {name: [(entry, evr), ...]}."""
    locks = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("!"):
            continue
        found = _LOCK_RE.match(line)
        if found:
            evr = (found["epoch"] or "0", found["version"], found["release"])
            locks.setdefault(found["name"], []).append((line, evr))
    return locks


def lock_state(resolved, locks):
    """For {name: evr} and the lock list: which names are locked at exactly their pin, and the stale entries
    (locks of these names at another version: they would keep dnf from moving the package)."""
    locked, stale = [], []
    for name, evr in resolved.items():
        pin = (str(evr[0] or "0"), evr[1], evr[2])
        for entry, locked_evr in locks.get(name, []):
            if locked_evr == pin:
                locked.append(name)
            else:
                stale.append(entry)
    return sorted(set(locked)), sorted(stale)


def requirement_is_exact(text):
    """A requirement of the form 'name = version' (what follow=exact keeps)."""
    return " = " in text


def ignored_requirement(text):
    """rpmlib() features, file paths and boolean (rich) dependencies are not package pins."""
    return text.startswith("rpmlib(") or text.startswith("/") or text.startswith("(")
