"""Diagnose links: small pure functions over recorded command output.

Each link reads the output of one or two commands (as strings, JSON text or parsed dicts) and returns
    {"link": name, "status": "ok" | "broken" | "unknown", "evidence": str, "fix": str}
`walk` runs a chain in order and stops at the first broken link. "unknown" means the link could not
decide from what it was given (or the symptom it shows is caused further down), so the walk goes on.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_sysfs import parse_proc_driver_version
from ansible_collections.gpuops.cluster.plugins.module_utils.text import strip_terminal
from ansible_collections.gpuops.cluster.plugins.plugin_utils.driver_upgrade import driver_package_versions
from ansible_collections.gpuops.cluster.plugins.plugin_utils.driver_upgrade import upstream as package_upstream

OK, BROKEN, UNKNOWN = "ok", "broken", "unknown"
_NOT_FOUND = 127  # the shell's exit status for a command it cannot find
NO_WORKSPACE = 3  # validate's workspace probe: the member has no running workspace (it says so, naming the member)


def result(link: str, status: str, evidence: str, fix: str = "") -> dict:
    return {"link": link, "status": status, "evidence": evidence.strip(), "fix": fix.strip()}


def parse_json(text):
    if isinstance(text, (dict, list)):
        return text
    try:
        return json.loads(text) if text else None
    except ValueError:  # blank or not JSON
        return None


# ---------- kubernetes ----------
def pod_phase(pod_json) -> dict:
    """`kubectl get pod NAME -o json`: Running/Succeeded is ok; Pending goes on to the events."""
    link = "pod"
    pod = parse_json(pod_json)
    if not pod:
        return result(link, UNKNOWN, "no pod given (kubectl get pod returned nothing)")
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status", {})
    phase = status.get("phase", "?")
    if phase in ("Running", "Succeeded"):
        return result(link, OK, f"pod {name} is {phase}")
    waiting = [
        f"{c.get('name')}: {c['state']['waiting'].get('reason')}: {c['state']['waiting'].get('message', '')}"
        for c in status.get("containerStatuses") or []
        if (c.get("state") or {}).get("waiting")
    ]
    conditions = [
        f"{c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}".strip()
        for c in status.get("conditions") or []
        if c.get("status") != "True"
    ]
    return result(link, UNKNOWN, f"pod {name} is {phase}; " + "; ".join(waiting + conditions))


_TAINT = re.compile(r"(\d+) node\(s\) had (?:untolerated taint|taints? that the pod didn't tolerate)[^,.]*")
_INSUFFICIENT_GPU = re.compile(r"(\d+) Insufficient nvidia\.com/gpu")
_QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: ([^,]+), used: ([^,]+), limited: (\S+)")


def scheduling(events_json) -> dict:
    """`kubectl get events -o json` for the pod and its owner (Job/ReplicaSet): the scheduler's reason."""
    link = "scheduler"
    events = parse_json(events_json)
    items = (events or {}).get("items", []) if isinstance(events, dict) else (events or [])
    messages = [str(e.get("message", "")) for e in items if e.get("type") == "Warning"]
    for msg in messages:
        quota = _QUOTA.search(msg)
        if quota:
            return result(link, BROKEN, f"ResourceQuota {quota.group(1)} refuses the pod: requested {quota.group(2)}, "
                          f"used {quota.group(3)}, limit {quota.group(4)}",
                          "wait for the team's running GPU jobs to finish, or raise gpu_quota for the team in "
                          "gpuops_teams (group_vars/all/team.yml) and rerun the kube_tenancy role")
    for msg in messages:
        if "nodes are available" not in msg:
            continue
        taint = _TAINT.search(msg)
        gpu = _INSUFFICIENT_GPU.search(msg)
        if taint and not gpu:
            return result(link, BROKEN, f"scheduler: {msg}",
                          "add the toleration to the pod spec: tolerations: [{key: nvidia.com/gpu, operator: Exists, "
                          "effect: NoSchedule}] (GPU nodes carry that taint)")
        if gpu:
            return result(link, UNKNOWN, f"scheduler: {msg}",
                          "no node offers a free nvidia.com/gpu: the walk goes on to the device plugin and the node")
        return result(link, BROKEN, f"scheduler: {msg}", "read the reasons above: the pod asks for what no node offers")
    return result(link, OK, "no scheduling or quota warnings")


