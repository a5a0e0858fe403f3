"""Preflight predicts the run on a real host (issue 36): an unreadable topology is refused (or warned about), CUDA is
judged against the running driver when no pin is set, and an OS that a role the host runs refuses is refused, by the
role's own table (its meta/main.yml platforms), the one its assert stage reads too.

The GPU facts are synthetic unless named: the H200 ones are parsed from the real capture of driver 580.159.04
(``../shared/data/nvidia-smi/h200-driver580/``, SOURCES.md). ``topology_error`` is shaped as gpu_facts sets it when
it was asked for the topology and could not read it; its text is the failure the H200 run reported.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.filter.plan import os_refusal
from ansible_collections.gpuops.cluster.plugins.plugin_utils import os_support, plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import evaluate, finish, host_checks
from conftest import shared_path
from gpu.nvidia_smi_q import parse_nvidia_smi_q

REPO = Path(__file__).resolve().parents[4]
DEBIAN12 = {"distribution": "Debian", "version": "12.7"}
ROCKY9 = {"distribution": "Rocky", "version": "9.4"}
TOPOLOGY_ERROR = {"command": "nvidia-smi topo -m", "error": "no `nvidia-smi topo -m` matrix found"}
# The notes and topology of a GPU seen whose topology was asked for and not read, as gpu_facts returns them.
ONE_GPU_UNREAD = {
    "present": True,
    "count": 1,
    "source": "nvml",
    "gpus": [{"index": 0, "name": "NVIDIA H200"}],
    "fabric_manager": {"required": False},
    "topology": None,
    "topology_error": TOPOLOGY_ERROR,
}
NO_GPU = {"present": False, "count": 0, "gpus": [], "source": "pci", "fabric_manager": {"required": False}}


def checks(result: dict) -> dict:
    return {c["name"]: c for c in result["checks"]}


def request(**overrides) -> dict:
    """A compose plan (team of 3): the platform is decided, so the OS is judged against its roles too."""
    return {"driver_version": "", "cuda_version": "", "team_size": 3, "platform": "auto", **overrides}


# --- topology --------------------------------------------------------------------------------------


def test_gpus_seen_and_topology_unreadable_is_refused_naming_host_command_error_and_fix():
    result = evaluate(request(), {"os": DEBIAN12, "gpu": ONE_GPU_UNREAD, "name": "h200-01"})
    assert result["ok"] is False
    assert result["failed_checks"] == ["topology"]
    msg = checks(result)["topology"]["msg"]
    assert msg.startswith("h200-01: 1 GPU(s) seen, but their topology could not be read from `nvidia-smi topo -m`: ")
    assert "topo -m`: no `nvidia-smi topo -m` matrix found." in msg
    assert "Fix: make `nvidia-smi topo -m` work on h200-01" in msg
    assert "preflight_topology_required: false" in msg


def test_topology_not_required_is_a_warning_that_passes():
    result = evaluate(request(topology_required=False), {"os": DEBIAN12, "gpu": ONE_GPU_UNREAD, "name": "h200-01"})
    assert result["ok"] is True
    c = checks(result)["topology"]
    assert (c["ok"], c["status"]) == (True, "warn")
    assert result["warned_checks"] == ["topology"]
    assert "no `nvidia-smi topo -m` matrix found" in c["msg"]


def test_topology_read_passes():
    gpu = {**ONE_GPU_UNREAD, "topology_error": None, "topology": {"gpus": [{"index": 0, "cpu_affinity": "0-15"}]}}
    c = checks(evaluate(request(), {"os": DEBIAN12, "gpu": gpu}))["topology"]
    assert (c["ok"], c["status"]) == (True, "ok")
    assert "topology read: 1 of 1 GPUs" in c["msg"]


def test_topology_declared_by_the_inventory_satisfies_the_rule():
    declared = {"numa_groups": [{"numa_node": 0, "gpus": [0], "cpus": "0-15"}]}
    result = evaluate(request(), {"os": DEBIAN12, "gpu": ONE_GPU_UNREAD, "declared_topology": declared})
    assert result["ok"] is True
    c = checks(result)["topology"]
    assert c["status"] == "ok"
    assert "declared by the inventory (gpuops_gpu_topology), which the plan uses" in c["msg"]
    assert "could not read it (nvidia-smi topo -m: no `nvidia-smi topo -m` matrix found)" in c["msg"]


def test_no_gpus_no_topology_rule():
    c = checks(evaluate(request(), {"os": DEBIAN12, "gpu": NO_GPU}))["topology"]
    assert (c["ok"], c["status"]) == (None, "skipped")
    assert "no GPUs seen" in c["msg"]


def test_topology_not_asked_for_is_not_refused():
    gpu = {**ONE_GPU_UNREAD, "topology_error": None, "notes": ["topology: not read because nvml lists 1 GPU"]}
    c = checks(evaluate(request(), {"os": DEBIAN12, "gpu": gpu}))["topology"]
    assert c["ok"] is None
    assert "topology: not read because nvml lists 1 GPU" in c["msg"]


# --- the driver CUDA is judged against --------------------------------------------------------------


def h200_facts() -> dict:
    """gpu facts from the H200's `nvidia-smi -q` (driver 580.159.04, CUDA 13.0; h200-driver580/q.txt)."""
    parsed = parse_nvidia_smi_q(shared_path("nvidia-smi", "h200-driver580", "q.txt").read_text())
    assert parsed["gpus"], "the H200 capture lists its GPU"
    return {
        **ONE_GPU_UNREAD,
        "gpus": parsed["gpus"],
        "driver_version": parsed["driver_version"],
        "topology_error": None,
    }


