"""validate.yml's judgements: pure functions over recorded command output, one result row per step.

A row is {"step": name, "status": "ok" | "failed" | "skipped", "detail": text}. A host without GPUs gets
every GPU step as "skipped: no GPU", never ok. A container step that failed says why, with the fix
(``container_failure``): Docker not installed, its daemon not running, the NVIDIA runtime not configured, or the
image not on the host with its registry out of reach.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.plugin_utils.diagnose import (
    allocatable,
    docker_runtime,
    parse_json,
    ran,
    workspace_gpus,
)
from ansible_collections.gpuops.cluster.plugins.plugin_utils.images import split_reference

NO_GPU = "skipped: no GPU"
# Unidirectional GB/s per NVLink (NVLink 3 on A100 and NVLink 4 on H100 both give 25 GB/s per link per
# direction: A100 12 links = 300 GB/s, H100 18 links = 450 GB/s) and per x16 PCIe link by generation.
NVLINK_GBPS_PER_LINK = 25.0
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
# all_reduce_perf's busbw reaches about 75-90% of the NVLink figure on a healthy box, and far less of the
# PCIe figure (host bridges, no P2P across sockets): below these shares the step fails.
NVLINK_FLOOR = 0.6
PCIE_FLOOR = 0.3

COMPOSE_STEPS = ("CUDA container runs nvidia-smi", "CUDA kernel launch (vectorAdd)", "NCCL all_reduce_perf",
                 "workspaces see exactly their GPUs")
KUBERNETES_STEPS = ("nodes Ready", "allocatable nvidia.com/gpu", "GPU Operator pods healthy",
                    "GPU pod runs nvidia-smi")


# Why a container step failed. Each is read from what the host printed: the probe
# (no docker command: exit 127; else `docker info --format '{{json .}}'`; validate.yml) and the failed `docker run`.
DOCKER_MISSING = "Docker not installed"
DOCKER_DOWN = "Docker daemon not running"
NO_NVIDIA_RUNTIME = "NVIDIA runtime not configured"
IMAGE_UNREACHABLE = "image not present and registry not reachable"
_NOT_FOUND = 127  # the probe's exit status when there is no docker on PATH
# The setting that names each container step's image (roles/validate), for the fix.
IMAGE_VARS = {"cuda_smi": "validate_cuda_image", "cuda_check": "validate_cuda_check_image",
              "nccl": "validate_nccl_build_image"}
_MISSING_IMAGE = re.compile(r"Unable to find image '([^']+)' locally")
# What dockerd's pull says when it cannot reach the registry (Go's net/http and net errors).
_UNREACHABLE = ("dial tcp", "no such host", "connection refused", "i/o timeout", "network is unreachable",
                "no route to host", "TLS handshake timeout", "Client.Timeout", "context deadline exceeded")
# dockerd registers its --gpus device driver only when it finds nvidia-container-runtime-hook as it starts.
_NO_GPU_DRIVER = "could not select device driver"


def row(step: str, status: str, detail: str) -> dict:
    return {"step": step, "status": status, "detail": detail.strip()}


def no_gpu_rows(platform: str, reason: str = "") -> list[dict]:
    steps = COMPOSE_STEPS if platform == "compose" else KUBERNETES_STEPS[1:]
    rows = [row(s, "skipped", NO_GPU + (f" ({reason})" if reason else "")) for s in steps]
    return rows if platform == "compose" else [row(KUBERNETES_STEPS[0], "skipped", "checked on GPU nodes"), *rows]


def _why(text: str) -> str:
    """One line of a failed command's output: its first error line, else its last line."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = next((ln for ln in lines if "rror" in ln), lines[-1] if lines else "no output")
    return line[:240]


def _because(cause: str, evidence: str, fix: str) -> str:
    return f"{cause}: {evidence}{'' if evidence.endswith(('.', '?', '!')) else '.'} Fix: {fix}"


