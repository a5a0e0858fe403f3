"""Preflight: judge a host's plan against its facts, before anything on the host changes.

Pure functions only. ``evaluate()`` takes what gpu_facts / gpu_topology / setup found and
what the inventory asks for, and returns one check per rule, each with the fact found,
what was expected and the fix, plus the platform decision. The preflight role runs it
on the controller and refuses the whole play when any check fails.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.cuda_compat import check_compat
from ansible_collections.gpuops.cluster.plugins.module_utils.platform import choose_platform_with_reason
from ansible_collections.gpuops.cluster.plugins.module_utils.versions import (
    parse_driver_version,
    version_eq,
)

# distribution (as ansible_facts['distribution']) -> accepted versions; a version matches
# when the host's version equals it or starts with it followed by a dot (12 matches 12.7).
SUPPORTED_OS: dict[str, list[str]] = {
    "Debian": ["12", "13"],
    "Ubuntu": ["22.04", "24.04"],
    "RedHat": ["9"],
    "Rocky": ["9"],
}
WORKLOADS = ("training", "inference", "mixed")
MIN_TIME_SLICING_REPLICAS = 2


def _check(name: str, ok: bool | None, msg: str) -> dict[str, Any]:
    """ok: True passed, False failed, None not applicable (skipped, with the reason in msg)."""
    return {"name": name, "ok": ok, "status": {True: "ok", False: "failed", None: "skipped"}[ok], "msg": msg}


def os_supported(distribution: str, version: str, supported: dict[str, list[str]]) -> dict[str, Any]:
    wanted = supported.get(distribution or "", [])
    version = str(version or "")
    if any(version == v or version.startswith(v + ".") for v in wanted):
        return _check("os_supported", True, f"{distribution} {version} is supported")
    listing = "; ".join(f"{d} {'/'.join(v)}" for d, v in supported.items())
    return _check(
        "os_supported",
        False,
        f"{distribution or 'unknown OS'} {version} found; supported: {listing}. "
        "Fix: reinstall the host with a supported OS, or remove it from gpu_nodes.",
    )


def driver_cuda(driver: str, cuda: str, gpu_name: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    if not driver:
        return _check("driver_cuda_compat", None, "no driver pin (nvidia_driver_version): nothing to compare"), None
    try:
        parse_driver_version(driver, "nvidia_driver_version")
    except ValueError as exc:
        return _check("driver_cuda_compat", False, str(exc)), None
    if not cuda:
        msg = f"driver {driver} pinned; no CUDA version requested (gpuops_cuda_version)"
        return _check("driver_cuda_compat", None, msg), None
    try:
        result = check_compat(driver, cuda, gpu_name)
    except ValueError as exc:
        return _check("driver_cuda_compat", False, str(exc)), None
    detail = "; ".join(result["reasons"])
    if result["compatible"]:
        return _check("driver_cuda_compat", True, f"CUDA {cuda} on driver {driver}: {result['mode']}. {detail}"), result
    return (
        _check(
            "driver_cuda_compat",
            False,
            f"CUDA {cuda} cannot run on the pinned driver {driver} (needs >= {result['min_driver']}; "
            f"this driver runs CUDA <= {result['max_cuda']} natively). {detail}",
        ),
        result,
    )


def fabric_manager(gpu: dict[str, Any], driver: str) -> dict[str, Any]:
    fm = gpu.get("fabric_manager") or {}
    if not fm.get("required"):
        return _check("fabric_manager", None, "no NVSwitch found: Fabric Manager is not needed")
    installed = fm.get("version")
    if not driver:
        return _check("fabric_manager", None, "NVSwitch host, but no driver pin to compare Fabric Manager with")
    if not installed:
        return _check(
            "fabric_manager", True, f"NVSwitch host: Fabric Manager will be installed at exactly {driver} (driver pin)"
        )
    try:
        same = version_eq(parse_driver_version(installed, "fabric_manager_version"), parse_driver_version(driver))
    except ValueError as exc:
        msg = f"cannot compare Fabric Manager {installed!r} with driver {driver!r}: {exc}"
        return _check("fabric_manager", False, msg)
    if same:
        return _check("fabric_manager", True, f"Fabric Manager {installed} equals the driver pin {driver}")
    return _check(
        "fabric_manager",
        False,
        f"Fabric Manager {installed} is installed but the driver pin is {driver}; they must match exactly, or "
        "the fabric never initialises (CUDA error 802, 'system not yet initialized'). Fix: let nvidia_driver "
        f"install nvidia-fabricmanager at {driver}, or pin the driver to {installed}.",
    )


def _nvlink_present(gpu: dict[str, Any], topology: dict[str, Any] | None, assume: bool) -> tuple[bool, str]:
    if assume:
        return True, "the inventory says this node has NVLink (preflight_assume_nvlink)"
    linked = [g.get("index") for g in gpu.get("gpus") or [] if (g.get("nvlink") or 0) > 0]
    if linked:
        return True, f"GPUs {linked} report active NVLink links"
    domains = (topology or {}).get("nvlink_domains") or []
    big = [d for d in domains if len(d) > 1]
    if big:
        return True, f"nvidia-smi topo shows NVLink domains {big}"
    return False, "no active NVLink found"


def mig(plan: dict[str, Any], gpu: dict[str, Any], topology: dict[str, Any] | None) -> dict[str, Any]:
    workload = plan.get("workload") or "training"
    requested = bool(plan.get("mig_requested"))
    enabled = [g.get("index") for g in gpu.get("gpus") or [] if str(g.get("mig_mode") or "").lower() == "enabled"]
    if not requested and not enabled:
        return _check("mig", True, "MIG is neither requested nor enabled")
    nvlink, why = _nvlink_present(gpu, topology, bool(plan.get("assume_nvlink")))
    multi_node = bool(plan.get("multi_node_training"))
    training = workload in ("training", "mixed")
    if training and (nvlink or multi_node):
        serves = why if nvlink else "the team runs multi-node training (gpuops_multi_node_training)"
        found = "MIG is requested (preflight_mig_requested)" if requested else f"MIG is enabled on GPUs {enabled}"
        return _check(
            "mig",
            False,
            f"{found} on a {workload} node, and {serves}. MIG disables NVLink and GPU peer-to-peer, so training "
            "there would silently fall back to PCIe. Fix: keep whole GPUs on this node (disable MIG: "
            "nvidia-smi -mig 0), or mark it an inference node (preflight_workload: inference).",
        )
    where = "requested" if requested else f"enabled on GPUs {enabled}"
    return _check("mig", True, f"MIG {where} on a {workload} node: allowed ({why}; no multi-node training)")


def gpu_assignment(assignments: list[dict[str, Any]] | None, gpu_count: int) -> dict[str, Any]:
    if not assignments:
        return _check("gpu_assignment", None, "no per-member GPU assignments to check")
    owner: dict[int, str] = {}
    problems = []
    for entry in assignments:
        name = str(entry.get("name", "?"))
        for index in entry.get("gpus") or []:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                problems.append(f"{name} lists GPU {index!r}, expected a GPU index (a whole number >= 0)")
                continue
            if index in owner:
                problems.append(f"GPU {index} is assigned twice: to {owner[index]} and to {name}")
            else:
                owner[index] = name
            if gpu_count and index >= gpu_count:
                problems.append(f"{name} lists GPU {index} but this host has {gpu_count} GPUs (0-{gpu_count - 1})")
    if problems:
        return _check(
            "gpu_assignment",
            False,
            "; ".join(problems) + ". Fix: give every member its own GPUs (gpuops_members[].gpus).",
        )
    return _check("gpu_assignment", True, f"{len(owner)} GPUs assigned, each to exactly one member")


def time_slicing(replicas: Any) -> dict[str, Any]:
    if replicas is None:
        return _check("time_slicing", None, "time-slicing not configured")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < MIN_TIME_SLICING_REPLICAS:
        return _check(
            "time_slicing",
            False,
            f"time-slicing replicas is {replicas!r}; expected a whole number >= {MIN_TIME_SLICING_REPLICAS} "
            "(1 would advertise each GPU once, i.e. no sharing). Fix: set replicas to 2 or more, or turn "
            "time-slicing off.",
        )
    return _check("time_slicing", True, f"each GPU is advertised {replicas} times")


def decide_platform(plan: dict[str, Any], gpu_count: int) -> dict[str, Any]:
    wanted = plan.get("platform") or "auto"
    if wanted != "auto":
        return {"platform": wanted, "source": "override", "reason": f"gpuops_platform is set to {wanted}"}
    team = plan.get("team_size")
    gpus = plan.get("gpu_count") if plan.get("gpu_count") is not None else gpu_count
    multi = bool(plan.get("multi_node_training"))
    platform, reason = choose_platform_with_reason(team, gpus, multi)
    return {"platform": platform, "source": "auto", "reason": reason}


def evaluate(plan: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """Every preflight rule over one host. ``facts``: os {distribution, version}, gpu, topology."""
    gpu = facts.get("gpu") or {}
    topology = facts.get("topology")
    os_facts = facts.get("os") or {}
    driver = str(plan.get("driver_version") or "").strip()
    cuda = str(plan.get("cuda_version") or "").strip()
    first_name = next((g.get("name") for g in gpu.get("gpus") or [] if g.get("name")), None)
    gpu_name = plan.get("gpu_name") or first_name

    supported = plan.get("supported_os") or SUPPORTED_OS
    checks = [os_supported(os_facts.get("distribution", ""), os_facts.get("version", ""), supported)]
    compat_check, compat = driver_cuda(driver, cuda, gpu_name)
    checks.append(compat_check)
    checks.append(fabric_manager(gpu, driver))
    checks.append(mig(plan, gpu, topology))
    checks.append(gpu_assignment(plan.get("gpu_assignments"), int(gpu.get("count") or 0)))
    checks.append(time_slicing(plan.get("time_slicing_replicas")))
    try:
        decision = decide_platform(plan, int(gpu.get("count") or 0))
        checks.append(_check("platform", True, decision["reason"]))
    except (TypeError, ValueError) as exc:
        decision = {"platform": None, "source": "error", "reason": str(exc)}
        checks.append(_check("platform", False, f"cannot decide the platform: {exc}"))
    failed = [c for c in checks if c["ok"] is False]
    return {
        "ok": not failed,
        "checks": checks,
        "failed_checks": [c["name"] for c in failed],
        "platform": decision,
        "compat": compat,
        "driver_pin": driver or None,
    }
