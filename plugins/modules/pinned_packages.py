#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pinned_packages
short_description: Read-only probe of a package set to pin - key fingerprint, offered versions, dependency closure
version_added: "0.2.0"
description:
  - The read-only half of the C(_pinned_packages) role. It changes nothing on the host; it only reads the files it
    is given (a downloaded key, apt list files, the dpkg status file).
  - With O(key_file), reports the OpenPGP fingerprints of the key (computed from the key packets, so no C(gpg) is
    needed on the host) and fails when O(key_fingerprint) is not among the primary keys.
  - With O(lists_dir), reads every C(*_Packages) index in it (plain, C(.gz) or C(.xz)), resolves each package of
    O(versions) to the exact apt version offered, and computes the dependency closure of those packages that
    comes from that index (Depends and Pre-Depends; with O(follow=exact) only C(= version) ones). It fails, naming
    every problem, when a requested version is not offered (listing the versions that are), when a closure
    member cannot be pinned to a version that satisfies everything that depends on it (the NVIDIA repository's
    C(= version) case), and when the set would downgrade an installed package and O(allow_downgrade) is false.
  - Pure logic lives in C(plugins/module_utils/pinned_packages.py).
author:
  - gpuops.cluster maintainers (@gpuops)
options:
  key_file:
    description: Downloaded repository key (armored or binary OpenPGP).
    type: path
  key_fingerprint:
    description: Expected full fingerprint of the repository key (spaces and colons ignored, any case).
    type: str
  dearmor_to:
    description:
      - Write the key, in binary OpenPGP form (what apt's C(.gpg) keyrings hold), to this path - the only file the
        module writes; callers point it into their scratch directory.
    type: path
  lists_dir:
    description: apt lists directory of a scratch C(apt-get update) that saw only the repository to pin.
    type: path
  versions:
    description:
      - Package -> version. A bare upstream version (V(570.86.15)) matches any Debian revision of it (the newest is
        taken); a version with a revision or an epoch (V(1.31.2-1.1)) must match exactly.
    type: dict
    default: {}
  follow:
    description:
      - Which dependencies make up the closure - V(all) (a dedicated repository) or V(exact) (only C(= version) ones).
    type: str
    choices: [all, exact]
    default: all
  status_file:
    description: dpkg status file read for installed versions (kept for unconstrained members; downgrade check).
    type: path
    default: /var/lib/dpkg/status
  allow_downgrade:
    description: Accept a set that moves an installed package to an older version.
    type: bool
    default: false
  downgrade_variable:
    description: The variable that allows a downgrade, named in the refusal of one.
    type: str
    default: pinned_packages_allow_downgrade
  label:
    description: Prefix of every failure message (which package set, which repository).
    type: str
    default: ""
  fix:
    description: Appended to a refusal of the version set (what to change).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reports what it would install, pin and hold without changing anything.
  diff_mode:
    support: none
    description: No diff is shown.
"""

EXAMPLES = r"""
- name: Resolve the driver set against the probed index
  gpuops.cluster.pinned_packages:
    key_file: /tmp/probe/key
    key_fingerprint: "EB693B3035CD5710E231E123A4B469963BF863CC"
    lists_dir: /tmp/probe/lists
    versions:
      nvidia-open: "570.86.15"
  register: probe
"""

RETURN = r"""
fingerprints:
  description: Fingerprints found in O(key_file).
  returned: when key_file is given
  type: dict
  sample: {primary: ["EB693B3035CD5710E231E123A4B469963BF863CC"], subkeys: []}
resolved:
  description: Every closure member -> exact apt version to pin, install and hold.
  returned: when lists_dir is given
  type: dict
  sample: {nvidia-open: "570.86.15-1", nvidia-kernel-open-dkms: "570.86.15-1"}
requested:
  description: The requested packages -> exact apt version.
  returned: when lists_dir is given
  type: dict
closure_reasons:
  description: Why each package is in the closure.
  returned: when lists_dir is given
  type: dict
installed:
  description: Installed version of each closure member (absent when not installed).
  returned: when lists_dir is given
  type: dict
moving:
  description: Closure members that are installed at another version than the one to pin.
  returned: when lists_dir is given
  type: list
  elements: str
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp


def main():
    module = AnsibleModule(
        argument_spec={
            "key_file": {"type": "path"},
            "key_fingerprint": {"type": "str", "no_log": False},  # a public key fingerprint, not a secret
            "dearmor_to": {"type": "path"},
            "lists_dir": {"type": "path"},
            "versions": {"type": "dict", "default": {}},
            "follow": {"type": "str", "choices": ["all", "exact"], "default": "all"},
            "status_file": {"type": "path", "default": "/var/lib/dpkg/status"},
            "allow_downgrade": {"type": "bool", "default": False},
            "downgrade_variable": {"type": "str", "default": "pinned_packages_allow_downgrade"},
            "label": {"type": "str", "default": ""},
            "fix": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False}
    label = p["label"] + ": " if p["label"] else ""

    if p["key_file"]:
        with open(p["key_file"], "rb") as handle:
            raw = handle.read()
        try:
            result["fingerprints"] = pp.key_fingerprints(raw)
        except (ValueError, IndexError) as exc:
            module.fail_json(
                msg=f"{label}{p['key_file']} is not an OpenPGP public key ({exc}). Fix: point the key URL at the "
                "repository's public key.",
                **result,
            )
        want = pp.normalize_fingerprint(p["key_fingerprint"])
        if want and want not in result["fingerprints"]["primary"]:
            found = ", ".join(result["fingerprints"]["primary"]) or "none"
            module.fail_json(
                msg=f"{label}the repository key has fingerprint {found}; "
                f"expected {want}. Fix: serve the repository's own key at the key URL, or correct the expected "
                "fingerprint if the vendor rotated its key (check the vendor's published fingerprint).",
                **result,
            )
        if p["dearmor_to"]:
            with open(p["dearmor_to"], "wb") as handle:
                handle.write(pp.dearmor(raw))

    if p["lists_dir"]:
        files = sorted(glob.glob(os.path.join(p["lists_dir"], "*_Packages*")))
        stanzas = []
        for path in files:
            if path.endswith((".gz", ".xz")) or os.path.basename(path).endswith("_Packages"):
                stanzas.extend(pp.parse_stanzas(pp.read_index(path)))
        index = pp.build_index(stanzas)
        installed = {}
        if p["status_file"] and os.path.exists(p["status_file"]):
            installed = pp.installed_versions(pp.parse_stanzas(pp.read_index(p["status_file"])))
        versions = {str(k): str(v) for k, v in p["versions"].items()}
        out = pp.resolve(index, versions, follow=p["follow"], installed=installed)
        result.update({k: out[k] for k in ("resolved", "requested", "closure_reasons")})
        result["installed"] = {n: installed[n] for n in out["resolved"] if n in installed}
        result["moving"] = sorted(n for n, v in out["resolved"].items() if n in installed and installed[n] != v)
        result["index_files"] = [os.path.basename(f) for f in files]
        errors = list(out["errors"])
        if not files:
            errors.insert(0, f"no Packages index in {p['lists_dir']}")
        down = pp.downgrades(out["resolved"], installed)
        if down and not p["allow_downgrade"]:
            errors.append(
                "the set would downgrade "
                + ", ".join(f"{n} {old} -> {new}" for n, (old, new) in sorted(down.items()))
                + f"; set {p['downgrade_variable']}: true to allow it"
            )
        if errors:
            fix = (" Fix: " + p["fix"]) if p["fix"] else ""
            module.fail_json(msg=label + "; ".join(errors) + "." + fix, errors=errors, **result)

    module.exit_json(**result)


if __name__ == "__main__":
    main()
