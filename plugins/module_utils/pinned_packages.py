# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Pure logic of the _pinned_packages role: read apt index stanzas, compare Debian versions, resolve the
requested exact versions and the dependency closure that comes from one repository, and say why a set
cannot be pinned. No I/O beyond reading the files it is given; nothing here changes a host.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import lzma
import re

# ---------------------------------------------------------------------------------------------------------
# Debian version comparison (deb-version(7), dpkg's verrevcmp).


def _order(char):
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(a, b):
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def split_version(version):
    """'1:2.3-4' -> (1, '2.3', '4'); no revision -> ''."""
    epoch, _sep, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _sep, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def compare_versions(a, b):
    """<0, 0 or >0 as Debian orders versions a and b."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


_VERSION_KEY = functools.cmp_to_key(compare_versions)


def satisfies(version, op, wanted):
    """Does `version` satisfy the relation `op wanted` ('=', '>=', '<=', '>>', '<<'; '' = any)?"""
    if not op:
        return True
    c = compare_versions(version, wanted)
    return {"=": c == 0, ">=": c >= 0, "<=": c <= 0, ">>": c > 0, "<<": c < 0, ">": c >= 0, "<": c <= 0}[op]


def matches_request(offered, requested):
    """A request with a revision or an epoch ('570.86.15-1', '5:28.3.3-1~debian.12~bookworm') must be the
    offered version exactly; a bare upstream version ('570.86.15') matches any revision of it."""
    if "-" in requested or ":" in requested:
        return compare_versions(offered, requested) == 0
    return split_version(offered)[1] == requested


# ---------------------------------------------------------------------------------------------------------
# Index files (Packages, dpkg status).


def parse_stanzas(text):
    """RFC822-style stanzas -> list of dicts (continuation lines folded into the field)."""
    stanzas, current, key = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _sep, value = line.partition(":")
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def read_index(path):
    """Text of a Packages file, plain or compressed (.gz, .xz)."""
    opener = gzip.open if path.endswith(".gz") else lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


class LazyIndex:
    """name -> stanzas, newest first, like build_index, parsed only for the names asked for.

    A full Debian index is ~65,000 stanzas; a probe needs a handful of them. Stanzas are split and keyed by their
    Package line up front (cheap string work); fields are parsed on first access. Virtual packages: only the stanzas
    that carry a Provides field are parsed (provides).
    """

    def __init__(self, texts):
        self._raw = {}
        self._parsed = {}
        for text in texts:
            for part in text.split("\n\n"):
                chunk = part.strip("\n")
                if not chunk.startswith("Package:"):
                    continue
                end = chunk.find("\n")
                name = (chunk[8:] if end < 0 else chunk[8:end]).strip()
                self._raw.setdefault(name, []).append(chunk)

    def get(self, name, default=None):
        if name not in self._raw:
            return default
        if name not in self._parsed:
            stanzas = [s for chunk in self._raw[name] for s in parse_stanzas(chunk)]
            self._parsed[name] = build_index(stanzas).get(name, [])
        return self._parsed[name]

    def __contains__(self, name):
        return name in self._raw

    def provides(self):
        """virtual name -> [(provider, provider version, provided version or '')]"""
        names = [name for name, chunks in self._raw.items() if any("\nProvides:" in chunk for chunk in chunks)]
        return _provides((name, self.get(name, [])) for name in names)


def build_index(stanzas):
    """name -> list of stanzas, newest version first."""
    index = {}
    for stanza in stanzas:
        if "Package" in stanza and "Version" in stanza:
            index.setdefault(stanza["Package"], []).append(stanza)
    for name, offers in index.items():
        # de-duplicate versions offered by several suites or architecture lists
        unique = {s["Version"]: s for s in offers}
        index[name] = sorted(unique.values(), key=lambda s: _VERSION_KEY(s["Version"]), reverse=True)
    return index


def installed_versions(status_stanzas):
    """dpkg status stanzas -> {package: version} for installed packages."""
    out = {}
    for stanza in status_stanzas:
        if stanza.get("Status", "").endswith(" installed") and "Package" in stanza:
            out[stanza["Package"]] = stanza.get("Version", "")
    return out


def held_packages(status_stanzas):
    """dpkg status stanzas -> names whose selection is hold (apt-mark hold)."""
    return sorted(s["Package"] for s in status_stanzas if s.get("Status", "").startswith("hold ") and "Package" in s)


def installed_index(status_stanzas):
    """The installed packages as an index (one stanza each, with their Depends): what the host already has."""
    return build_index([s for s in status_stanzas if s.get("Status", "").endswith(" installed")])


_SIM_RE = re.compile(r"^(?:Inst|Remv) (\S+)")


def simulated_moves(lines):
    """Package names that `apt-get -s upgrade|dist-upgrade` output would install, upgrade or remove."""
    return sorted({m.group(1) for m in map(_SIM_RE.match, lines) if m})


_DEP_RE = re.compile(r"^\s*([^\s(\[<:]+)(?::\S+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?")


def parse_depends(field):
    """'a (>= 1) | b, c [amd64]' -> [[('a', '>=', '1'), ('b', '', '')], [('c', '', '')]]"""
    groups = []
    for group in (field or "").split(","):
        alts = []
        for alt in group.split("|"):
            match = _DEP_RE.match(alt)
            if match and match.group(1):
                alts.append((match.group(1), match.group(2) or "", match.group(3) or ""))
        if alts:
            groups.append(alts)
    return groups


# ---------------------------------------------------------------------------------------------------------
# Resolution.


def offered_versions(index, name):
    return [s["Version"] for s in index.get(name, [])]


def provides_index(index):
    """virtual name -> [(provider, provider version, provided version or '')]"""
    if isinstance(index, LazyIndex):
        return index.provides()
    return _provides(index.items())


def _provides(offers):
    """(name, stanzas) pairs -> virtual name -> [(provider, provider version, provided version or '')]"""
    out = {}
    for name, stanzas in offers:
        for stanza in stanzas:
            for group in parse_depends(stanza.get("Provides", "")):
                for virtual, _op, provided in group:
                    out.setdefault(virtual, []).append((name, stanza["Version"], provided))
    return out


def _candidates(alt, index, provides):
    """{real package: [versions that satisfy alt]} - the package itself, or a provider of it."""
    name, op, wanted = alt
    out = {}
    fits = [v for v in offered_versions(index, name) if satisfies(v, op, wanted)]
    if fits:
        out[name] = fits
    for provider, version, provided in provides().get(name, []):
        if not op or (provided and satisfies(provided, op, wanted)):
            out.setdefault(provider, []).append(version)
    return out


def resolve(index, requested, follow="all", installed=None):
    """Resolve the requested {package: version} against one repository's index.

    Returns {"resolved": {package: apt version} for the whole closure, "requested": {package: apt version},
    "closure_reasons": {package: [why]}, "errors": [message]}. `follow`: "all" follows every Depends and
    Pre-Depends that the index can satisfy (a dedicated repository); "exact" follows only "= version" ones
    (the distribution's own archive, where everything else is the distribution's business). Virtual packages
    are followed to their provider in the index (a versioned dependency only to a versioned Provides). A
    member that nobody asked for and nothing ties to one version takes the version of the package that pulled
    it in when that is offered and allowed, else the installed version, else the newest allowed.
    """
    installed = installed or {}
    provides = functools.lru_cache(maxsize=None)(lambda: provides_index(index))  # built on first use
    errors, resolved, reasons, rules = [], {}, {}, {}
    dep_errors = {}  # dep -> its latest error, which states every rule on it (one message per package)

    for name, requested_version in sorted(requested.items()):
        want = str(requested_version)
        offers = offered_versions(index, name)
        # "" = no version of its own to pin (a companion with its own version stream): the installed one when
        # offered, else the newest; pinned and held like the rest.
        match = (
            [v for v in offers if matches_request(v, want)]
            if want
            else sorted(offers, key=lambda v: v != installed.get(name))
        )
        if not match:
            errors.append(
                f"{name} {want} is not offered by this repository; it offers "
                + (", ".join(offers) if offers else "no version of it at all")
            )
            continue
        resolved[name] = match[0]
        reasons[name] = ["requested " + (want or "at any version (installed, else newest)")]

    queue = sorted(resolved)
    done = set()
    while queue:
        parent = queue.pop(0)
        version = resolved[parent]
        if (parent, version) in done:
            continue
        done.add((parent, version))
        stanza = next(s for s in index.get(parent) if s["Version"] == version)  # every version placed is offered
        groups = parse_depends(stanza.get("Pre-Depends", "")) + parse_depends(stanza.get("Depends", ""))
        for group in groups:
            alts = [a for a in group if a[1] == "="] if follow == "exact" else group
            target = _choose(alts, index, provides, resolved)
            if target is None:
                continue
            dep, allowed, alt = target
            why = f"{parent} {version} depends on {alt[0]}" + (f" ({alt[1]} {alt[2]})" if alt[1] else "")
            rules.setdefault(dep, []).append((frozenset(allowed), why))
            error, changed = _place(dep, index, resolved, rules[dep], requested, installed, version)
            reasons.setdefault(dep, []).append(why)
            if error:
                dep_errors[dep] = error
            elif changed:
                queue.append(dep)
    return {
        "resolved": dict(sorted(resolved.items())),
        "requested": {n: resolved[n] for n in sorted(requested) if n in resolved},
        "closure_reasons": {n: list(dict.fromkeys(r)) for n, r in sorted(reasons.items())},
        "errors": list(dict.fromkeys(errors + list(dep_errors.values()))),
    }


def _choose(alts, index, provides, resolved):
    """apt's choice, reduced to one repository: an alternative already satisfied by the set, else the first
    one this repository can satisfy. Returns (real package, versions that satisfy, alternative) or None when
    no alternative comes from this repository."""
    options = [(alt, _candidates(alt, index, provides)) for alt in alts]
    for alt, cands in options:
        for pkg, versions in cands.items():
            if pkg in resolved and resolved[pkg] in versions:
                return pkg, versions, alt
    for alt, cands in options:
        if cands:
            pkg = alt[0] if alt[0] in cands else sorted(cands)[0]
            return pkg, cands[pkg], alt
    # Only unsatisfiable alternatives: report against the first one the repository carries at all.
    for alt in alts:
        if alt[0] in index:
            return alt[0], [], alt
    return None


def _place(dep, index, resolved, rules, requested, installed, parent_version):
    """Give `dep` a version allowed by every rule: the version of the package that pulled it in when that is
    allowed (one source, one version: Debian's nvidia-kernel-dkms depends on the unversioned virtual
    nvidia-kernel-support--v1, which both driver versions provide), else the installed one, else the newest.
    Returns (error or None, changed)."""
    offers = offered_versions(index, dep)
    fits = [v for v in offers if all(v in allowed for allowed, _why in rules)]
    current = resolved.get(dep)
    if current is not None and current in fits:
        return None, False
    explain = "; ".join(why for _allowed, why in rules)
    if dep in requested:
        return (
            f"{dep} is requested at {requested[dep]} ({current or 'not offered'}) but {explain}: the set cannot be "
            f"pinned consistently. Pin {dep} to a version that satisfies it"
            + (f" (offered: {', '.join(fits)})" if fits else ""),
            False,
        )
    if not fits:
        return (
            f"{dep} cannot be pinned to a matching version: {explain}, and this repository offers "
            + (", ".join(offers) if offers else "no version of it"),
            False,
        )
    have = installed.get(dep)
    resolved[dep] = parent_version if parent_version in fits else (have if have in fits else fits[0])
    return None, True


def downgrades(resolved, installed, cmp=compare_versions):
    """Packages whose resolved version is older than the installed one: {package: (installed, resolved)}.
    ``cmp`` orders two versions (Debian's by default; the dnf module passes rpm's)."""
    return {
        name: (installed[name], version)
        for name, version in resolved.items()
        if name in installed and cmp(version, installed[name]) < 0
    }


# ---------------------------------------------------------------------------------------------------------
# What the apt and the dnf half of the pinned_packages module report and refuse alike.


def refusal(label, problems, fix):
    """The failure message of a set that cannot be pinned: the label, every problem, then the fix (when given)."""
    return label + "; ".join(problems) + "." + (f" Fix: {fix}" if fix else "")


def downgrade_refusal(down, variable, show=str):
    """The refusal of a set that downgrades installed packages ({package: (installed, resolved)}), or "" when
    it downgrades none. ``show`` writes one version."""
    if not down:
        return ""
    moves = ", ".join(f"{name} {show(old)} -> {show(new)}" for name, (old, new) in sorted(down.items()))
    return (
        f"the set would downgrade {moves}; set {variable}=true to allow it, or pin versions at least as new as the "
        "installed ones"
    )


def standing(resolved, installed):
    """Where each closure member ({package: version}) stands on the host ({package: installed version}): its
    installed version, the members installed at another version (moving), and the members an install has to
    install (missing)."""
    return {
        "installed": {name: installed[name] for name in resolved if name in installed},
        "moving": sorted(
            name for name, version in resolved.items() if name in installed and installed[name] != version
        ),
        "missing": sorted(name for name, version in resolved.items() if installed.get(name) != version),
    }


def holds_bytes(path, data):
    """The file at ``path`` holds exactly ``data`` (False when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return handle.read() == data
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------------
# OpenPGP key fingerprints (RFC 4880 v4 / RFC 9580 v6), so the probe needs no gpg on the host.

# RFC 4880 4.2.2 (new-format lengths), 5.5.2 (key versions), 4.3 (packet tags).
_ONE_OCTET, _TWO_OCTET, _FIVE_OCTET = 192, 224, 255
_V4, _V5, _V6 = 4, 5, 6
_TAG_PUBLIC_KEY, _TAG_PUBLIC_SUBKEY = 6, 14

_ARMOR_RE = re.compile(
    r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(?:[^\r\n]+:[^\r\n]*\r?\n)*\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----",
    re.S,
)


def dearmor(data):
    """Binary OpenPGP data from the bytes of an armored or binary key file (all armored blocks concatenated)."""
    blocks = _ARMOR_RE.findall(data.decode("ascii", errors="replace"))
    if not blocks:
        return data
    out = b""
    for block in blocks:
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip() and not ln.startswith("=")]
        out += base64.b64decode("".join(lines))
    return out


