"""gpu_facts module: main() on a host without a GPU (facts, topology note), on the H200 host's recorded nvidia-smi
with topology: true (the one way to read a topology: the retired gpu_topology module points here), and its
actionable refusals."""

from __future__ import annotations

import socket
import subprocess

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.module_utils.topology import parse_topology
from ansible_collections.gpuops.cluster.plugins.modules import gpu_facts as module
from ansible_env import BIN, playbook_env
from module_helpers import run_main
from shared_data import shared_path


def _no_pynvml():
    raise ImportError("No module named 'pynvml'")


def test_module_exit_json_on_a_host_without_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gf, "import_pynvml", _no_pynvml)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, systemctl, nv-fabricmanager
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    args = {"_sysfs_root": str(tmp_path / "sys"), "_proc_root": str(tmp_path / "proc")}
    code, result = run_main(module, args, capsys)
    assert code == 0
    assert result["changed"] is False
    gpu = result["ansible_facts"]["gpu"]
    assert (gpu["present"], gpu["count"], gpu["source"], gpu["driver_loaded"]) == (False, 0, "none", False)


def test_module_gpu_host_answers_what_was_asked_in_the_same_call(tmp_path, monkeypatch, capsys):
    """os_facts, free_space_paths and tcp_probes through main(): gpu_host has the three answers; none asked, none."""
    monkeypatch.setattr(gf, "import_pynvml", _no_pynvml)
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text('ID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n')
    with socket.socket() as closed:  # a port nothing listens on: the probe is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    roots = {"_sysfs_root": str(tmp_path / "sys"), "_proc_root": str(tmp_path / "proc"), "_os_root": str(tmp_path)}
    asked = {"os_facts": True, "free_space_paths": [str(tmp_path / "new" / "dir")], "probe_timeout": 2,
             "tcp_probes": [{"host": "127.0.0.1", "port": port}]}
    code, result = run_main(module, {**roots, **asked}, capsys)
    assert code == 0
    host = result["ansible_facts"]["gpu_host"]
    assert (host["os"]["distribution"], host["os"]["distribution_version"]) == ("Ubuntu", "24.04")
    assert [(space["measured_at"], space["error"]) for space in host["free_space"]] == [(str(tmp_path), None)]
    probes = [(probe["port"], probe["reachable"], probe["timeout"]) for probe in host["tcp_probes"]]
    assert probes == [(port, False, 2.0)]
    code, result = run_main(module, roots, capsys)
    assert "gpu_host" not in result["ansible_facts"]


def test_module_fails_with_actionable_message_for_unavailable_named_backend(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    args = {"backend": "nvidia-smi", "_sysfs_root": str(tmp_path)}
    code, result = run_main(module, args, capsys)
    assert code == 1
    assert result["failed"] is True
    assert "use backend=auto to fall back" in result["msg"]


def test_module_topology_on_a_host_without_gpu_is_null_with_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gf, "import_pynvml", _no_pynvml)
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    args = {"topology": True, "gpus_per_job": 4, "_sysfs_root": str(tmp_path), "_proc_root": str(tmp_path)}
    code, result = run_main(module, args, capsys)
    assert code == 0
    gpu = result["ansible_facts"]["gpu"]
    assert (gpu["source"], gpu["topology"]) == ("none", None)
    assert gpu["notes"][-1].startswith("topology: not read because source is none")


