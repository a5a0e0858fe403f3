# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""GPU facts: the gpu_facts module's backends tried in order, each GPU's NUMA node and CPU list from sysfs, Fabric
Manager and, on request, the topology.

A backend's code is imported only when that backend is tried, and the topology parser only when a matrix is read: a
module run compiles every module it imports from the payload, so a host without a GPU does not pay for parsers it
never calls (docs/performance.md). These imports stay ``from ... import`` statements inside the functions (PLC0415
ignored there), since Ansible puts in the payload the module_utils it finds as import statements.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import (
    FABRIC_ACTIVE_STATES,
    SOURCE_NVIDIA_SMI,
    SOURCE_NVML,
    GpuFactsError,
    aggregate_fabric_state,
    find_nvidia_smi,
    first_backend,
    import_pynvml,
    load_pynvml,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_sysfs import (
    gather_pci,
    parse_fabricmanager_version,
    read_cpu_affinity,
    read_numa_node,
    read_proc_driver,
    scan_pci,
)
from ansible_collections.gpuops.cluster.plugins.module_utils.text import cut, one_line

TOPOLOGY_COMMAND = "nvidia-smi topo -m"


def fabric_manager_facts(gpus: list, nvswitch_count: int, run, which) -> dict:
    """``facts["fabric_manager"]``; its service and version are asked only where it is required, to keep the common
    path to the GPU query alone."""
    states = [gpu["fabric"]["state"] for gpu in gpus]
    required = nvswitch_count > 0 or any(state in FABRIC_ACTIVE_STATES for state in states)
    facts = {
        "required": bool(required),
        "nvswitch_count": nvswitch_count,
        "state": aggregate_fabric_state(states),
        "service_state": None,
        "version": None,
    }
    if not required:
        return facts
    systemctl = which("systemctl")
    if systemctl:
        _rc, out, _err = run([systemctl, "is-active", "nvidia-fabricmanager"])
        facts["service_state"] = (out or "").strip().splitlines()[0] if (out or "").strip() else None
    binary = which("nv-fabricmanager")
    if binary:
        _rc, out, err = run([binary, "--version"])
        facts["version"] = parse_fabricmanager_version(f"{out or ''}\n{err or ''}")
    return facts


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def gather_topology(
    source: str, count: int, run, which, gpus_per_job, warnings: list, notes: list
) -> tuple[dict | None, dict | None]:
    """``nvidia-smi topo -m`` once, parsed by ``topology.parse_topology``: ``(topology, topology_error)``, when and
    as the module's ``topology`` option and return values document; a reason not to read it is a note."""
    if source not in (SOURCE_NVML, SOURCE_NVIDIA_SMI):
        notes.append(f"topology: not read because source is {source}: `{TOPOLOGY_COMMAND}` needs a working driver")
        return None, None
    if count < 1:
        notes.append(f"topology: not read because {source} lists no GPU")
        return None, None
    binary = which("nvidia-smi")
    if not binary:
        notes.append("topology: not read because nvidia-smi is not in PATH (NVML answered without it)")
        return None, None
    rc, out, err = run([binary, "topo", "-m"])
    if rc != 0:
        message = one_line(out or err) or "no output"
        warnings.append(
            f"`{TOPOLOGY_COMMAND}` exited {rc}: {message}. Expected the topology matrix of {_gpus(count)}; "
            f"topology is null, check that `{TOPOLOGY_COMMAND}` works on this host"
        )
        notes.append(f"topology: not read because `{TOPOLOGY_COMMAND}` exited {rc}")
        return None, {"command": TOPOLOGY_COMMAND, "error": f"exited {rc}: {message}"}
    from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology  # noqa: PLC0415 (module doc)

    topology = parse_topology(out, gpus_per_job)
    if not topology["gpus"]:
        warnings.append(
            f"{topology['warnings'][0]}. Expected the output of `{TOPOLOGY_COMMAND}` for {_gpus(count)}; "
            f"topology is null, report this output so the parser can follow. Raw output:\n{cut(out or '')}"
        )
        notes.append(f"topology: not read because `{TOPOLOGY_COMMAND}` printed no matrix")
        return None, {"command": TOPOLOGY_COMMAND, "error": topology["warnings"][0]}
    if len(topology["gpus"]) != count:
        notes.append(f"topology: the matrix shows {len(topology['gpus'])} GPUs, {source} lists {count}")
    warnings.extend(f"topology: {warning}" for warning in topology["warnings"])
    return topology, None


def _gather_nvml(nvml_loader, warnings: list) -> dict:
    """The NVML backend, its code imported only once pynvml is (the module doc)."""
    nvml = load_pynvml(nvml_loader)
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_nvml import gather_nvml  # noqa: PLC0415

    return gather_nvml(nvml, warnings)


def _gather_nvidia_smi(run, which, notes: list) -> dict:
    """The nvidia-smi backend, its parsers imported only once the binary is found (the module doc)."""
    binary = find_nvidia_smi(which)
    from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_smi import gather_nvidia_smi  # noqa: PLC0415

    return gather_nvidia_smi(binary, run, notes)


def gather_gpu_facts(
    run,
    which,
    backend: str = "auto",
    nvml_loader=None,
    sysfs_root: str = "/sys",
    proc_root: str = "/proc",
    *,
    topology: bool = False,
    gpus_per_job: int | None = None,
) -> tuple:
    """All GPU facts in one pass, as the module's options and return values document: ``(facts, warnings)``."""
    if gpus_per_job is not None and gpus_per_job < 1:
        raise GpuFactsError(
            f"gpus_per_job is {gpus_per_job}: expected a number of GPUs greater than 0; "
            "set it to how many GPUs one job uses (e.g. 4), or leave it unset"
        )
    nvml_loader = nvml_loader or import_pynvml
    warnings: list = []
    notes: list = []
    pci = scan_pci(sysfs_root)
    proc = read_proc_driver(proc_root)
    attempts = {
        SOURCE_NVML: lambda: _gather_nvml(nvml_loader, warnings),
        SOURCE_NVIDIA_SMI: lambda: _gather_nvidia_smi(run, which, notes),
    }
    answered = first_backend(backend, attempts, notes)
    result = answered[1] if answered else gather_pci(pci, proc)
    gpus = result["gpus"]
    for gpu in gpus:
        gpu["numa_node"] = read_numa_node(sysfs_root, gpu["pci_bus_id"])
        gpu["cpu_affinity"] = read_cpu_affinity(sysfs_root, gpu["pci_bus_id"])
    if result["source"] in (SOURCE_NVML, SOURCE_NVIDIA_SMI) and len(pci["gpus"]) > len(gpus):
        notes.append(
            f"{result['source']} lists {len(gpus)} GPUs but the PCI bus shows {len(pci['gpus'])} NVIDIA "
            "display/3D controllers (excluded, unbound or hidden from this namespace?)"
        )
    facts = {
        "present": bool(gpus),
        "count": len(gpus),
        "source": result["source"],
        "driver_version": result["driver_version"],
        "cuda_driver_version": result["cuda_driver_version"],
        "driver_loaded": bool(result["source"] in (SOURCE_NVML, SOURCE_NVIDIA_SMI) or proc["loaded"]),
        "gpus": gpus,
        "fabric_manager": fabric_manager_facts(gpus, len(pci["nvswitches"]), run, which),
        "topology": None,
        "topology_error": None,
        "notes": notes,
    }
    if topology:
        facts["topology"], facts["topology_error"] = gather_topology(
            result["source"], len(gpus), run, which, gpus_per_job, warnings, notes
        )
    return facts, warnings
