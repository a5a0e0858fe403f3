"""platform.ReadOnce: hostvars read by several steps of one task, each host merged once, each variable templated
once; reads answer as hostvars' do (get_var's defaults, a failing read raising every time)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import ReadOnce, get_var


class _CountingHost(dict):
    """A host's variables that count every templating (HostVarsVars templates the value on each __getitem__)."""

    def __init__(self, counts: dict, data: dict) -> None:
        super().__init__(data)
        self.counts = counts

    def __getitem__(self, name: str):
        self.counts[name] = self.counts.get(name, 0) + 1
        value = super().__getitem__(name)
        if value == "untemplatable":
            raise ValueError("cannot template")
        return value


class _CountingHostvars:
    """hostvars that count merges (each hostvars[host] is a VariableManager.get_vars)."""

    def __init__(self, hosts: dict) -> None:
        self.hosts, self.merges, self.reads = hosts, {}, {}

    def __getitem__(self, host: str) -> _CountingHost:
        self.merges[host] = self.merges.get(host, 0) + 1
        return _CountingHost(self.reads.setdefault(host, {}), self.hosts[host])

    def __contains__(self, host: object) -> bool:
        return host in self.hosts

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)


def test_each_host_merged_once_and_each_variable_templated_once() -> None:
    raw = _CountingHostvars({"gpu-01": {"ansible_facts": {"default_ipv4": {"interface": "eth0"}}, "gpuops_pool": "a"}})
    hostvars = ReadOnce(raw)
    for _round in range(3):
        assert get_var(hostvars["gpu-01"], "ansible_facts")["default_ipv4"]["interface"] == "eth0"
        assert get_var(hostvars["gpu-01"], "gpuops_pool") == "a"
    assert raw.merges == {"gpu-01": 1}
    assert raw.reads["gpu-01"] == {"ansible_facts": 1, "gpuops_pool": 1}


def test_reads_answer_as_hostvars_do() -> None:
    hostvars = ReadOnce(_CountingHostvars({"gpu-01": {"bad": "untemplatable", "none": None}}))
    assert "gpu-01" in hostvars
    assert "gpu-02" not in hostvars
    assert list(hostvars) == ["gpu-01"]
    assert len(hostvars) == 1
    assert hostvars.get("gpu-02") is None
    host = hostvars["gpu-01"]
    assert get_var(host, "missing", "d") == "d"
    assert get_var(host, "none", "d") == "d"
    assert get_var(host, "bad", "d") == "d"  # get_var's rule: an untemplatable variable reads as the default
    for _attempt in range(2):  # not kept: it raises again
        with pytest.raises(ValueError, match="cannot template"):
            host.get("bad")
    with pytest.raises(KeyError):
        host["missing"]