_PLUGIN_ERRORS = (
    ("could not load NVML library", "the device plugin's container cannot load libnvidia-ml: the containerd "
     "runtime it runs under is not nvidia (runtimeClassName nvidia, or nvidia as containerd's default runtime)"),
    ("Incompatible strategy", "the MIG strategy does not match the GPUs' MIG mode: set mig.strategy to match"),
    ("No devices found", "the plugin started but NVML lists no GPU: check nvidia-smi on the node"),
    ("error creating nvml", "NVML failed in the plugin: check nvidia-smi on the node"),
)


def device_plugin(pods_json, node: str, logs: str = "") -> dict:
    """`kubectl get pods -n <operator ns> -l app=nvidia-device-plugin-daemonset -o json` and the logs of the
    node's pod: present, Ready, and no known error in its log."""
    link = "device plugin"
    pods = parse_json(pods_json)
    items = [p for p in (pods or {}).get("items", []) if p.get("spec", {}).get("nodeName") == node]
    if pods is None:
        return result(link, UNKNOWN, "no device-plugin pod list given")
    if not items:
        return result(link, BROKEN, f"no nvidia-device-plugin pod on node {node}",
                      f"check the node's labels (kubectl get node {node} --show-labels: nvidia.com/gpu.present=true, "
                      "nvidia.com/gpu.deploy.device-plugin) and the GPU Operator's ClusterPolicy")
    pod = items[0]
    name = pod["metadata"]["name"]
    statuses = pod.get("status", {}).get("containerStatuses") or []
    for needle, why in _PLUGIN_ERRORS:
        line = next((ln for ln in (logs or "").splitlines() if needle in ln), None)
        if line:
            return result(link, BROKEN, f"{name} log: {line.strip()}", why)
    not_ready = [c for c in statuses if not c.get("ready")]
    if not_ready or pod.get("status", {}).get("phase") != "Running":
        restarts = sum(c.get("restartCount", 0) for c in statuses)
        return result(link, BROKEN, f"{name} is {pod.get('status', {}).get('phase')}, not ready, {restarts} restarts",
                      f"kubectl logs -n {pod['metadata'].get('namespace', '')} {name}")
    return result(link, OK, f"{name} is Running and ready on {node}")


def node_sharing(sharing: dict | None, node: str) -> tuple[int, bool]:
    """The node's pool in the plan's ``gpu_sharing`` (the entry whose nodes list it): nvidia.com/gpu advertised per
    GPU, and whether it is a MIG pool; (1, False), whole GPUs, where no pool lists it (compose, no GPU Operator)."""
    entry = next((e for e in (sharing or {}).values() if node in ((e or {}).get("nodes") or [])), None) or {}
    return int(entry.get("replicas") or 1), entry.get("strategy") == "mig"


def allocatable(node_json, expected: int, mig: bool = False) -> dict:
    """`kubectl get node NAME -o json`: allocatable nvidia.com/gpu equals ``expected``, the GPUs x the pool's replicas;
    ``mig``: a MIG pool, where the device plugin (mig.strategy single) advertises each GPU's MIG devices, as many as
    its profile makes on that GPU, so at least one per GPU (``expected`` is the GPUs)."""
    link = "node allocatable"
    node = parse_json(node_json)
    if not node:
        return result(link, UNKNOWN, "no node object given")
    name = node.get("metadata", {}).get("name", "?")
    got = node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu")
    if got in (None, "0"):
        return result(link, BROKEN, f"node {name} advertises no nvidia.com/gpu (allocatable: {got})",
                      "the device plugin has not registered with the kubelet: see its log and nvidia-smi below")
    if mig and int(got) < int(expected):
        return result(link, BROKEN, f"node {name} allocatable nvidia.com/gpu={got}, expected at least {expected} "
                      "(MIG: one device or more per GPU)",
                      "a GPU is missing or unhealthy (nvidia-smi, XID errors), or MIG Manager has not made the "
                      "pool's MIG devices (nvidia-smi -L lists them)")
    if not mig and int(got) != int(expected):
        return result(link, BROKEN, f"node {name} allocatable nvidia.com/gpu={got}, expected {expected}",
                      "a GPU is missing or unhealthy (nvidia-smi, XID errors), or the time-slicing replicas differ")
    return result(link, OK, f"node {name} allocatable nvidia.com/gpu={got}")


# containerd config version 2 (1.x: io.containerd.grpc.v1.cri) and version 3 (2.x: io.containerd.cri.v1.runtime).
_NVIDIA_RUNTIME = re.compile(
    r'^\s*\[plugins\."io\.containerd\.(?:grpc\.v1\.cri"\.containerd|cri\.v1\.runtime"\.containerd)'
    r"\.runtimes\.nvidia\]", re.M)
