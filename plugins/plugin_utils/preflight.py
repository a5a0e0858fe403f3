"""Preflight: judge a host's plan against its facts, before anything on the host changes.

Pure functions, but for the OS rule, which reads each role's table (``os_support``). ``host_checks()`` returns one
check per rule, each with the fact found, what was expected and the fix (status ``warn``: a rule the inventory
turned into a warning); the rules judged on the plan follow once the fleet has one. Run on the controller by the
actions ``preflight`` (per host) and ``preflight_fleet`` (once per run: the fleet's platform, ``finish``).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.gpuops.cluster.plugins.module_utils.cuda_compat import check_compat
from ansible_collections.gpuops.cluster.plugins.module_utils.versions import (
    parse_driver_version,
    version_eq,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils import os_support
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import decide_fleet
from ansible_collections.gpuops.cluster.plugins.plugin_utils.team import host_gpu_problems, out_of_service_problems

NFS_PORT = 2049
# server:/export, the form compose_stack's inputs accept: a host name or IPv4 address, or an IPv6 one in brackets
NFS_SOURCE = re.compile(r"^(?:(?P<name>[A-Za-z0-9.-]+)|\[(?P<v6>[0-9A-Fa-f:.]+)\]):(?P<path>/\S*)$")
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def _check(name: str, ok: bool | None, msg: str) -> dict[str, Any]:
    """ok: True passed, False failed, None not applicable (skipped, with the reason in msg)."""
    return {"name": name, "ok": ok, "status": {True: "ok", False: "failed", None: "skipped"}[ok], "msg": msg}


def os_supported(os_facts: dict[str, Any], platform: str | None) -> dict[str, Any]:
    """The host's OS against the table of every role it will run (os_support.host_roles: the host layer's, then the
    platform's), refused in the inputs pass's words (os_support.refusal)."""
    distribution = str(os_facts.get("distribution") or "")
    version = str(os_facts.get("version") or "")
    roles = os_support.host_roles(platform)
    refused = os_support.refusal(roles, distribution, version)
    if refused:
        return _check("os_supported", False, refused)
    runs = ", ".join(roles) + (f" on {platform}" if platform else "; the platform's roles once it is decided")
    return _check("os_supported", True, f"{distribution} {version} is supported by every role this host runs ({runs})")


def driver_cuda(judged: dict | None, cuda: str, gpu_name: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """CUDA ``cuda`` on the driver host_checks chose (``judged``): pin (nvidia_driver_version) or running."""
    if not judged:
        msg = "no driver pin (nvidia_driver_version) and no running driver found: nothing to compare"
        return _check("driver_cuda_compat", None, msg), None
    driver, source = judged["version"], judged["source"]
    what = "pinned" if source == "pin" else "running"
    try:
        parse_driver_version(driver, "nvidia_driver_version" if source == "pin" else "the running driver")
    except ValueError as exc:
        return _check("driver_cuda_compat", False, str(exc)), None
    if not cuda:
        msg = f"driver {driver} {what}; no CUDA version requested (gpuops_cuda_version)"
        return _check("driver_cuda_compat", None, msg), None
    try:
        result = check_compat(driver, cuda, gpu_name)
    except ValueError as exc:
        return _check("driver_cuda_compat", False, str(exc)), None
    detail = "; ".join(result["reasons"])
    whence = "" if source == "pin" else " (no driver pin, nvidia_driver_version: judged against the running driver)"
    if result["compatible"]:
        msg = f"CUDA {cuda} on the {what} driver {driver}{whence}: {result['mode']}. {detail}"
        return _check("driver_cuda_compat", True, msg), result
    return (
        _check(
            "driver_cuda_compat",
            False,
            f"CUDA {cuda} cannot run on the {what} driver {driver}{whence} (needs >= {result['min_driver']}; "
            f"this driver runs CUDA <= {result['max_cuda']} natively). {detail}",
        ),
        result,
    )


def topology_readable(host: str, gpu: dict[str, Any], declared: Any = None, required: bool = True) -> dict[str, Any]:
    """A host whose GPUs are seen has a topology: read by gpu_facts (``gpu.topology``), or declared by the inventory
    (gpuops_gpu_topology, which the plan then uses). One that gpu_facts could not read (``gpu.topology_error``:
    {command, error}) is refused, or only warned about with preflight_topology_required: false."""
    count = int(gpu.get("count") or 0)
    if count < 1:
        return _check("topology", None, "no GPUs seen: no topology to read")
    topology = gpu.get("topology")
    error = gpu.get("topology_error")
    if isinstance(topology, dict) and topology.get("gpus"):
        return _check("topology", True, f"topology read: {len(topology['gpus'])} of {count} GPUs in the matrix")
    if isinstance(declared, dict) and declared:
        why = f"; gpu_facts could not read it ({error.get('command')}: {error.get('error')})" if error else ""
        msg = f"topology declared by the inventory (gpuops_gpu_topology), which the plan uses{why}"
        return _check("topology", True, msg)
    if not isinstance(error, dict):
        notes = "; ".join(str(n) for n in gpu.get("notes") or [] if str(n).startswith("topology"))
        return _check("topology", None, f"topology not read, and not expected yet ({notes or 'not requested'})")
    command = error.get("command") or "nvidia-smi topo -m"
    found = f"{host}: {count} GPU(s) seen, but their topology could not be read from `{command}`: {error.get('error')}"
    if not required:  # a refusal the inventory turned into a warning: passes, and says so on the summary line
        msg = f"{found}. The run goes on without CPU or NUMA affinity for them (preflight_topology_required: false)."
        return {**_check("topology", True, msg), "status": "warn"}
    return _check(
        "topology",
        False,
        f"{found}. Without it no GPU gets a cpuset or NUMA node, and the roles that place work on GPUs cannot. "
        f"Fix: make `{command}` work on {host} (driver loaded, nvidia-smi matching it), or declare the topology "
        "in the inventory (gpuops_gpu_topology), or set preflight_topology_required: false to go on with a warning.",
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


def _nvlink_present(gpu: dict[str, Any], topology: dict[str, Any] | None) -> tuple[bool, str]:
    linked = [g.get("index") for g in gpu.get("gpus") or [] if (g.get("nvlink") or 0) > 0]
    if linked:
        return True, f"GPUs {linked} report active NVLink links"
    domains = (topology or {}).get("nvlink_domains") or []
    big = [d for d in domains if len(d) > 1]
    if big:
        return True, f"nvidia-smi topo shows NVLink domains {big}"
    return False, "no active NVLink found"


def mig(plan: dict[str, Any], gpu: dict[str, Any], topology: dict[str, Any] | None) -> dict[str, Any]:
    """MIG the GPUs already have on (gpu facts): planning MIG is a Kubernetes pool's mig_profile, judged there."""
    enabled = [g.get("index") for g in gpu.get("gpus") or [] if str(g.get("mig_mode") or "").lower() == "enabled"]
    if not enabled:
        return _check("mig", True, "MIG is not enabled")
    nvlink, why = _nvlink_present(gpu, topology)
    if nvlink or plan.get("multi_node_training"):
        serves = why if nvlink else "the team runs multi-node training (gpuops_multi_node_training)"
        return _check(
            "mig",
            False,
            f"MIG is enabled on GPUs {enabled}, and {serves}. MIG disables NVLink and GPU peer-to-peer, so training "
            "there would silently fall back to PCIe. Fix: keep whole GPUs on this node (disable MIG: "
            "nvidia-smi -mig 0); MIG partitions are a Kubernetes pool's mig_profile, on nodes without NVLink "
            "and not for multi-node training.",
        )
    return _check("mig", True, f"MIG enabled on GPUs {enabled}: allowed ({why}; no multi-node training)")


