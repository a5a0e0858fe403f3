#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pinned_packages_dnf
short_description: Read-only probe and check of a dnf package set to pin - offered versions, closure, versionlocks
version_added: "0.2.0"
description:
  - The read-only dnf half of the C(_pinned_packages) role (the apt half is M(gpuops.cluster.pinned_packages)). It
    changes nothing on the host outside the scratch directory it is given; it uses dnf's Python API.
  - With O(repo_url), reads that repository only, into O(scratch), with C(gpgcheck) and C(repo_gpgcheck) and the
    already checked key O(key_file) (C(repomd.xml) must carry a valid signature by it); resolves O(versions) against
    it, and computes the dependency closure of those packages that comes from that repository (every requirement,
    or with O(follow=exact) only C(= version) ones). Without O(repo_url), the host's enabled repositories are read
    (with their own cache). It fails, naming every problem, when a requested version is not offered (listing the
    versions that are), when a closure member cannot be pinned to a version every dependant accepts, and when the
    set would downgrade an installed package and O(allow_downgrade) is false.
  - It reports what install has to do - RV(missing) (not installed at its pin), RV(locked), RV(stale_locks) (locks of
    these packages at another version), RV(lock_entries) - and RV(keyring_current).
  - With O(verify), compares the installed packages with that package -> version map, their versionlocks, and what
    C(dnf upgrade) and C(dnf distro-sync) would move (resolved with the host's repositories and dnf's plugins, the
    versionlock plugin included; nothing is downloaded or installed).
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.pinned_packages
  - gpuops.cluster.read_only
options:
  repo_url:
    description: Repository to read into O(scratch) (needs O(key_file) and O(scratch)).
    type: str
  key_file:
    description: The repository key (armored), its fingerprint already checked; repomd.xml must be signed by it.
    type: path
  key_path:
    description: The host's copy of the key; RV(keyring_current) says whether it equals O(key_file).
    type: path
  scratch:
    description: Scratch directory for dnf's cache of O(repo_url) (the caller removes it).
    type: path
  versionlock_conf:
    description: The versionlock plugin's configuration (its C(locklist) names the list file).
    type: path
    default: /etc/dnf/plugins/versionlock.conf
requirements:
  - python3-dnf (dnf 4) on the host
"""

EXAMPLES = r"""
- name: Resolve the set against the repository (key fingerprint checked before, into the scratch directory)
  gpuops.cluster.pinned_packages_dnf:
    repo_url: https://mirror.example/gpuops/el9/
    key_file: /tmp/gpuops-pin-demo.x/key.download
    key_path: /etc/pki/rpm-gpg/RPM-GPG-KEY-gpuops-demo
    scratch: /tmp/gpuops-pin-demo.x
    versions:
      gpuops-demo-tool: "1.0"
  register: probe

- name: Installed == pinned, locked, and neither upgrade nor distro-sync moves them
  gpuops.cluster.pinned_packages_dnf:
    verify: "{{ probe.resolved }}"
  register: check
"""

RETURN = r"""
offered:
  description: Every version the repository offers of each requested package.
  returned: when versions are resolved
  type: dict
  sample: {gpuops-demo-tool: ["1.0-1", "1.1-1"]}
resolved:
  description: Every closure member -> exact version (V-R, or E:V-R) to install and lock.
  returned: when versions are resolved
  type: dict
  sample: {gpuops-demo-tool: "1.0-1", gpuops-demo-lib: "1.0-1"}
requested:
  description: The requested packages -> exact version.
  returned: when versions are resolved
  type: dict
closure_reasons:
  description: Why each package is in the closure.
  returned: when versions are resolved
  type: dict
installed:
  description: Installed version of each closure member (absent when not installed).
  returned: when versions are resolved
  type: dict
moving:
  description: Closure members installed at another version than the one to pin.
  returned: when versions are resolved
  type: list
  elements: str
missing:
  description: Closure members not installed at the version to pin (what an install has to do).
  returned: when versions are resolved
  type: list
  elements: str
install_specs:
  description: C(name-V-R) specs of RV(missing), what C(dnf install) takes.
  returned: when versions are resolved
  type: list
  elements: str
locked:
  description: Closure members locked at exactly their pin.
  returned: when versions are resolved, or with verify
  type: list
  elements: str
