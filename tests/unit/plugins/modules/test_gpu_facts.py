"""gpu_facts module: main() on a host without a GPU (facts, topology note), and its actionable refusals."""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.module_utils import gpu_facts as gf
from ansible_collections.gpuops.cluster.plugins.modules import gpu_facts as module
from module_helpers import run_main


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