_BINARY = re.compile(r'BinaryName\s*=\s*"([^"]*nvidia-container-runtime[^"]*)"')


def containerd_runtime(config_dump: str) -> dict:
    """`containerd config dump`: an nvidia runtime whose BinaryName is nvidia-container-runtime."""
    link = "containerd runtime"
    if not config_dump or not config_dump.strip():
        return result(link, UNKNOWN, "no containerd configuration given")
    if not _NVIDIA_RUNTIME.search(config_dump):
        return result(link, BROKEN, "containerd has no runtimes.nvidia entry",
                      "rerun the nvidia_container_toolkit role with nvidia_container_toolkit_runtimes including "
                      "containerd (or: nvidia-ctk runtime configure --runtime=containerd, then restart containerd)")
    binary = _BINARY.search(config_dump)
    if not binary:
        return result(link, BROKEN, "runtimes.nvidia has no BinaryName = .../nvidia-container-runtime",
                      "rerun the nvidia_container_toolkit role; the nvidia runtime must exec nvidia-container-runtime")
    default = re.search(r'default_runtime_name\s*=\s*"([^"]+)"', config_dump)
    return result(link, OK, f"runtimes.nvidia -> {binary.group(1)}; default runtime "
                  f"{default.group(1) if default else '(unset)'}")


# ---------- the node: shared by both chains ----------
def nvidia_smi(rc: int | None, output: str) -> dict:
    """`nvidia-smi -L` (rc, stdout+stderr)."""
    link = "nvidia-smi"
    text = (output or "").strip()
    if rc is None:
        return result(link, UNKNOWN, "nvidia-smi was not run")
    if rc == _NOT_FOUND or "command not found" in text or "No such file" in text:
        return result(link, BROKEN, "nvidia-smi is not installed",
                      "install the driver with the nvidia_driver role (site.yml or upgrade_driver.yml)")
    if "Driver/library version mismatch" in text:
        return result(link, BROKEN, text.splitlines()[0],
                      "the loaded kernel module is older than the installed libraries: reboot the node "
                      "(or unload and reload the nvidia modules with no GPU process running)")
    if "couldn't communicate with the NVIDIA driver" in text:
        return result(link, BROKEN, text.splitlines()[0],
                      "the nvidia kernel module is not loaded: see the driver link (modprobe nvidia; "
                      "dmesg | grep -i nvrm; Secure Boot and DKMS build)")
    if rc != 0 or "No devices were found" in text:
        return result(link, BROKEN, f"nvidia-smi exit {rc}: {text.splitlines()[0] if text else '(no output)'}",
                      "dmesg | grep -iE 'nvrm|xid' shows why the GPUs are not usable")
    gpus = [ln for ln in text.splitlines() if ln.startswith("GPU ")]
    return result(link, OK, f"{len(gpus)} GPU(s): " + "; ".join(g.split(" (UUID")[0] for g in gpus))


def driver_versions(proc_version: str, installed: str, pin: str = "") -> dict:
    """/proc/driver/nvidia/version (the loaded module) against the installed package versions
    (`dpkg-query -W -f '${Package} ${Version}\\n' '*nvidia*'`) and the pin."""
    link = "driver"
    version = parse_proc_driver_version(proc_version)
    upstream = sorted(driver_package_versions(installed))
    if not version:
        if not upstream:
            return result(link, BROKEN, "no nvidia module loaded and no driver package installed",
                          "install the driver: site.yml (nvidia_driver role)")
        return result(link, BROKEN, f"no nvidia module loaded; installed {', '.join(upstream)}",
                      "modprobe nvidia; if it fails, dmesg shows why (DKMS build, Secure Boot, nouveau); "
                      "reboot after an install")
    if upstream and version not in upstream:
        return result(link, BROKEN,
                      f"reboot required: loaded module {version}, installed packages {', '.join(upstream)}",
                      "drain the node and reboot it (upgrade_driver.yml does drain, reboot and verify)")
    if pin and version != pin:
        return result(link, BROKEN, f"loaded driver {version} is not the pin {pin}",
                      f"move the node to the pin: playbooks/upgrade_driver.yml -e nvidia_driver_version={pin}")
    return result(link, OK, f"loaded {version}" + (f" = pin {pin}" if pin else "") +
                  (f"; installed {', '.join(upstream)}" if upstream else ""))


