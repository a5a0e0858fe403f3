"""kube_node's one read of the kernel modules and of the sysctls (roles/kube_node/tasks/install.yml, sysctls_read.yml,
verify.yml; vars/main.yml), and the toolkit role's one read of containerd's config.toml (containerd_read.yml): each
replaced one module call per item (a stat per module, a sysctl per key, a sysctl --values per key) or a stat before a
slurp. The role's YAML is templated as Ansible templates it (ansible-core's Templar, on the files as Ansible loads
them); the reads' output is fed in as the commands print it (procps' ``sysctl --ignore``: "key = value", nothing for
a key the kernel lacks; ``find -maxdepth 0``: the paths that exist), and ``find`` runs here on a real directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLES = Path(__file__).resolve().parents[3] / "roles"
ROLE = ROLES / "kube_node"
LOADER = DataLoader()
ROLE_VARS = {**LOADER.load_from_file(str(ROLE / "defaults" / "main.yml")),
             **LOADER.load_from_file(str(ROLE / "vars" / "main.yml"))}
INSTALL = LOADER.load_from_file(str(ROLE / "tasks" / "install.yml"))
VERIFY = LOADER.load_from_file(str(ROLE / "tasks" / "verify.yml"))
READ = LOADER.load_from_file(str(ROLE / "tasks" / "sysctls_read.yml"))[0]
CTD_READ = LOADER.load_from_file(str(ROLES / "nvidia_container_toolkit" / "tasks" / "containerd_read.yml"))


def _task(tasks: list[dict], prefix: str) -> dict:
    return next(task for task in tasks if task["name"].startswith(prefix))


def _templar(**variables) -> Templar:
    trusted = {key: trust_as_template(value) if isinstance(value, str) else value for key, value in ROLE_VARS.items()}
    return Templar(loader=LOADER, variables={**trusted, "inventory_hostname": "node1", **variables})


def _template(templar: Templar, value):
    return templar.template(trust_as_template(value))


def test_the_modules_read_is_one_find_and_only_the_missing_are_loaded(tmp_path: Path) -> None:
    read = _task(INSTALL, "Install | kernel modules already loaded")
    argv = _template(_templar(), read["ansible.builtin.command"]["argv"])
    assert argv == ["find", "/sys/module/overlay", "/proc/sys/net/bridge", "-maxdepth", "0"]
    # find prints the paths that exist, each once, and only names a missing one on stderr.
    (tmp_path / "overlay").mkdir()
    run = subprocess.run(["find", str(tmp_path / "overlay"), str(tmp_path / "bridge"), "-maxdepth", "0"],
                         capture_output=True, text=True, check=False)
    assert run.stdout.splitlines() == [str(tmp_path / "overlay")]
    assert "bridge" in run.stderr
    load = _task(INSTALL, "Install | load the missing kernel modules now")
    for found, missing in (([], ["overlay", "br_netfilter"]), (["/sys/module/overlay"], ["br_netfilter"]),
                           (["/sys/module/overlay", "/proc/sys/net/bridge"], [])):
        items = _template(_templar(__kube_node_modules={"stdout_lines": found}), load["loop"])
        assert [item[0] for item in items] == missing


@pytest.mark.parametrize(("lines", "wrong"), [
    (["net.bridge.bridge-nf-call-iptables = 1", "net.bridge.bridge-nf-call-ip6tables = 1", "net.ipv4.ip_forward = 1"],
     []),
    (["net.bridge.bridge-nf-call-iptables = 1", "net.bridge.bridge-nf-call-ip6tables = 0", "net.ipv4.ip_forward = 1"],
     ["net.bridge.bridge-nf-call-ip6tables"]),
    # br_netfilter not loaded: its keys print nothing under --ignore
    (["net.ipv4.ip_forward = 0"],
     ["net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward"]),
])
def test_the_sysctls_are_read_once_and_only_those_that_differ_are_set(lines: list[str], wrong: list[str]) -> None:
    templar = _templar(__kube_node_sysctls_now={"stdout_lines": lines, "rc": 0})
    assert _template(templar, READ["ansible.builtin.command"]["argv"]) == [
        "sysctl", "--ignore", "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
        "net.ipv4.ip_forward"]
    assert _template(templar, _task(INSTALL, "Install | set the sysctls that differ")["loop"]) == wrong


def test_the_sysctl_file_keeps_its_key_value_lines() -> None:
    content = _template(_templar(), _task(INSTALL, "Install | forwarding and bridge sysctls at boot")
                        ["ansible.builtin.copy"]["content"])
    assert content.splitlines()[1:] == ["net.bridge.bridge-nf-call-iptables=1",
                                        "net.bridge.bridge-nf-call-ip6tables=1", "net.ipv4.ip_forward=1"]
    assert content.splitlines()[0].startswith("# ")


def test_verify_names_each_wrong_key_its_value_and_the_one_wanted() -> None:
    check = _task(VERIFY, "Verify | sysctls have their values")["ansible.builtin.assert"]
    lines = ["net.bridge.bridge-nf-call-iptables = 0", "net.ipv4.ip_forward = 1"]
    templar = _templar(__kube_node_sysctls_now={"stdout_lines": lines, "rc": 0})
    assert not templar.evaluate_conditional(trust_as_template(check["that"]))
    message = _template(templar, check["fail_msg"])
    assert "sysctl net.bridge.bridge-nf-call-iptables is 0, expected 1" in message
    assert "sysctl net.bridge.bridge-nf-call-ip6tables is not there (no such key), expected 1" in message
    assert "ip_forward" not in message.split("Fix:")[0]


def test_no_sysctl_wanted_reads_nothing_wrong() -> None:
    templar = _templar(kube_node_sysctls={}, __kube_node_sysctls_now={"stdout_lines": [], "rc": 1})
    assert not templar.evaluate_conditional(trust_as_template(READ["failed_when"]))
    assert _template(templar, _task(INSTALL, "Install | set the sysctls that differ")["loop"]) == []


@pytest.mark.parametrize(("msg", "fails"), [
    ("File not found: /etc/containerd/config.toml", False),  # ansible-core 2.19
    ("file not found: /etc/containerd/config.toml", False),  # 2.18
    ("Source is a directory and must be a file: /etc/containerd/config.toml", True),
    ("File is not readable: /etc/containerd/config.toml", True),
])
def test_the_toolkit_reads_config_toml_once_and_only_a_missing_one_is_no_failure(msg: str, fails: bool) -> None:
    read = _task(CTD_READ, "Containerd | read config.toml")
    result = {"failed": True, "msg": msg}
    templar = Templar(loader=LOADER, variables={"__nvidia_container_toolkit_ctd_current": result})
    assert templar.evaluate_conditional(trust_as_template(read["failed_when"])) is fails
    assert not [task for task in CTD_READ if "ansible.builtin.stat" in task], "no stat before the slurp"
