# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Attributes of the modules that only read the host and report: check mode, diff and idempotence."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Only reads; gives the same answer in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is nothing to diff.
  idempotent:
    support: full
    description: Never changes the host; RV(ignore:changed) is always false.
"""