def docker_down(probe) -> str | None:
    """Docker itself, from the probe: not installed (exit 127) or its daemon not answering; None when docker info
    answered or there was no probe."""
    rc, text = ran(probe)
    if rc in (None, 0):
        return None
    if rc == _NOT_FOUND:
        return _because(DOCKER_MISSING, _why(text),
                        "install Docker Engine: site.yml on this compose host (the docker_engine role; "
                        "playbooks/compose.yml after the host layer), then validate again")
    down = next((ln.strip() for ln in text.splitlines() if "Cannot connect to the Docker daemon" in ln), None)
    if down:
        return _because(DOCKER_DOWN, down, "systemctl enable --now docker; journalctl -u docker says why it stopped")
    return None


def _runtimes(probe) -> tuple[str, str]:
    """docker info's runtimes and CDI spec directories as evidence, and the fix (the diagnose link's)."""
    rc, text = ran(probe)
    info = parse_json(text) if rc == 0 else None
    if not isinstance(info, dict):
        return ("docker info gave no runtimes", docker_runtime({})["fix"])
    runtimes = info.get("Runtimes") or {}
    cdi = ", ".join(info.get("CDISpecDirs") or []) or "none"
    link = docker_runtime(runtimes)
    if link["status"] != "ok":
        return (f"docker info lists the runtimes {', '.join(sorted(runtimes)) or 'none'}, no nvidia; CDI spec "
                f"directories: {cdi}", link["fix"])
    return (f"docker info lists an nvidia runtime ({link['evidence']}), but dockerd found no "
            "nvidia-container-runtime-hook when it started",
            "reinstall the NVIDIA Container Toolkit (rerun the nvidia_container_toolkit role), then restart docker")


def container_failure(step: str, value, probe) -> str:
    """Why the container step ``step`` failed: its named cause, else its exit status and first error line."""
    rc, text = ran(value)
    return named_cause(step, value, probe) or f"exit {rc}: {_why(text)}"


def named_cause(step: str, value, probe) -> str | None:
    """The named cause of the failed container step ``step``, with the fix: Docker not installed or not running (the
    probe), the image not on the host and its registry not reachable, the NVIDIA runtime not configured (the run's
    own error, docker info's runtimes); None when it is none of these."""
    down = docker_down(probe)
    if down:
        return down
    _rc, text = ran(value)
    missing = _MISSING_IMAGE.search(text)
    if missing and any(sign in text for sign in _UNREACHABLE):
        image = missing.group(1)  # the role's image, which mirror_image has read as a reference already
        registry = split_reference(image)["registry"]
        return _because(IMAGE_UNREACHABLE,
                        f"{image} is not on this host and its registry {registry} cannot be reached ({_why(text)})",
                        f"make {registry} reachable from this host, or set {IMAGE_VARS[step]} (or "
                        "gpuops_registry_mirror, for every image) to a registry it reaches; on an air-gapped host, "
                        f"docker save {image} where it can be pulled and docker load it here")
    if _NO_GPU_DRIVER in text:
        evidence, fix = _runtimes(probe)
        return _because(NO_NVIDIA_RUNTIME, f"docker cannot give the container a GPU ({_why(text)}); {evidence}", fix)
    return None


