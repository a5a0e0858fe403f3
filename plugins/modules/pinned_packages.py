#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pinned_packages
short_description: Read-only probe and check of a package set to pin (apt or dnf) - key, offered versions, closure
version_added: "0.2.0"
description:
  - The read-only half of the C(_pinned_packages) role, for apt and, with O(manager=dnf), for dnf. It changes
    nothing on the host outside a scratch directory it removes again, and O(key_dest).
  - With O(repo_url), fetches O(key_url), checks O(key_fingerprint) against the key's primary fingerprints (computed
    from the key packets, so no C(gpg) is needed) and reads that repository only, with that key only - apt with a
    scratch C(apt-get update), signed-by the key; dnf through its Python API with C(gpgcheck) and C(repo_gpgcheck),
    so C(repomd.xml) must carry a valid signature by it. Without O(repo_url), apt reads O(lists_dir) and dnf the
    host's enabled repositories.
  - Resolves each package of O(versions) to the exact version offered, with the dependency closure from that index
    (O(follow)). It fails, naming every problem, when a requested version is not offered (listing the versions that
    are), when a closure member cannot be pinned to a version that satisfies everything that depends on it (the
    NVIDIA repository's C(= version) case), and when the set would downgrade an installed package (O(allow_downgrade)).
  - O(key_dest), O(installed_only) and O(verify) are the other three calls; see each. Pure logic lives in
    C(plugins/module_utils/pinned_packages.py) and C(pinned_packages_dnf.py).
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  manager:
    description: The package manager - V(apt) (Debian family) or V(dnf) (RHEL family, dnf 4).
    type: str
    choices: [apt, dnf]
    default: apt
  versions:
    description:
      - Package -> version. A bare version (V(570.86.15)) matches any Debian revision or RPM release of it (the newest
        is taken); a version with a revision or release (V(1.31.2-1.1), V(2:1.0-1)) must match exactly, epoch
        included. V("") takes the installed version if offered, else the newest.
    type: dict
    default: {}
  follow:
    description:
      - Which dependencies make up the closure - V(all) (every one the repository satisfies, a dedicated repository)
        or V(exact) (only C(= version) ones); apt follows Depends and Pre-Depends, dnf every requirement.
    type: str
    choices: [all, exact]
    default: all
  allow_downgrade:
    description: Accept a set that moves an installed package to an older version.
    type: bool
    default: false
  downgrade_variable:
    description: The variable that allows a downgrade, named in the refusal of one.
    type: str
    default: pinned_packages_allow_downgrade
  verify:
    description:
      - Package -> exact version that must be installed (and, with O(hold), held), and that no upgrade would move,
        simulated without apt's lock or a download (C(apt-get -s upgrade) and C(dist-upgrade); C(dnf upgrade) and
        C(distro-sync) with the host's repositories and plugins, versionlock included). See RV(wrong) and RV(moved).
    type: dict
  hold:
    description: With O(verify), every package must be held (apt-mark hold; dnf - version-locked at its pin).
    type: bool
    default: true
  label:
    description: Prefix of every failure message (which package set, which repository).
    type: str
    default: ""
  fix:
    description: Appended to a refusal of the version set (what to change).
    type: str
    default: ""
  repo_url:
    description: Repository to probe in a scratch directory (needs O(key_url), O(key_fingerprint); apt - O(suites)).
    type: str
  suites:
    description: apt - suites of O(repo_url).
    type: list
    elements: str
    default: []
  components:
    description: apt - components of O(repo_url) (none for a flat repository).
    type: list
    elements: str
    default: []
  architectures:
    description: apt - architectures to read from O(repo_url) (apt's default when empty).
    type: list
    elements: str
    default: []
  key_url:
    description: URL of the repository's signing key (armored or binary OpenPGP; https, http or file).
    type: str
  key_fingerprint:
    description: Expected full fingerprint of the repository key (spaces and colons ignored, any case).
    type: str
  keyring:
    description: The host's copy of the key (apt - binary keyring; dnf - key file); see RV(keyring_current).
    type: path
  key_dest:
    description:
      - Without O(repo_url) - write the fetched and checked key here (apt - binary OpenPGP, what a C(.gpg) keyring
        holds; dnf - as served). Callers point it into their own scratch directory.
    type: path
  lists_dir:
    description: apt - lists directory of a scratch C(apt-get update) that saw only the repository to pin.
    type: path
  installed_only:
    description:
      - apt - resolve O(versions) against the installed packages only (no index is read) and report RV(complete);
        never fail. A caller reads the index only when the set is not complete.
    type: bool
    default: false
  status_file:
    description: apt - dpkg status file read for installed versions and holds.
    type: path
    default: /var/lib/dpkg/status
  set_name:
    description: apt - name of the package set, written in the header of RV(pin_content) and RV(sources_content).
    type: str
    default: ""
  pin_file:
    description:
      - apt - preferences file of the set. With resolved versions, RV(pin_content) is its text (every closure member
        at its exact version, priority 1001) and RV(pin_current) says whether the file already holds exactly that,
        owned by root, mode 0644 - the caller writes it only when not.
    type: path
  sources_file:
    description:
      - apt - deb822 sources file of O(repo_url), signed-by O(keyring) only; RV(sources_content) and
        RV(sources_current) as for O(pin_file).
    type: path
requirements:
  - python3-dnf (dnf 4) on the host, for O(manager=dnf)
"""

EXAMPLES = r"""
- name: Resolve the driver set against NVIDIA's repository (key fingerprint checked first)
  gpuops.cluster.pinned_packages:
    repo_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    suites: ["/"]
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    key_fingerprint: "EB693B3035CD5710E231E123A4B469963BF863CC"
    keyring: /etc/apt/keyrings/nvidia-driver.gpg
    versions:
      nvidia-open: "570.86.15"
  register: probe

- name: The same against a signed RPM repository (dnf)
  gpuops.cluster.pinned_packages:
    manager: dnf
    repo_url: https://mirror.example/gpuops/el9/
    key_url: https://mirror.example/gpuops/RPM-GPG-KEY-gpuops
    key_fingerprint: "0123456789ABCDEF0123456789ABCDEF01234567"
    keyring: /etc/pki/rpm-gpg/RPM-GPG-KEY-gpuops-demo
    versions:
      gpuops-demo-tool: "1.0"

- name: Is the distribution set already installed at its pins? (reads nothing else)
  gpuops.cluster.pinned_packages:
    installed_only: true
    versions: {docker.io: "26.1.5+dfsg1-9+b9"}
    follow: exact
  register: installed

- name: Installed == pinned, held, and no upgrade moves them
  gpuops.cluster.pinned_packages:
    verify: "{{ probe.resolved }}"
  register: check
"""

RETURN = r"""
fingerprints:
  description: Fingerprints found in the key.
  returned: when key_url is given
  type: dict
  sample: {primary: ["EB693B3035CD5710E231E123A4B469963BF863CC"], subkeys: []}
keyring_current:
  description: O(keyring) exists and holds exactly the fetched key (apt - in binary form; dnf - as served).
  returned: when repo_url and keyring are given
  type: bool
resolved:
  description: Every closure member -> exact version to pin, install and hold (apt's; dnf's V-R, or E:V-R).
  returned: when versions are resolved
  type: dict
  sample: {nvidia-open: "570.86.15-1", nvidia-kernel-open-dkms: "570.86.15-1"}
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
  description: Closure members that are installed at another version than the one to pin.
  returned: when versions are resolved
  type: list
  elements: str
missing:
  description: Closure members not installed at the version to pin (what an install has to do).
  returned: when versions are resolved
  type: list
  elements: str
install_specs:
  description: dnf - C(name-V-R) specs of RV(missing), what C(dnf install) takes.
  returned: when versions are resolved (dnf)
  type: list
  elements: str
held:
  description: apt - closure members whose dpkg selection is hold.
  returned: when versions are resolved, or with verify (apt)
  type: list
  elements: str
locked:
  description: dnf - closure members locked at exactly their pin.
  returned: when versions are resolved, or with verify (dnf)
  type: list
  elements: str
stale_locks:
  description: dnf - versionlock entries of closure members at another version (install deletes them before it moves).
  returned: when versions are resolved (dnf)
  type: list
  elements: str
lock_entries:
  description: dnf - closure member -> the versionlock entry (C(name-E:V-R.*)) that locks it at its pin.
  returned: when versions are resolved (dnf)
  type: dict
versionlock:
  description: dnf - the versionlock plugin is installed (C(/etc/dnf/plugins/versionlock.conf) exists).
  returned: when versions are resolved, or with verify (dnf)
  type: bool
complete:
  description: With O(installed_only), every requested package and its closure are installed at matching versions.
  returned: when installed_only is true
  type: bool
wrong:
  description: With O(verify), packages not at their version (apt C(name=version); dnf C(name - installed X, pinned Y)).
  returned: with verify
  type: list
  elements: str
unheld:
  description: With O(verify) and O(hold), packages that are not held (dnf - not locked at their pin).
  returned: with verify
  type: list
  elements: str
moved:
  description: With O(verify), packages a simulated upgrade would move (dnf - C(name X -> Y (upgrade|distro-sync))).
  returned: with verify
  type: list
  elements: str
pin_content:
  description: apt - the text O(pin_file) must hold.
  returned: when pin_file is given and versions are resolved
  type: str
pin_current:
  description: apt - O(pin_file) holds exactly RV(pin_content), owned by root:root, mode 0644.
  returned: when pin_file is given and versions are resolved
  type: bool
sources_content:
  description: apt - the text O(sources_file) must hold.
  returned: when sources_file and repo_url are given
  type: str
sources_current:
  description: apt - O(sources_file) holds exactly RV(sources_content), owned by root:root, mode 0644.
  returned: when sources_file and repo_url are given
  type: bool
"""

import glob
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.urls import fetch_url
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages_dnf as ppd

HTTP_OK = 200
KEY_TIMEOUT = 30  # seconds to wait for the key (the index download follows apt's or dnf's own timeouts)
_SCRATCH_APT = (
    "Dir::Etc::SourceList={d}/sources.list",
    "Dir::Etc::SourceParts={d}/parts",
    "Dir::State::Lists={d}/lists",
    "Dir::Cache={d}/cache",
    "Dir::Etc::Preferences={d}/none",
    "Dir::Etc::PreferencesParts={d}/parts",
    "Acquire::GzipIndexes=false",
    "APT::Sandbox::User=root",
)


def fetch_key(module, label, result):
    """The key at key_url, failing unless key_fingerprint is a primary one (fingerprints in result): the bytes as
    served."""
    p = module.params
    response, info = fetch_url(module, p["key_url"], timeout=KEY_TIMEOUT)
    # A file:// URL (a mirror on the host's disk) answers without an HTTP status.
    if response is None or info.get("status") not in (HTTP_OK, None):
        module.fail_json(
            msg=f"{label}could not fetch the signing key {p['key_url']}: {info.get('msg', '')} (HTTP "
            f"{info.get('status')}). Fix: point the key URL at a reachable copy of the repository's key.",
            **result,
        )
    raw = response.read()
    try:
        fingerprints = pp.key_fingerprints(raw)
    except (ValueError, IndexError) as exc:
        module.fail_json(
            msg=f"{label}key {p['key_url']} is not an OpenPGP public key ({exc}). Fix: point the key URL at the "
            "repository's public key."
        )
    want = pp.normalize_fingerprint(p["key_fingerprint"])
    if want and want not in fingerprints["primary"]:
        found = ", ".join(fingerprints["primary"]) or "none"
        module.fail_json(
            msg=f"{label}the repository key has fingerprint {found} (key {p['key_url']}); "
            f"expected {want}. Fix: serve the repository's own key at the key URL, or correct the expected "
            "fingerprint if the vendor rotated its key (check the vendor's published fingerprint).",
            fingerprints=fingerprints,
        )
    result["fingerprints"] = fingerprints
    return raw


def write_key(module, path, label, result):
    """The key at key_url, checked, written to path as the host keeps it (binary OpenPGP for apt's signed-by
    keyring, as served for dnf and rpm); where a repository is probed, whether the host's keyring holds it."""
    p = module.params
    raw = fetch_key(module, label, result)
    key = raw if p["manager"] == "dnf" else pp.dearmor(raw)
    with open(path, "wb") as handle:
        handle.write(key)
    if p["repo_url"] and p["keyring"]:
        result["keyring_current"] = pp.holds_bytes(p["keyring"], key)


def probe_repository(module, scratch, label, result):
    """Key -> fingerprint -> scratch sources.list signed-by it -> scratch apt-get update. Returns the lists dir."""
    p = module.params
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        os.makedirs(os.path.join(scratch, sub))
    write_key(module, os.path.join(scratch, "key.gpg"), label, result)
    options = f"signed-by={scratch}/key.gpg" + (f" arch={','.join(p['architectures'])}" if p["architectures"] else "")
    with open(os.path.join(scratch, "sources.list"), "w", encoding="utf-8") as handle:
        for suite in p["suites"]:
            handle.write(f"deb [{options}] {p['repo_url']} {suite} {' '.join(p['components'])}\n")
    argv = ["apt-get", "update", "--error-on=any"]
    for option in _SCRATCH_APT:
        argv += ["-o", option.format(d=scratch)]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        why = apt_errors(out + "\n" + err) or out.splitlines()[-3:]
        module.fail_json(
            msg=f"{label}apt refused {p['repo_url']} (suites {', '.join(p['suites'])}) with the key from "
            f"{p['key_url']}: {' / '.join(why).rstrip('.')}. Fix: check the repository URL and suites, and that the "
            "key is the one that signs this repository.",
            **result,
        )
    return os.path.join(scratch, "lists")


def apt_errors(text):
    """apt's E:/W:/Err: lines; an Err: line with the reason apt prints indented below it (404, timeout...)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith(("E:", "W:", "Err:")):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            out.append(line + (" - " + " ".join(nxt.split()) if line.startswith("Err:") and nxt[:1].isspace() else ""))
    return out


def resolve_lists(module, lists_dir, status, label, result):
    p = module.params
    files = sorted(glob.glob(os.path.join(lists_dir, "*_Packages*")))
    texts = [
        pp.read_index(path)
        for path in files
        if path.endswith((".gz", ".xz")) or os.path.basename(path).endswith("_Packages")
    ]
    index = pp.LazyIndex(texts)
    installed = pp.installed_versions(status)
    versions = {str(k): str(v) for k, v in p["versions"].items()}
    out = pp.resolve(index, versions, follow=p["follow"], installed=installed)
    describe(out, installed, status, result)
    result["index_files"] = [os.path.basename(f) for f in files]
    errors = list(out["errors"])
    if not files:
        errors.insert(0, f"no Packages index in {lists_dir}")
    if not p["allow_downgrade"]:
        errors.append(pp.downgrade_refusal(pp.downgrades(out["resolved"], installed), p["downgrade_variable"]))
    errors = [error for error in errors if error]
    if errors:
        module.fail_json(msg=pp.refusal(label, errors, p["fix"]), errors=errors, **result)


def describe(out, installed, status, result):
    """resolved/requested/closure_reasons, and where each closure member stands on the host."""
    resolved = out["resolved"]
    held = set(pp.held_packages(status))
    result.update({k: out[k] for k in ("resolved", "requested", "closure_reasons")})
    result.update(pp.standing(resolved, installed))
    result["held"] = sorted(n for n in resolved if n in held)


def verify(module, status, result):
    p = module.params
    want = {str(k): str(v) for k, v in p["verify"].items()}
    installed = pp.installed_versions(status)
    held = set(pp.held_packages(status))
    moved = set()
    for action in ("upgrade", "dist-upgrade"):
        rc, out, err = module.run_command(["apt-get", "-s", "-o", "Debug::NoLocking=1", action])
        if rc != 0:
            module.fail_json(msg=f"{p['label']}: apt-get -s {action} failed: {err or out}", **result)
        moved.update(pp.simulated_moves(out.splitlines()))
    result["wrong"] = sorted(f"{n}={v}" for n, v in want.items() if installed.get(n) != v)
    result["unheld"] = sorted(n for n in want if n not in held) if p["hold"] else []
    result["held"] = sorted(n for n in want if n in held)
    result["moved"] = sorted(n for n in moved if n in want)


def file_current(path, content):
    """The file holds exactly ``content``, owned by root:root, mode 0644 (what the caller would write)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (0, 0, 0o644) and pp.holds_bytes(path, content.encode())


def apt_files(module, result):
    """The pin file's (and the repository's sources file's) text, and whether the host holds it already."""
    p = module.params
    if p["pin_file"] and "resolved" in result:
        result["pin_content"] = pp.pin_preferences(p["set_name"], result["resolved"], p["repo_url"] or "")
        result["pin_current"] = file_current(p["pin_file"], result["pin_content"])
    if p["sources_file"] and p["repo_url"]:
        result["sources_content"] = pp.deb822_source(
            p["set_name"], p["repo_url"], p["suites"], p["components"], p["architectures"], p["keyring"] or "",
            pp.normalize_fingerprint(p["key_fingerprint"]),
        )
        result["sources_current"] = file_current(p["sources_file"], result["sources_content"])


def main():
    spec = {
        "manager": {"type": "str", "choices": ["apt", "dnf"], "default": "apt"},
        "versions": {"type": "dict", "default": {}},
        "follow": {"type": "str", "choices": ["all", "exact"], "default": "all"},
        "allow_downgrade": {"type": "bool", "default": False},
        "downgrade_variable": {"type": "str", "default": "pinned_packages_allow_downgrade"},
        "verify": {"type": "dict"},
        "hold": {"type": "bool", "default": True},
        "label": {"type": "str", "default": ""},
        "fix": {"type": "str", "default": ""},
        "repo_url": {"type": "str"},
        "suites": {"type": "list", "elements": "str", "default": []},
        "components": {"type": "list", "elements": "str", "default": []},
        "architectures": {"type": "list", "elements": "str", "default": []},
        "key_url": {"type": "str", "no_log": False},  # a public key's URL, not a secret
        "key_fingerprint": {"type": "str", "no_log": False},  # a public key fingerprint, not a secret
        "keyring": {"type": "path"},
        "key_dest": {"type": "path"},
        "lists_dir": {"type": "path"},
        "installed_only": {"type": "bool", "default": False},
        "status_file": {"type": "path", "default": "/var/lib/dpkg/status"},
        "set_name": {"type": "str", "default": ""},
        "pin_file": {"type": "path"},
        "sources_file": {"type": "path"},
    }
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    module.run_command_environ_update = {"LC_ALL": "C"}
    p = module.params
    result = {"changed": False}
    label = p["label"] + ": " if p["label"] else ""
    dnf = p["manager"] == "dnf"
    keyless = (p["repo_url"] or p["key_dest"]) and not (p["key_url"] and p["key_fingerprint"])
    if keyless or (p["repo_url"] and not (p["suites"] or dnf)):
        module.fail_json(msg=f"{label}repo_url needs key_url, key_fingerprint and (apt) suites; key_dest needs "
                         "key_url and key_fingerprint. Fix: give the repository's key URL, the key's full fingerprint "
                         "and (apt) its suites.")

    scratch = tempfile.mkdtemp(prefix="gpuops-pin.")  # a probe's key and index; removed whatever happens
    try:
        if p["key_dest"] and not p["repo_url"]:
            write_key(module, p["key_dest"], label, result)
        elif dnf:
            if not ppd.HAS_DNF:
                module.fail_json(msg=label + missing_required_lib("python3-dnf (dnf 4)"),
                                 exception=str(ppd.DNF_IMPORT_ERROR))
            if p["verify"] is not None:
                ppd.verify(module, p, result, label)
            elif p["versions"]:
                if p["repo_url"]:
                    write_key(module, os.path.join(scratch, "key"), label, result)  # keyring_current
                ppd.probe(module, p, result, label, scratch)
        else:
            probe_apt(module, scratch, label, result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    module.exit_json(**result)


def probe_apt(module, scratch, label, result):
    p = module.params
    status = pp.parse_stanzas(pp.read_index(p["status_file"])) if os.path.exists(p["status_file"]) else []
    if p["verify"] is not None:
        verify(module, status, result)
    if p["installed_only"]:
        versions = {str(k): str(v) for k, v in p["versions"].items()}
        out = pp.resolve(pp.installed_index(status), versions, follow=p["follow"])
        describe(out, pp.installed_versions(status), status, result)
        result["complete"] = bool(versions) and not out["errors"] and not result["missing"]
    elif p["repo_url"]:
        resolve_lists(module, probe_repository(module, scratch, label, result), status, label, result)
    elif p["lists_dir"]:
        resolve_lists(module, p["lists_dir"], status, label, result)
    apt_files(module, result)


if __name__ == "__main__":
    main()