def _packets(data):
    i = 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            raise ValueError("not an OpenPGP key (bad packet header)")
        if head & 0x40:  # new format
            tag = head & 0x3F
            first = data[i + 1]
            if first < _ONE_OCTET:
                length, i = first, i + 2
            elif first < _TWO_OCTET:
                length, i = ((first - 192) << 8) + data[i + 2] + 192, i + 3
            elif first == _FIVE_OCTET:
                length, i = int.from_bytes(data[i + 2 : i + 6], "big"), i + 6
            else:
                raise ValueError("partial-length packets do not occur in keys")
        else:  # old format
            tag, ltype = (head >> 2) & 0x0F, head & 0x03
            size = {0: 1, 1: 2, 2: 4}.get(ltype)
            if size is None:
                raise ValueError("indeterminate-length packets do not occur in keys")
            length, i = int.from_bytes(data[i + 1 : i + 1 + size], "big"), i + 1 + size
        yield tag, data[i : i + length]
        i += length


def key_fingerprints(data):
    """{'primary': [FPR...], 'subkeys': [FPR...]} (upper-case hex) of every key in the file."""
    out = {"primary": [], "subkeys": []}
    for tag, body in _packets(dearmor(data)):
        if tag not in (_TAG_PUBLIC_KEY, _TAG_PUBLIC_SUBKEY) or not body:
            continue
        if body[0] == _V4:
            fpr = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()
        elif body[0] in (_V5, _V6):
            prefix = b"\x9b" if body[0] == _V6 else b"\x9a"
            fpr = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest()
        else:
            continue
        out["primary" if tag == _TAG_PUBLIC_KEY else "subkeys"].append(fpr.upper())
    return out


