# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Options of the two halves of the _pinned_packages role, pinned_packages (apt) and pinned_packages_dnf (dnf)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
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
        or V(exact) (only C(= version) ones).
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
      - Package -> exact version that must be installed (and, with O(hold), held); see RV(wrong) and RV(moved).
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
"""
