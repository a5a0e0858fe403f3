# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The dnf half of the pinned_packages module: version requests, versionlock entries, closure choice (pure,
testable without dnf), then the probe and the check through dnf's Python API (dnf 4) on the host.

Versions are EVR tuples (epoch, version, release) of strings; comparison is injected (rpm's own, from the
dnf sack, on the host) so that the pure functions stay testable without dnf.
"""

from __future__ import annotations

import configparser
import functools
import os
import re

from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp

try:
    import dnf
    import dnf.exceptions
    import dnf.repo
    HAS_DNF = True
    DNF_IMPORT_ERROR = None
except ImportError as exc:  # the controller's sanity import test, or a host without python3-dnf
    HAS_DNF = False
    DNF_IMPORT_ERROR = exc

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


def choose(offered, requested, installed, cmp):
    """The offered EVR to pin for a request: the newest match; '' -> the installed one if offered, else newest."""
    if parse_request(requested) is None and installed is not None and installed in offered:
        return installed
    matching = [evr for evr in offered if matches_request(evr, requested)]
    return max(matching, key=functools.cmp_to_key(cmp)) if matching else None


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


# ---------------------------------------------------------------------------------------------------------
# dnf's Python API on the host.

PROBE_REPO = "gpuops-pinned-probe"
VERSIONLOCK_CONF = "/etc/dnf/plugins/versionlock.conf"  # the plugin's configuration; its locklist names the list file


def _evr(pkg):
    return (str(pkg.epoch or 0), pkg.v, pkg.r)


def _locklist(path):
    """The versionlock list file named by the plugin's configuration; ("", False) without the plugin."""
    if not os.path.exists(path):
        return "", False
    parser = configparser.ConfigParser()
    parser.read(path)
    listfile = parser.get("main", "locklist", fallback="")
    if not listfile or not os.path.exists(listfile):
        return "", True
    with open(listfile, encoding="utf-8") as handle:
        return handle.read(), True


def _base(module, p, label, plugins, scratch=None):
    """A dnf Base with the host's settings and either the probed repository only (read into ``scratch``, signed
    by ``scratch``/key) or the host's enabled repositories; its sack filled."""
    base = dnf.Base()
    conf = base.conf
    # The host's own settings (dnf.conf: proxy, excludes, TLS; /etc/dnf/vars), as dnf itself would run.
    if os.path.exists(conf.config_file_path):
        conf.read()
    conf.substitutions.update_from_etc(conf.installroot)
    conf.assumeyes = True
    # A substitution dnf could not detect ($releasever on a host without a release package) is None, which
    # libdnf's repositories refuse: leave it out.
    for key in [key for key, value in conf.substitutions.items() if value is None]:
        del conf.substitutions[key]
    if plugins:
        base.init_plugins()
        base.pre_configure_plugins()
    if p["repo_url"]:
        conf.cachedir = os.path.join(scratch, "cache")
        conf.reposdir = []
        repo = dnf.repo.Repo(PROBE_REPO, conf)
        repo.baseurl = [p["repo_url"]]
        repo.gpgcheck = True
        repo.repo_gpgcheck = True
        # A repository that cannot be read or verified is an error here, whatever dnf.conf says for the others.
        repo.skip_if_unavailable = False
        repo.gpgkey = ["file://" + os.path.join(scratch, "key")]
        # Packages of module streams not enabled yet (NVIDIA's driver streams) are visible to the probe.
        repo.module_hotfixes = True
        base.repos.add(repo)
    else:
        base.read_all_repos()
    if plugins:
        base.configure_plugins()
    try:
        base.fill_sack(load_system_repo=True)
    except dnf.exceptions.Error as exc:
        where = p["repo_url"] or "the host's enabled repositories"
        module.fail_json(
            msg=f"{label}dnf could not read {where}: {exc}. Fix: check that the URL answers and that its "
            "repodata/repomd.xml is signed (repomd.xml.asc) by the key whose fingerprint was checked.")
    return base


def _cmp(base):
    def cmp(a, b):
        return base.sack.evr_cmp(evr_string(a), evr_string(b))
    return cmp


def _installed(base):
    return {pkg.name: _evr(pkg) for pkg in base.sack.query().installed()}