def test_a_pin_is_judged_as_the_pin():
    gpu = h200_facts()
    result = evaluate(request(driver_version="580.126.20", cuda_version="13.0"), {"os": DEBIAN12, "gpu": gpu})
    assert result["driver_judged"] == {"version": "580.126.20", "source": "pin"}
    c = checks(result)["driver_cuda_compat"]
    assert c["ok"] is True
    assert "CUDA 13.0 on the pinned driver 580.126.20" in c["msg"]


def test_no_pin_judges_the_running_driver_of_the_h200():
    gpu = h200_facts()
    assert gpu["driver_version"] == "580.159.04"
    result = evaluate(request(cuda_version="13.0"), {"os": DEBIAN12, "gpu": gpu})
    assert result["driver_judged"] == {"version": "580.159.04", "source": "running"}
    c = checks(result)["driver_cuda_compat"]
    assert c["ok"] is True
    assert "CUDA 13.0 on the running driver 580.159.04 (no driver pin" in c["msg"]
    assert result["compat"]["compatible"] is True


def test_no_pin_and_a_running_driver_too_old_is_refused():
    gpu = {**h200_facts(), "driver_version": "470.82.01"}
    c = checks(evaluate(request(cuda_version="12.4"), {"os": DEBIAN12, "gpu": gpu}))["driver_cuda_compat"]
    assert c["ok"] is False
    assert "CUDA 12.4 cannot run on the running driver 470.82.01" in c["msg"]


def test_no_pin_and_no_driver_is_skipped_with_the_reason():
    result = evaluate(request(cuda_version="13.0"), {"os": DEBIAN12, "gpu": NO_GPU})
    assert result["driver_judged"] is None
    c = checks(result)["driver_cuda_compat"]
    assert (c["ok"], c["status"]) == (None, "skipped")
    assert "no driver pin (nvidia_driver_version) and no running driver found: nothing to compare" in c["msg"]


def test_the_plan_records_the_driver_judged_and_whence():
    judged = evaluate(request(cuda_version="13.0"), {"os": DEBIAN12, "gpu": h200_facts()})
    part = plan.host_part("compose", h200_facts(), {}, driver="", driver_judged=judged["driver_judged"])
    assert part["driver_judged"] == {"version": "580.159.04", "source": "running"}
    assert part["packages"]["driver"] is None  # no pin: nothing is installed at a version
    fleet = {"ok": True, "platform": "compose", "source": "auto", "reason": "small", "gpu_count": 1}
    records = {"h200": {"gpu": h200_facts(), "result": judged, "plan": {"driver_version": "", "cuda_version": "13.0"}}}
    built = plan.build_plan(fleet, records, {"h200": {}}, "2026-12-04T00:00:00+00:00", "/r/x")
    assert built["hosts"]["h200"]["driver_judged"] == {"version": "580.159.04", "source": "running"}
    assert "driver_judged" in plan.SCHEMA["properties"]["hosts"]["additionalProperties"]["properties"]


# --- the OS, by each role's one table ----------------------------------------------------------------


def run_roles() -> dict:
    return yaml.safe_load((REPO / "playbooks" / "vars" / "run_roles.yml").read_text())["_gpuops_run_roles"]


def test_every_role_a_run_uses_has_a_table_preflight_can_read():
    layers = run_roles()
    roles = sorted({role for layer in layers.values() for role in layer})
    assert "host" in layers, layers
    assert set(layers["host"]) < set(roles), roles  # the host layer and at least one platform's roles
    for role in roles:
        table = os_support.role_supported(REPO / "roles" / role)
        assert table.get("Debian"), (role, table)  # every role runs on the Debian the tests use
        assert all(r[0].isdigit() for releases in table.values() for r in releases), (role, table)


def test_rocky_9_on_a_compose_host_is_refused_naming_the_roles():
    result = evaluate(request(), {"os": ROCKY9, "gpu": NO_GPU})
    assert result["platform"]["platform"] == "compose"
    assert result["ok"] is False
    assert "os_supported" in result["failed_checks"]
    msg = checks(result)["os_supported"]["msg"]
    assert msg.startswith("Rocky 9.4 is not supported by gpuops.cluster.docker_engine, gpuops.cluster.compose_stack; "
                          "supported by every role this host runs: Debian 12/13; Ubuntu 22.04/24.04 (")
    assert "gpuops.cluster.nvidia_driver" not in msg  # the host layer takes Rocky 9
    assert "meta/main.yml platforms" in msg
    assert "Fix: run this host on one of those releases" in msg