def test_module_refuses_gpus_per_job_zero(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    args = {"topology": True, "gpus_per_job": 0, "_sysfs_root": str(tmp_path)}
    code, result = run_main(module, args, capsys)
    assert code == 1
    assert "gpus_per_job is 0: expected a number of GPUs greater than 0" in result["msg"]


def _run_on_h200(monkeypatch, capsys, tmp_path, matrix: str, args: dict) -> tuple[int, dict, list, list]:
    """main() with topology: true on the H200 host of ../shared/data/nvidia-smi/h200-driver580 (its `-q -x` as
    recorded; no pynvml, so the nvidia-smi backend answers) and ``matrix`` as `topo -m`: (exit code, result, the
    commands run with their effective environment, the module's warnings as it passed them to warn())."""
    xml = shared_path("nvidia-smi", "h200-driver580", "q.xml").read_text(encoding="utf-8")
    outputs = {"-q -x": (0, xml, ""), "nvlink -s": (0, "", ""), "topo -m": (0, matrix, "")}
    calls: list[tuple] = []
    warned: list[str] = []

    def fake_run_command(self, argv, **kwargs):
        calls.append((argv, {**self.run_command_environ_update, **kwargs.get("environ_update", {})}))
        return outputs.get(" ".join(argv[1:]), (127, "", "not expected to run"))

    monkeypatch.setattr(gf, "import_pynvml", _no_pynvml)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning, *a, **k: warned.append(warning))
    args = {"topology": True, "_sysfs_root": str(tmp_path), "_proc_root": str(tmp_path), **args}
    code, result = run_main(module, args, capsys)
    return code, result, calls, warned


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check_mode"])
def test_module_reads_the_topology_h200_driver580(monkeypatch, capsys, tmp_path, check_mode):
    """What failed on the H200 ("no `nvidia-smi topo -m` matrix found"): driver 580 underlines the header even into
    a pipe (h200-driver580/topo-m.pipe.txt, as recorded). Read in check mode too, with LC_ALL=C."""
    matrix = shared_path("nvidia-smi", "h200-driver580", "topo-m.pipe.txt").read_text(encoding="utf-8")
    assert "\x1b[4mGPU0" in matrix
    args = {"_ansible_check_mode": check_mode}
    code, result, calls, warned = _run_on_h200(monkeypatch, capsys, tmp_path, matrix, args)
    assert (code, result["changed"]) == (0, False)
    gpu = result["ansible_facts"]["gpu"]
    assert gpu["topology"] == parse_topology(matrix)
    assert [(g["index"], g["cpu_affinity"], g["numa_node"]) for g in gpu["topology"]["gpus"]] == [(0, "0-15", 0)]
    assert (gpu["topology"]["warnings"], gpu["topology_error"]) == ([], None)
    assert warned == []
    topo = [environ for argv, environ in calls if argv == ["/usr/bin/nvidia-smi", "topo", "-m"]]
    assert [environ["LC_ALL"] for environ in topo] == ["C"]


def test_module_shows_the_topology_warnings_as_ansible_warnings(monkeypatch, capsys, tmp_path):
    """A truncated capture (h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453, raw TAB output) is read as far as it goes; each
    of the parser's warnings is in the topology and shown as an Ansible warning."""
    matrix = shared_path("nvidia-smi", "topo", "h100x8_9nic_RAW-TABS_TRUNCATED_nccl1453.txt").read_text("utf-8")
    code, result, _calls, warned = _run_on_h200(monkeypatch, capsys, tmp_path, matrix, {"gpus_per_job": 2})
    assert code == 0
    topology = result["ansible_facts"]["gpu"]["topology"]
    assert topology == parse_topology(matrix, 2)
    assert topology["warnings"]  # this capture is truncated
    assert warned == [f"topology: {warning}" for warning in topology["warnings"]]


def test_the_retired_gpu_topology_module_names_the_fix(tmp_path):
    """meta/runtime.yml's tombstone: a playbook that still calls gpuops.cluster.gpu_topology is refused with the fix
    (gpu_facts with topology: true), not with "couldn't resolve module"."""
    if not (BIN / "ansible-playbook").exists():
        pytest.skip(f"ansible-playbook not found at {BIN} (run make venv)")
    playbook = tmp_path / "old.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - gpuops.cluster.gpu_topology:\n")
    run = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", str(playbook)],
                         env=playbook_env(), capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode != 0
    text = " ".join((run.stdout + run.stderr).split())
    assert "'gpuops.cluster.gpu_topology' module has been removed" in text
    assert "Use gpuops.cluster.gpu_facts with topology: true" in text