def parse_all_reduce(text: str) -> dict:
    """all_reduce_perf's table: peak bus bandwidth (out-of-place or in-place, any size), the reported
    average, and the #wrong total (data validation errors). Columns are found from the header line, so
    versions that add columns (nccl-tests 2.19's timing statistics) read the same."""
    peak, wrong, rows = 0.0, 0, 0
    bw_cols, wrong_cols = [-6, -2], [-5, -1]  # nccl-tests 2.13: ... busbw #wrong time algbw busbw #wrong
    for line in (text or "").splitlines():
        cols = line.split()
        if line.lstrip().startswith("#"):
            names = line.lstrip("# ").split()
            if "busbw" in names and "size" in names:
                bw_cols = [i for i, n in enumerate(names) if n == "busbw"]
                wrong_cols = [i for i, n in enumerate(names) if n == "#wrong"]
            continue
        if not cols or not cols[0].isdigit() or len(cols) <= max(bw_cols + wrong_cols):
            continue
        try:
            bandwidths = [float(cols[i]) for i in bw_cols]
        except ValueError:
            continue
        rows += 1
        peak = max(peak, *bandwidths)
        wrong += sum(int(cols[i]) for i in wrong_cols if cols[i].isdigit())
    avg = re.search(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", text or "")
    return {"rows": rows, "peak_busbw": peak, "avg_busbw": float(avg.group(1)) if avg else None, "wrong": wrong}


def expected_busbw(topology: dict | None, gpus: list[int], pcie_gen: int = 4) -> dict:
    """What the interconnect between ``gpus`` should give: NVLink when every pair is NVLinked (the weakest
    pair's link count), else PCIe of the given generation."""
    peers = {g["index"]: {int(k): int(v) for k, v in (g.get("nvlink_peers") or {}).items()}
             for g in (topology or {}).get("gpus", []) if isinstance(g.get("index"), int)}
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    links = [peers.get(a, {}).get(b, 0) for a, b in pairs]
    if pairs and all(links):
        peak = min(links) * NVLINK_GBPS_PER_LINK
        return {"path": f"NVLink (NV{min(links)} per pair)", "peak": peak, "floor": round(peak * NVLINK_FLOOR, 1)}
    peak = PCIE_X16_GBPS.get(int(pcie_gen), PCIE_X16_GBPS[4])
    return {"path": f"PCIe Gen{pcie_gen} x16", "peak": peak, "floor": round(peak * PCIE_FLOOR, 1)}


def judge_nccl(text: str, rc: int | None, expected: dict, probe=None) -> dict:
    step = COMPOSE_STEPS[2]
    parsed = parse_all_reduce(text)
    if rc not in (0, None) or not parsed["rows"]:
        cause = named_cause("nccl", {"rc": rc, "out": text}, probe)
        return row(step, "failed", f"all_reduce_perf did not run: {cause}" if cause
                   else f"all_reduce_perf did not run (exit {rc}): {_why(text)}")
    detail = (f"peak busbw {parsed['peak_busbw']:.1f} GB/s over {expected['path']} (should give about "
              f"{expected['peak']:.0f} GB/s; floor {expected['floor']:.1f})")
    if parsed["wrong"]:
        return row(step, "failed", f"{parsed['wrong']} wrong results; {detail}")
    return row(step, "ok" if parsed["peak_busbw"] >= expected["floor"] else "failed", detail)


def compose_rows(outputs: dict, gpu_count: int, topology: dict | None, members: list[dict],
                 pcie_gen: int = 4) -> list[dict]:
    """outputs: docker (the probe), cuda_smi, cuda_check, nccl (registered results), workspaces ({member: result})
    and host_uuids (index -> UUID, gpu_facts'); members: [{name, gpus}] on this host."""
    rows = []
    probe = outputs.get("docker")
    rc, text = ran(outputs.get("cuda_smi"))
    listed = len(re.findall(r"^GPU \d+:", text, re.M))
    rows.append(row(COMPOSE_STEPS[0], "ok" if rc == 0 and listed == gpu_count else "failed",
                    f"{listed} of {gpu_count} GPUs listed" if rc == 0
                    else container_failure("cuda_smi", outputs.get("cuda_smi"), probe)))
    rc, text = ran(outputs.get("cuda_check"))
    passed = rc == 0 and "Test PASSED" in text
    rows.append(row(COMPOSE_STEPS[1], "ok" if passed else "failed",
                    "vectorAdd: Test PASSED" if passed else
                    f"exit 0 without Test PASSED: {_why(text)}" if rc == 0 else
                    container_failure("cuda_check", outputs.get("cuda_check"), probe)))
    if gpu_count > 1:
        rc, text = ran(outputs.get("nccl"))
        rows.append(judge_nccl(text, rc, expected_busbw(topology, list(range(gpu_count)), pcie_gen), probe))
    else:
        rows.append(row(COMPOSE_STEPS[2], "skipped", "skipped: one GPU, nothing to all-reduce across"))
    uuids = {str(index): uuid for index, uuid in (outputs.get("host_uuids") or {}).items()}
    probed = outputs.get("workspaces") or {}
    links = {m["name"]: workspace_gpus(*ran(probed.get(m["name"])), [uuids.get(str(g), f"GPU{g}?") for g in m["gpus"]])
             for m in members}
    down = docker_down(probe)
    if not links:
        rows.append(row(COMPOSE_STEPS[3], "skipped", "no member workspace on this host"))
    elif down:
        rows.append(row(COMPOSE_STEPS[3], "failed", f"{len(links)} workspace(s) not probed: {down}"))
    else:
        bad = [f"{name}: {link['evidence']}" for name, link in links.items() if link["status"] != "ok"]
        rows.append(row(COMPOSE_STEPS[3], "failed" if bad else "ok",
                        "; ".join(bad) if bad else f"{len(links)} workspace(s), each sees exactly its GPUs"))
    return rows


def kubernetes_rows(outputs: dict, node: str, gpu_count: int, replicas: int = 1, mig: bool = False) -> list[dict]:
    """outputs: nodes (kubectl get nodes -o json), node (kubectl get node NAME -o json), operator_pods
    (kubectl get pods -n <gpu_operator_namespace> -o json), gpu_pod (the test pod's logs, after it completed);
    ``mig``: a MIG pool, whose allocatable nvidia.com/gpu is at least the GPUs (diagnose.allocatable)."""
    rows = []
    nodes = (parse_json(ran(outputs.get("nodes"))[1]) or {}).get("items", [])
    ready = [n["metadata"]["name"] for n in nodes
             if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions", []))]
    not_ready = sorted({n["metadata"]["name"] for n in nodes} - set(ready))
    rows.append(row(KUBERNETES_STEPS[0], "ok" if nodes and not not_ready else "failed",
                    f"{len(ready)}/{len(nodes)} Ready" + (f"; not Ready: {', '.join(not_ready)}" if not_ready else "")))
    alloc = allocatable(ran(outputs.get("node"))[1], gpu_count if mig else gpu_count * replicas, mig)
    expected = (f"at least {gpu_count}: {gpu_count} GPUs, MIG devices of each" if mig
                else f"{gpu_count} GPUs x {replicas} replicas")
    rows.append(row(KUBERNETES_STEPS[1], "ok" if alloc["status"] == "ok" else "failed",
                    f"{alloc['evidence']} (expected {expected})"))
    pods = (parse_json(ran(outputs.get("operator_pods"))[1]) or {}).get("items", [])
    unhealthy = [p["metadata"]["name"] for p in pods if p["status"].get("phase") not in ("Running", "Succeeded")
                 or (p["status"].get("phase") == "Running"
                     and not all(c.get("ready") for c in p["status"].get("containerStatuses") or []))]
    rows.append(row(KUBERNETES_STEPS[2], "ok" if pods and not unhealthy else "failed",
                    f"{len(pods) - len(unhealthy)}/{len(pods)} healthy" +
                    (f"; unhealthy: {', '.join(unhealthy)}" if unhealthy else "")))
    rc, text = ran(outputs.get("gpu_pod"))
    listed = len(re.findall(r"^GPU \d+:", text, re.M))
    rows.append(row(KUBERNETES_STEPS[3], "ok" if rc == 0 and listed else "failed",
                    f"the pod completed and listed {listed} GPU(s) on {node}" if rc == 0 and listed
                    else f"exit {rc}: {_why(text)}"))
    return rows