def test_debian_12_on_a_compose_host_passes_every_role():
    c = checks(evaluate(request(), {"os": DEBIAN12, "gpu": NO_GPU}))["os_supported"]
    assert c["ok"] is True
    for role in [*run_roles()["host"], *run_roles()["compose"]]:
        assert role in c["msg"]


def test_rocky_9_on_a_kubernetes_host_is_refused_naming_kube_node():
    c = checks(evaluate(request(platform="kubernetes"), {"os": ROCKY9, "gpu": NO_GPU}))["os_supported"]
    assert c["ok"] is False
    assert "gpuops.cluster.kube_node" in c["msg"].split("; supported by")[0]


def test_before_the_platform_is_decided_the_host_layer_alone_is_judged():
    judged = host_checks(request(), {"os": ROCKY9, "gpu": NO_GPU})
    assert checks(judged)["os_supported"]["ok"] is True
    undecided = finish(judged, {"ok": False, "platform": None, "source": "error", "reason": "split"})
    assert checks(undecided)["os_supported"]["ok"] is True
    assert "the platform's roles once it is decided" in checks(undecided)["os_supported"]["msg"]
    decided = finish(judged, {"ok": True, "platform": "compose", "source": "auto", "reason": "small"})
    assert checks(decided)["os_supported"]["ok"] is False


@pytest.mark.parametrize(
    ("roles", "facts", "refused"),
    [
        (["docker_engine"], {"distribution": "Rocky", "distribution_version": "9.4"}, ["docker_engine"]),
        (["docker_engine"], {"distribution": "Debian", "distribution_version": "12.7"}, []),
        (["nvidia_driver"], {"distribution": "Rocky", "distribution_version": "9.4"}, []),
        (["nvidia_driver"], {"distribution": "AlmaLinux", "distribution_version": "9.5"}, []),
        (["nvidia_driver"], {"distribution": "Rocky", "distribution_version": "8.9"}, ["nvidia_driver"]),
        (["nvidia_driver"], {"distribution": "Ubuntu", "distribution_version": "20.04"}, ["nvidia_driver"]),
        (["gpu_health"], {"distribution": "Fedora", "distribution_version": "40"}, ["gpu_health"]),
        (["nvidia_driver", "kube_node", "kube_cni"], {"distribution": "Rocky", "distribution_version": "9.4"},
         ["kube_node", "kube_cni"]),
        (["nvidia_driver", "kube_node"], {}, ["nvidia_driver", "kube_node"]),  # no facts: an unknown OS
        # roles no site.yml run uses (day-2 playbooks') are not judged, whatever their tables say
        (["burnin", "training_image"], {"distribution": "Ubuntu", "distribution_version": "20.04"}, []),
    ],
)
def test_the_inputs_pass_filter_reads_the_same_tables(roles, facts, refused):
    said = os_refusal(roles, facts)
    assert bool(said) is bool(refused)
    if refused:
        by = ", ".join(f"gpuops.cluster.{role}" for role in refused)
        assert f" is not supported by {by}; supported by every role this host runs: " in said
        assert said.count("gpuops.cluster.") == len(refused)  # each refusing role once, no other
        assert "meta/main.yml platforms" in said
        assert "Fix:" in said


def test_the_os_is_judged_in_one_place_the_inputs_pass_and_no_role_keeps_a_list_of_its_own():
    """The inputs pass reads every role's table through os_refusal, once per host; no role's tasks judge the OS
    again, and no role keeps a second list in vars."""
    inputs = (REPO / "playbooks" / "tasks" / "inputs.yml").read_text()
    assert inputs.count("inputs_roles | gpuops.cluster.os_refusal(ansible_facts)") == 1
    for path in (REPO / "roles").glob("*/tasks/**/*.yml"):
        assert "os_refusal" not in path.read_text(), path
    for path in (REPO / "roles").glob("*/vars/*.yml"):
        assert "_supported_" not in path.read_text(), path


def test_an_unknown_code_name_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"Debian version 'forky' is not a release gpuops.cluster knows"):
        os_support.supported_from_platforms([{"name": "Debian", "versions": ["forky"]}], "meta/main.yml")


def test_docs_support_says_what_the_tables_take():
    """docs/support.md's second column, against the tables: Debian 12/13 and Ubuntu 22.04/24.04 for every role a run
    uses; EL 9 for the host layer's roles only, no platform's."""
    layers = run_roles()
    tables = {role: os_support.role_supported(REPO / "roles" / role) for layer in layers.values() for role in layer}
    for role, table in tables.items():
        for distribution, release in (("Debian", "12"), ("Debian", "13"), ("Ubuntu", "22.04"), ("Ubuntu", "24.04")):
            assert os_support.is_supported(distribution, release, table), (role, distribution, release)
    for distribution in ("RedHat", "Rocky", "AlmaLinux"):
        assert all(os_support.is_supported(distribution, "9.4", tables[r]) for r in layers["host"]), distribution
        for platform in set(layers) - {"host"}:
            assert not all(os_support.is_supported(distribution, "9.4", tables[r]) for r in layers[platform]), platform
    text = (REPO / "docs" / "support.md").read_text()
    assert "| RHEL / Rocky / AlmaLinux 9 | the host layer's roles only" in text