def fabric_manager(nvswitch: bool, active: str, fm_version: str = "", driver: str = "",
                   fabric_state: str = "") -> dict:
    """NVSwitch hosts: nvidia-fabricmanager active (`systemctl is-active`), its version (`nv-fabricmanager
    --version`, or a package version) equal to the driver's, and the GPUs' fabric state Completed (`nvidia-smi -q`,
    Fabric > State)."""
    link = "fabric manager"
    if not nvswitch:
        return result(link, OK, "no NVSwitch: Fabric Manager is not needed")
    if (active or "").strip() != "active":
        return result(link, BROKEN, f"nvidia-fabricmanager is {(active or 'unknown').strip()} on an NVSwitch host",
                      "systemctl enable --now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager says why")
    fm = package_upstream(fm_version)
    if fm and driver and fm != driver:
        return result(link, BROKEN, f"Fabric Manager {fm} does not match the driver {driver} (they must be equal)",
                      "move both to the pin together: playbooks/upgrade_driver.yml")
    state = (fabric_state or "").strip()
    if state and state.lower() != "completed":
        return result(link, BROKEN, f"GPU fabric state is {state}, not Completed",
                      "wait for Fabric Manager to finish; if it stays, restart nvidia-fabricmanager and read its log")
    details = "".join(f", {x}" for x in (fm, f"fabric {state}" if state else "") if x)
    return result(link, OK, f"nvidia-fabricmanager active{details}")


# ---------- compose ----------
def workspace_gpus(rc: int | None, output: str, expected: list[str]) -> dict:
    """validate's probe (roles/validate/tasks/workspaces.yml: `docker exec <workspace> nvidia-smi --query-gpu=uuid
    --format=csv,noheader`, exit NO_WORKSPACE when none runs) against the member's GPUs (UUIDs, or indexes when that
    is what the inventory gives)."""
    link = "workspace GPUs"
    if rc is None:
        return result(link, UNKNOWN, "the workspace was not probed")
    seen = [ln.strip() for ln in strip_terminal(output).splitlines() if ln.strip()]
    if rc != 0:
        return result(link, UNKNOWN, seen[0] if rc == NO_WORKSPACE and seen else
                      f"the workspace cannot run nvidia-smi (exit {rc}): {seen[0] if seen else ''}")
    want = [str(x) for x in expected]
    if sorted(seen) == sorted(want):
        return result(link, OK, f"the workspace sees exactly its GPUs: {', '.join(seen)}")
    if not seen:
        return result(link, UNKNOWN, "the workspace sees no GPU")
    return result(link, BROKEN, f"the workspace sees {', '.join(seen)}; its GPUs are {', '.join(want)}",
                  "fix the member's gpus in gpuops_members and rerun compose_stack (the workspace's device request)")


def docker_runtime(runtimes_json, daemon_json: str = "") -> dict:
    """`docker info --format '{{json .Runtimes}}'` (and /etc/docker/daemon.json for the evidence)."""
    link = "docker runtime"
    runtimes = parse_json(runtimes_json)
    if runtimes is None:
        return result(link, UNKNOWN, "docker info gave no runtimes (is docker running?)")
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    if not nvidia:
        cfg = parse_json(daemon_json) or {}
        return result(link, BROKEN, f"docker has no nvidia runtime (runtimes: {', '.join(sorted(runtimes))}; "
                      f"daemon.json runtimes: {', '.join(sorted(cfg.get('runtimes', {}))) or 'none'})",
                      "rerun the nvidia_container_toolkit role (runtimes: [docker]): it merges "
                      "the nvidia runtime into daemon.json and restarts docker")
    return result(link, OK, f"nvidia runtime -> {nvidia.get('path', '?')}")