def normalize_fingerprint(value):
    return re.sub(r"[\s:]", "", str(value or "")).upper()


# ---------------------------------------------------------------------------------------------------------
# The two apt files the role writes, as text: the probe compares them with the host's, so a re-run writes
# (and even stats) nothing when they are current.

_MANAGED = "# Ansible managed: gpuops.cluster._pinned_packages '{name}'. Edits here are replaced on the next run."


def pin_preferences(name, resolved, repo_url=""):
    """apt_preferences(5) text pinning every closure member at its exact version, priority 1001."""
    source = f" from {repo_url}" if repo_url else ""
    lines = [
        _MANAGED.format(name=name),
        f"# Every package of the set and of its dependency closure{source}, at its exact version. Priority 1001",
        "# keeps these versions even when a repository offers newer ones (or older ones: a move is an explicit",
        "# pin change).",
    ]
    for package in sorted(resolved):
        lines += ["", f"Package: {package}", f"Pin: version {resolved[package]}", "Pin-Priority: 1001"]
    return "\n".join(lines) + "\n"


def deb822_source(name, repo_url, suites, components, architectures, keyring, fingerprint):
    """sources.list(5) deb822 text for one repository, signed-by its own keyring only."""
    lines = [
        _MANAGED.format(name=name),
        f"# This repository is signed by {fingerprint} only.",
        "Types: deb",
        f"URIs: {repo_url}",
        f"Suites: {' '.join(suites)}",
    ]
    if components:
        lines.append(f"Components: {' '.join(components)}")
    if architectures:
        lines.append(f"Architectures: {' '.join(architectures)}")
    lines.append(f"Signed-By: {keyring}")
    return "\n".join(lines) + "\n"