def probe(module, p, result, label, scratch):
    """Resolve p["versions"] and their closure (as the apt half does), and what is installed and locked."""
    base = _base(module, p, label, plugins=False, scratch=scratch)
    cmp = _cmp(base)
    available = base.sack.query().available()
    if p["repo_url"]:
        available = available.filter(reponame=PROBE_REPO)
    offered = {}
    for pkg in available:
        offered.setdefault(pkg.name, set()).add(_evr(pkg))
    problems = []
    resolved, reasons = {}, {}
    installed_all = _installed(base)
    for name, requested in p["versions"].items():
        evrs = sorted(offered.get(name, []), key=evr_string)
        evr = choose(evrs, requested, installed_all.get(name), cmp) if evrs else None
        if evr is None:
            problems.append(
                f"{name} {requested or '(any)'} is not offered (offered: "
                f"{', '.join(evr_string(evr) for evr in evrs) or 'none'})")
            continue
        resolved[name] = evr
        reasons[name] = "requested"
    if not problems:
        problems += _closure(available, resolved, reasons, installed_all, p["follow"], cmp)
    if not (problems or p["allow_downgrade"]):
        down = pp.downgrades(resolved, installed_all, cmp)
        problems.append(pp.downgrade_refusal(down, p["downgrade_variable"], evr_string))
    problems = [problem for problem in problems if problem]
    result["requested"] = {name: evr_string(resolved[name]) for name in p["versions"] if name in resolved}
    if problems:
        module.fail_json(msg=pp.refusal(label, problems, p["fix"]), **result)
    locks, result["versionlock"] = _locklist(VERSIONLOCK_CONF)
    locked, stale = lock_state(resolved, read_locklist(locks))
    result.update(pp.standing({name: evr_string(evr) for name, evr in resolved.items()},
                              {name: evr_string(evr) for name, evr in installed_all.items()}))
    result.update(
        resolved={name: evr_string(evr) for name, evr in resolved.items()},
        closure_reasons=reasons,
        install_specs=[nevr(name, resolved[name]) for name in result["missing"]],
        locked=locked,
        stale_locks=stale,
        lock_entries={name: lock_entry(name, evr) for name, evr in resolved.items()},
    )


def _closure(available, resolved, reasons, installed, follow, cmp):
    """Add to resolved every package of `available` that the set requires (breadth first); return problems."""
    problems = []
    queue = list(resolved)
    while queue:
        name = queue.pop(0)
        evr = resolved[name]
        pkg = next((pkg for pkg in available.filter(name=name) if _evr(pkg) == evr), None)
        if pkg is None:
            continue
        for req in pkg.requires:
            text = str(req)
            if ignored_requirement(text) or (follow == "exact" and not requirement_is_exact(text)):
                continue
            providers = available.filter(provides=req)
            names = sorted({prov.name for prov in providers})
            if not names or name in names:
                continue  # from elsewhere (the distribution), or provided by the package itself
            dep = next((n for n in names if n in resolved), names[0] if len(names) == 1 else None)
            if dep is None:
                continue  # several packages provide it: left to dnf's resolver, not pinned
            fitting = [_evr(prov) for prov in providers if prov.name == dep]
            if dep in resolved:
                if resolved[dep] not in fitting:
                    problems.append(
                        f"{name} {evr_string(evr)} requires {text}, but {dep} is pinned at "
                        f"{evr_string(resolved[dep])} (fitting: "
                        f"{', '.join(sorted(evr_string(f) for f in fitting))})")
                continue
            same = [f for f in fitting if f[1:] == evr[1:]]
            if same:
                resolved[dep] = same[0]
            elif installed.get(dep) in fitting:
                resolved[dep] = installed[dep]
            else:
                resolved[dep] = max(fitting, key=functools.cmp_to_key(cmp))
            reasons[dep] = f"required by {name} ({text})"
            queue.append(dep)
    return problems


def verify(module, p, result, label):
    """installed == pinned, version-locked, and neither dnf upgrade nor distro-sync (simulated) moves the set."""
    base = _base(module, p, label, plugins=True)
    wanted = {}
    for name, version in p["verify"].items():
        epoch, ver, rel = parse_request(version) or (None, "", "")
        wanted[name] = (str(epoch or "0"), ver, rel or "")
    installed = _installed(base)
    result["wrong"] = [f"{name}: installed {evr_string(installed[name]) if name in installed else 'none'}, "
                       f"pinned {evr_string(evr)}" for name, evr in wanted.items() if installed.get(name) != evr]
    locks, result["versionlock"] = _locklist(VERSIONLOCK_CONF)
    locked, _stale = lock_state(wanted, read_locklist(locks))
    result["locked"] = locked
    result["unheld"] = sorted(name for name in wanted if name not in locked) if p["hold"] else []
    moves = {}
    for action in ("upgrade", "distro-sync"):
        base.reset(goal=True)
        if action == "upgrade":
            base.upgrade_all()
        else:
            base.distro_sync()
        try:
            base.resolve(allow_erasing=False)
        except dnf.exceptions.DepsolveError as exc:
            moves.setdefault(f"(cannot be resolved: {exc})", []).append(action)
            continue
        coming = {pkg.name: pkg for pkg in base.transaction.install_set if pkg.name in wanted}
        for name, pkg in coming.items():
            was = evr_string(installed[name]) if name in installed else "not installed"
            moves.setdefault(f"{name} {was} -> {evr_string(_evr(pkg))}", []).append(action)
        for pkg in base.transaction.remove_set:
            if pkg.name in wanted and pkg.name not in coming:
                moves.setdefault(f"{pkg.name} {evr_string(_evr(pkg))} removed", []).append(action)
    result["moved"] = [f"{move} (dnf {', '.join(actions)})" for move, actions in sorted(moves.items())]