def gpu_assignment(assignments: list[dict[str, Any]] | None, gpu_count: int) -> dict[str, Any]:
    """The part of the team's GPU-assignment rule that depends on this host (``team.host_gpu_problems``): every GPU
    a member is given or shares is one of its ``gpu_count`` GPUs. The rest of the rule (a GPU given twice, shared
    and exclusive, the MPS caps) runs once on the whole team, in the gpuops_* check (role _gpuops_vars)."""
    if not assignments:
        return _check("gpu_assignment", None, "no per-member GPU assignments to check")
    problems = host_gpu_problems(assignments, range(gpu_count))
    if problems:
        return _check("gpu_assignment", False, "; ".join(problems) + ".")
    seen = f"one of this host's {gpu_count}" if gpu_count else "not checked: no GPU seen on this host"
    return _check("gpu_assignment", True, f"every GPU given to a member: {seen}")


def parse_size(value: Any, name: str = "min_free") -> int:
    """Bytes from an int or a size such as 10G, 10GiB, 500M (binary units)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} is {value!r}; expected a size such as 10G or 500MiB")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{name} is {value!r}; expected a size such as 10G or 500MiB")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:  # noqa: PLR2004 -- the next binary unit
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def free_space(wanted: list[dict[str, Any]] | None, measured: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Each planned path has at least its min_free on the filesystem that holds (or will hold) it."""
    if not wanted:
        return _check("free_space", None, "no data paths to check (preflight_free_space)")
    by_path = {m.get("path"): m for m in measured or []}
    problems, fine = [], []
    for item in wanted:
        path = str(item.get("path"))
        try:
            need = parse_size(item.get("min_free", 0), f"preflight_free_space[{path}].min_free")
        except ValueError as exc:
            problems.append(str(exc))
            continue
        got = by_path.get(path) or {}
        why = f" for {item['why']}" if item.get("why") else ""
        where = got.get("measured_at") or path
        if got.get("free_bytes") is None:
            problems.append(f"{path}: free space unknown ({got.get('error') or 'not measured'})")
        elif got["free_bytes"] < need:
            problems.append(
                f"{path} (filesystem of {where}) has {human(got['free_bytes'])} free; {human(need)} is needed{why}. "
                f"Fix: free or grow that volume (at least {human(need - got['free_bytes'])} more), "
                "or point the data at a larger one"
            )
        else:
            fine.append(f"{path} {human(got['free_bytes'])} free (>= {human(need)})")
    if problems:
        return _check("free_space", False, "; ".join(problems) + ".")
    return _check("free_space", True, "; ".join(fine))