stale_locks:
  description: Versionlock entries of closure members at another version (install deletes them before it moves).
  returned: when versions are resolved
  type: list
  elements: str
lock_entries:
  description: Closure member -> the versionlock entry (C(name-E:V-R.*)) that locks it at its pin.
  returned: when versions are resolved
  type: dict
keyring_current:
  description: O(key_path) exists and equals O(key_file).
  returned: when key_file and key_path are given
  type: bool
versionlock:
  description: dnf's versionlock plugin is installed (O(versionlock_conf) exists).
  returned: always
  type: bool
wrong:
  description: "With O(verify), C(name: installed X, pinned Y) for each package not at its pin."
  returned: with verify
  type: list
  elements: str
unlocked:
  description: With O(verify) and O(hold), packages not locked at their pin.
  returned: with verify
  type: list
  elements: str
moved:
  description: With O(verify), C(name X -> Y (upgrade|distro-sync)) for each package a simulated run would move.
  returned: with verify
  type: list
  elements: str
"""

import configparser
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages_dnf as ppd

try:
    import dnf
    import dnf.exceptions
    import dnf.repo
    HAS_DNF = True
    DNF_IMPORT_ERROR = None
except ImportError as exc:  # the controller's sanity import test, or a host without python3-dnf
    HAS_DNF = False
    DNF_IMPORT_ERROR = exc

PROBE_REPO = "gpuops-pinned-probe"


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


def _base(module, p, plugins):
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
        conf.cachedir = os.path.join(p["scratch"], "cache")
        conf.reposdir = []
        repo = dnf.repo.Repo(PROBE_REPO, conf)
        repo.baseurl = [p["repo_url"]]
        repo.gpgcheck = True
        repo.repo_gpgcheck = True
        # A repository that cannot be read or verified is an error here, whatever dnf.conf says for the others.
        repo.skip_if_unavailable = False
        repo.gpgkey = ["file://" + p["key_file"]]
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
            msg=f"{p['label']}dnf could not read {where}: {exc}. Fix: check that the URL answers and that its "
            "repodata/repomd.xml is signed (repomd.xml.asc) by the key whose fingerprint was checked.")
    return base


def _cmp(base):
    def cmp(a, b):
        return base.sack.evr_cmp(ppd.evr_string(a), ppd.evr_string(b))
    return cmp


def _installed(base, names):
    found = {}
    for pkg in base.sack.query().installed().filter(name=list(names)):
        found[pkg.name] = _evr(pkg)
    return found


def probe(module, p, result):
    base = _base(module, p, plugins=False)
    cmp = _cmp(base)
    available = base.sack.query().available()
    if p["repo_url"]:
        available = available.filter(reponame=PROBE_REPO)
    offered = {}
    for pkg in available:
        offered.setdefault(pkg.name, set()).add(_evr(pkg))
    problems = []
    resolved, reasons = {}, {}
    installed_all = {pkg.name: _evr(pkg) for pkg in base.sack.query().installed()}
    result["offered"] = {}
    for name, requested in p["versions"].items():
        evrs = sorted(offered.get(name, []), key=ppd.evr_string)
        result["offered"][name] = [ppd.evr_string(evr) for evr in evrs]
        evr = ppd.choose(evrs, requested, installed_all.get(name), cmp) if evrs else None
        if evr is None:
            problems.append(
                f"{name} {requested or '(any)'} is not offered (offered: "
                f"{', '.join(result['offered'][name]) or 'none'})")
            continue
        resolved[name] = evr
        reasons[name] = "requested"
    if not problems:
        problems += _closure(available, resolved, reasons, installed_all, p["follow"], cmp)
    if not (problems or p["allow_downgrade"]):
        down = pp.downgrades(resolved, installed_all, cmp)
        problems.append(pp.downgrade_refusal(down, p["downgrade_variable"], ppd.evr_string))
    problems = [problem for problem in problems if problem]
    result["requested"] = {name: ppd.evr_string(resolved[name]) for name in p["versions"] if name in resolved}
    if problems:
        module.fail_json(msg=pp.refusal(p["label"], problems, p["fix"]), **result)
    locks, result["versionlock"] = _locklist(p["versionlock_conf"])
    locked, stale = ppd.lock_state(resolved, ppd.read_locklist(locks))
    result.update(pp.standing({name: ppd.evr_string(evr) for name, evr in resolved.items()},
                              {name: ppd.evr_string(evr) for name, evr in installed_all.items()}))
    result.update(
        resolved={name: ppd.evr_string(evr) for name, evr in resolved.items()},
        closure_reasons=reasons,
        install_specs=[ppd.nevr(name, resolved[name]) for name in result["missing"]],
        locked=locked,
        stale_locks=stale,
        lock_entries={name: ppd.lock_entry(name, evr) for name, evr in resolved.items()},
    )


def _closure(available, resolved, reasons, installed, follow, cmp):
    """Add to resolved every package of `available` that the set requires (breadth first); return problems."""
    problems = []
    queue = list(resolved)
    chosen_pkgs = {}
    while queue:
        name = queue.pop(0)
        evr = resolved[name]
        pkg = next((pkg for pkg in available.filter(name=name) if _evr(pkg) == evr), None)
        if pkg is None:
            continue
        chosen_pkgs[name] = pkg
        for req in pkg.requires:
            text = str(req)
            if ppd.ignored_requirement(text) or (follow == "exact" and not ppd.requirement_is_exact(text)):
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
                        f"{name} {ppd.evr_string(evr)} requires {text}, but {dep} is pinned at "
                        f"{ppd.evr_string(resolved[dep])} (fitting: "
                        f"{', '.join(sorted(ppd.evr_string(f) for f in fitting))})")
                continue
            same = [f for f in fitting if f[1:] == evr[1:]]
            if same:
                resolved[dep] = same[0]
            elif installed.get(dep) in fitting:
                resolved[dep] = installed[dep]
            else:
                resolved[dep] = ppd.newest(fitting, cmp)
            reasons[dep] = f"required by {name} ({text})"
            queue.append(dep)
    return problems


def verify(module, p, result):
    base = _base(module, p, plugins=True)
    wanted = {}
    for name, version in p["verify"].items():
        epoch, ver, rel = ppd.parse_request(version) or (None, "", "")
        wanted[name] = (str(epoch or "0"), ver, rel or "")
    installed = _installed(base, wanted)
    result["wrong"] = [f"{name}: installed {ppd.evr_string(installed[name]) if name in installed else 'none'}, "
                       f"pinned {ppd.evr_string(evr)}" for name, evr in wanted.items() if installed.get(name) != evr]
    locks, result["versionlock"] = _locklist(p["versionlock_conf"])
    locked, _stale = ppd.lock_state(wanted, ppd.read_locklist(locks))
    result["locked"] = locked
    result["unlocked"] = sorted(name for name in wanted if name not in locked) if p["hold"] else []
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
            was = ppd.evr_string(installed[name]) if name in installed else "not installed"
            moves.setdefault(f"{name} {was} -> {ppd.evr_string(_evr(pkg))}", []).append(action)
        for pkg in base.transaction.remove_set:
            if pkg.name in wanted and pkg.name not in coming:
                moves.setdefault(f"{pkg.name} {ppd.evr_string(_evr(pkg))} removed", []).append(action)
    result["moved"] = [f"{move} (dnf {', '.join(actions)})" for move, actions in sorted(moves.items())]


def main():
    module = AnsibleModule(
        argument_spec={
            "repo_url": {"type": "str"},
            "key_file": {"type": "path"},
            "key_path": {"type": "path"},
            "scratch": {"type": "path"},
            "versionlock_conf": {"type": "path", "default": "/etc/dnf/plugins/versionlock.conf"},
            **pp.SET_OPTIONS,
        },
        required_by={"repo_url": ["key_file", "scratch"]},
        supports_check_mode=True,
    )
    p = module.params
    label = f"{p['label']}: " if p["label"] else ""
    p["label"] = label
    if not HAS_DNF:
        module.fail_json(msg=label + missing_required_lib("python3-dnf (dnf 4)"), exception=str(DNF_IMPORT_ERROR))
    result = {"changed": False}
    if p["key_file"] and p["key_path"]:
        with open(p["key_file"], "rb") as handle:
            result["keyring_current"] = pp.holds_bytes(p["key_path"], handle.read())
    if p["verify"] is not None:
        verify(module, p, result)
    elif p["versions"]:
        probe(module, p, result)
    else:
        module.fail_json(msg=f"{label}give versions (probe) or verify")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
