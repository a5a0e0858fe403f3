# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The MPS memory rule, one copy for both platforms: a cap must leave its client memory after the CUDA context.

An MPS client's pinned device memory limit (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) bounds everything the client
pins on the GPU, its own CUDA context included. On a real H200 with driver 580
(``../shared/data/nvidia-smi/h200-driver580/mps-pinned-mem-limit.txt``) a client under a 1G, 2G and 8G cap
allocated 576 MiB less than the cap each time. So what a member can allocate is its cap minus
``gpuops_mps_context_reserve``, and a cap whose remainder is below ``gpuops_mps_min_usable`` is refused:
``cap_problem`` is that rule. It judges

* a compose member's ``shared_gpus`` cap (``team.gpu_assignment_problems``, part of the team check); the compose
  MPS daemon's default cap is the smallest of its GPU's caps, so it passes when they do;
* a Kubernetes MPS replica's share, the GPU's memory / ``mps_replicas``, which is also the MPS control daemon's
  default limit there (``gpu_sharing``: preflight's plan and gpu_operator's assert); a pool's
  ``mps_memory_per_replica_mib``, when larger, is that pool's own floor.

Both settings are inventory variables in MiB, described in ``roles/_gpuops_vars/meta/argument_specs.yml``; their
defaults have one home, that role's ``defaults/main.yml``, which ``limits`` reads when a caller passes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import role_defaults

RESERVE_VAR = "gpuops_mps_context_reserve"
MIN_USABLE_VAR = "gpuops_mps_min_usable"
VARIABLES = (RESERVE_VAR, MIN_USABLE_VAR)


@dataclass(frozen=True)
class Limits:
    """The reserve each cap loses to the client's CUDA context, and the least a client must be left (MiB)."""

    reserve_mib: int
    min_usable_mib: int


def _mib(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} is {value!r}; expected MiB as a whole number >= 0, unquoted. Fix: e.g. {name}: "
                         f"{role_defaults()[name]}, or leave it out for the default")
    return value


def limits(reserve_mib: Any = None, min_usable_mib: Any = None) -> Limits:
    """The rule's settings: the inventory's values when given (not None), else the _gpuops_vars role's defaults."""
    defaults = role_defaults()
    reserve = defaults[RESERVE_VAR] if reserve_mib is None else reserve_mib
    usable = defaults[MIN_USABLE_VAR] if min_usable_mib is None else min_usable_mib
    return Limits(_mib(RESERVE_VAR, reserve), _mib(MIN_USABLE_VAR, usable))


def cap_problem(subject: str, cap_mib: int, rule: Limits, fix: str, need_mib: int | None = None,
                need_from: str = "") -> str | None:
    """None when a cap of ``cap_mib`` leaves its client at least the least usable memory; else the refusal.

    ``subject`` names the member (or the pool's replica) and the GPU, and what sets the cap; ``fix`` is what to
    change. ``need_mib`` (named by ``need_from``) raises the floor above ``gpuops_mps_min_usable`` for one caller.
    """
    floor, source = rule.min_usable_mib, MIN_USABLE_VAR
    if need_mib is not None and need_mib > floor:
        floor, source = need_mib, need_from
    left = cap_mib - rule.reserve_mib
    if left >= floor:
        return None
    leaves = f"{left} MiB" if left > 0 else "nothing"
    return (f"{subject} is {cap_mib} MiB, but the client's CUDA context takes {rule.reserve_mib} MiB of every MPS "
            f"cap ({RESERVE_VAR}), which leaves {leaves} to allocate; expected at least {floor} MiB left ({source}), "
            f"a cap of {rule.reserve_mib + floor} MiB or more; fix: {fix}")