def nfs_source(src: object) -> dict[str, str] | None:
    """The one reading of an NFS ``src`` (preflight's probe, the plan's nfs_servers, grow's PVs): ``server:/export``
    or ``[IPv6 address]:/export`` as {server (no brackets), path (no trailing /)}; None for anything else."""
    match = NFS_SOURCE.match(src) if isinstance(src, str) else None
    if not match:
        return None
    return {"server": match.group("name") or match.group("v6"), "path": match.group("path").rstrip("/") or "/"}


def nfs_targets(datasets: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The NFS servers the datasets mount, as {dataset, host, port} (port= from opts, else 2049)."""
    targets = []
    for item in [d for d in datasets if isinstance(d, dict)] if isinstance(datasets, list) else []:
        source = nfs_source(item.get("src"))
        if not str(item.get("fstype") or "nfs4").startswith("nfs") or source is None:
            continue
        opts = dict(o.split("=", 1) for o in str(item.get("opts") or "").split(",") if "=" in o)
        port = int(opts["port"]) if str(opts.get("port", "")).isdigit() and int(opts["port"]) > 0 else NFS_PORT
        targets.append({"dataset": item.get("name"), "host": source["server"], "port": port})
    return targets


def nfs_reachable(targets: list[dict[str, Any]], probes: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Every NFS server answered one bounded TCP connect, so no hard mount can hang the run."""
    if not targets:
        return _check("nfs_servers", None, "no NFS datasets")
    answers = {(p.get("host"), p.get("port")): p for p in probes or []}
    problems, fine = [], []
    for target in targets:
        probe = answers.get((target["host"], target["port"])) or {}
        name = f"dataset {target['dataset']} ({target['host']}:{target['port']})"
        if probe.get("reachable"):
            fine.append(f"{name} answered in {probe.get('seconds', 0):g} s")
        else:
            problems.append(f"{name}: {probe.get('error') or 'not probed'}")
    if problems:
        return _check(
            "nfs_servers",
            False,
            "NFS server unreachable: "
            + "; ".join(problems)
            + ". Nothing was mounted or created. Fix: start the NFS server or open that TCP port to it from the "
            "node, correct the dataset's src (server:/export), or remove the dataset (compose_stack_datasets).",
        )
    return _check("nfs_servers", True, "; ".join(fine))


# The rules judged on the plan, once the fleet has one (action preflight_fleet): each is None where it does not apply.
def gpu_health_assignment(assignments: list | None, out_of_service: dict, host: str) -> dict[str, Any] | None:
    """No member is given a GPU that health.yml took out of service (the plan's ``hosts.<name>.out_of_service``)."""
    if not out_of_service:
        return None
    problems = out_of_service_problems(assignments or [], out_of_service, host)
    if problems:
        return _check("gpu_health_assignment", False, "; ".join(problems) + ".")
    gpus = ", ".join(sorted(out_of_service, key=int))
    return _check("gpu_health_assignment", True, f"GPU(s) {gpus} out of service; no member is given one")


def gpu_sharing(sharing: dict | None, host: str) -> dict[str, Any] | None:
    """The host is in a pool whose sharing the plan refuses (gpu_sharing.plan_part: strategy null, the refusals as its
    reason): gpu_operator's assert would refuse the pool a stage later, so preflight refuses its nodes first, with
    the same words."""
    refused = [f"pool {name}: {entry['reason']}" for name, entry in sorted((sharing or {}).items())
               if host in (entry.get("nodes") or []) and entry.get("strategy") is None
               and str(entry.get("reason") or "").startswith("refused")]
    return _check("gpu_sharing", False, "; ".join(refused)) if refused else None


def workspace_sizing(workspaces: dict | None) -> dict[str, Any] | None:
    """The plan's member limits overcommit the host's memory or CPUs (workspaces.host_pools, the plan's sizing
    problems): compose_stack deploys these limits, so preflight refuses them before any change."""
    problems = ((workspaces or {}).get("sizing") or {}).get("problems") or []
    return _check("workspace_sizing", False, "; ".join(problems) + ". Nothing was changed") if problems else None


def host_checks(plan: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """Every per-host rule (all but the platform, which is the fleet's). ``facts``: os, gpu (its topology), host, and
    name (the inventory name) and declared_topology (gpuops_gpu_topology) where known. The OS is judged against the
    host layer's roles here; ``finish`` judges it again with the platform's once the fleet has one."""
    gpu = facts.get("gpu") or {}
    os_facts = facts.get("os") or {}
    host = facts.get("host") or {}
    driver = str(plan.get("driver_version") or "").strip()
    cuda = str(plan.get("cuda_version") or "").strip()
    gpu_name = next((g.get("name") for g in gpu.get("gpus") or [] if g.get("name")), None)
    # The driver CUDA is judged against: the pin where set, else the one running on the host; None with neither.
    running = str(gpu.get("driver_version") or "").strip()
    judged = ({"version": driver, "source": "pin"} if driver
              else {"version": running, "source": "running"} if running else None)
    compat_check, compat = driver_cuda(judged, cuda, gpu_name)
    checks = [
        os_supported(os_facts, None),
        compat_check,
        fabric_manager(gpu, driver),
        topology_readable(str(facts.get("name") or "this host"), gpu, facts.get("declared_topology"),
                          bool(plan.get("topology_required", True))),
        mig(plan, gpu, gpu.get("topology")),
        gpu_assignment(plan.get("gpu_assignments"), int(gpu.get("count") or 0)),
    ]
    if "free_space" in plan:
        checks.append(free_space(plan.get("free_space"), host.get("free_space")))
    if "nfs_datasets" in plan:
        checks.append(nfs_reachable(nfs_targets(plan.get("nfs_datasets")), host.get("tcp_probes")))
    return {
        "checks": checks,
        "compat": compat,
        "driver_pin": driver or None,
        "driver_judged": judged,
        "os": {"distribution": os_facts.get("distribution"), "version": os_facts.get("version")},
    }


def finish(result: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any]:
    """Add the fleet's platform decision for this host to its checks, and the verdict. Where the result holds the
    host's OS (``os``, from host_checks), the OS is judged again against the decided platform's roles too."""
    checks = [c for c in result["checks"] if c["name"] != "platform"]
    if result.get("os") and decision.get("ok", True) and decision.get("platform"):
        judged = os_supported(result["os"], decision["platform"])
        checks = [judged if c["name"] == "os_supported" else c for c in checks]
    checks.append(_check("platform", decision.get("ok", True), decision["reason"]))
    failed = [c for c in checks if c["ok"] is False]
    platform = {k: decision.get(k) for k in ("platform", "source", "reason")}
    return {
        **result,
        "ok": not failed,
        "checks": checks,
        "failed_checks": [c["name"] for c in failed],
        "warned_checks": [c["name"] for c in checks if c["status"] == "warn"],
        "platform": platform,
    }


def evaluate(plan: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """Every preflight rule over one host, judged as a fleet of one (its GPUs are the fleet's)."""
    gpu = facts.get("gpu") or {}
    fleet = decide_fleet({"host": plan}, {"host": int(gpu.get("count") or 0)})
    return finish(host_checks(plan, facts), fleet["hosts"]["host"])


# The per-host action's arguments (plugins/action/preflight.py; documented in plugins/modules/preflight.py).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "driver_version": {"type": "str", "default": ""},
    "cuda_version": {"type": "str", "default": ""},
    "multi_node_training": {"type": "bool", "default": False},
    "gpu_assignments": {"type": "list", "elements": "dict", "default": []},
    "platform": {"type": "str", "choices": ["auto", "compose", "kubernetes"], "default": "auto"},
    "team_size": {"type": "int"},
    "gpu_count": {"type": "int"},
    "topology": {"type": "bool", "default": True},
    "topology_required": {"type": "bool", "default": True},
    "free_space": {"type": "list", "elements": "dict", "default": []},
    "nfs_datasets": {"type": "list", "elements": "dict", "default": []},
    "probe_timeout": {"type": "float", "default": 3.0},
}