def toolkit_cdi(ctk_version: str, cdi_list: str, gpus: int) -> dict:
    """`nvidia-ctk --version` and `nvidia-ctk cdi list`: the toolkit is there and its CDI spec names every GPU."""
    link = "toolkit and CDI"
    version = re.search(r"version (\d+\.\d+\.\d+)", ctk_version or "")
    if not version:
        return result(link, BROKEN, "nvidia-ctk is not installed",
                      "install the toolkit with the nvidia_container_toolkit role")
    devices = [ln.strip() for ln in (cdi_list or "").splitlines() if ln.strip().startswith("nvidia.com/gpu=")]
    numbered = [d for d in devices if re.match(r"nvidia\.com/gpu=\d+$", d)]
    if gpus and len(numbered) != gpus:
        return result(link, BROKEN, f"the CDI spec names {len(numbered)} GPU(s), the host has {gpus}",
                      "regenerate it after each driver change: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
    return result(link, OK, f"nvidia-ctk {version.group(1)}; CDI devices: {', '.join(devices) or 'none needed'}")


def walk(results: list[dict]) -> dict:
    """The chain in order, up to and including the first broken link (``walked``), and the links below it
    (``below``): read from the same outputs, they say whether the node under a broken upper link is sound (a host
    without the toolkit whose driver is fine, or one whose driver is broken too)."""
    for index, link in enumerate(results):
        if link["status"] == BROKEN:
            return {"broken": link, "walked": results[: index + 1], "below": results[index + 1 :]}
    return {"broken": None, "walked": list(results), "below": []}


def output(value) -> str:
    """An output as text: {rc, out}, or a registered command result (stdout, then stderr); validate, burnin too."""
    if not isinstance(value, dict):
        return value or ""
    if "out" in value:
        return value["out"] or ""
    return "\n".join(str(x) for x in (value.get("stdout"), value.get("stderr")) if x)


def ran(value) -> tuple[int | None, str]:
    """A registered command result's exit status and output; (None, "") where it did not run."""
    if not isinstance(value, dict) or value.get("skipped"):
        return None, ""
    return value.get("rc"), output(value)


def _out(outputs: dict, name: str) -> str:
    return output(outputs.get(name))


def node_links(outputs: dict, pin: str = "") -> list[dict]:
    """nvidia-smi -> loaded driver vs packages (-> Fabric Manager, kubernetes only): the links every node has."""
    return [
        nvidia_smi(*ran(outputs.get("nvidia_smi"))),
        driver_versions(_out(outputs, "proc_version"), _out(outputs, "packages"), pin),
    ]


def _fabric(outputs: dict) -> dict:
    """Fabric Manager as gpu_facts read it: required, its service state, its version and the fabric state."""
    fm = (outputs.get("gpu_facts") or {}).get("fabric_manager") or {}
    return fabric_manager(bool(fm.get("required")), fm.get("service_state") or "", fm.get("version") or "",
                          parse_proc_driver_version(_out(outputs, "proc_version")) or "", fm.get("state") or "")


def sees_no_gpu(outputs: dict) -> bool:
    """gpu_facts was gathered and counts no GPU (neither NVML nor nvidia-smi answered with one)."""
    facts = outputs.get("gpu_facts")
    return isinstance(facts, dict) and "count" in facts and not int(facts.get("count") or 0)


def no_gpu_chain(outputs: dict, pin: str = "") -> dict:
    """A GPU node where gpu_facts sees no GPU: every link above nvidia-smi needs one, so the walk is the node's own
    links (nvidia-smi -> driver), then the GPUs themselves, named with gpu_facts' notes."""
    notes = "; ".join((outputs.get("gpu_facts") or {}).get("notes") or []) or "gpu_facts gave no reason"
    seen = result("GPUs", BROKEN, f"gpu_facts sees no GPU ({notes})",
                  "lspci -nn -d 10de: shows whether the host has an NVIDIA GPU at all; if it has, "
                  "dmesg | grep -iE 'nvrm|xid' says why the driver does not offer it")
    return walk([*node_links(outputs, pin), seen])


def chain(outputs: dict, platform: str, expected_gpus, node: str = "", pin: str = "", mig: bool = False) -> dict:
    """The platform's links, then the node's (nvidia-smi -> driver -> Fabric Manager); with no GPU seen,
    ``no_gpu_chain``. compose: workspace GPUs (``expected_gpus``, the member's UUIDs) -> docker runtime -> toolkit and
    CDI; kubernetes: pod -> scheduler -> device plugin -> allocatable (``allocatable``'s ``expected``, here
    ``expected_gpus``, and ``mig``) -> containerd."""
    if sees_no_gpu(outputs):
        return no_gpu_chain(outputs, pin)
    if platform == "compose":
        top = [workspace_gpus(*ran(outputs.get("workspace")), expected_gpus),
               docker_runtime(_out(outputs, "docker_runtimes"), _out(outputs, "daemon_json")),
               toolkit_cdi(_out(outputs, "ctk_version"), _out(outputs, "cdi_list"),
                           int((outputs.get("gpu_facts") or {}).get("count") or 0))]
    else:
        top = [pod_phase(_out(outputs, "pod")), scheduling(_out(outputs, "events")),
               device_plugin(_out(outputs, "plugin_pods") or None, node, _out(outputs, "plugin_logs")),
               allocatable(_out(outputs, "node"), expected_gpus, mig), containerd_runtime(_out(outputs, "containerd"))]
    return walk([*top, *node_links(outputs, pin), _fabric(outputs)])
