"""platform.ReadOnce: hostvars read by several steps of one task, each host merged once, each variable templated
once by Ansible's own Templar, module output (facts, a registered result) read as it is; reads answer as hostvars'
do (get_var's defaults, a failing read raising every time)."""

from __future__ import annotations

from unittest import mock

import pytest
from ansible.errors import AnsibleUndefinedVariable
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import ReadOnce, get_var


class _CountingHostvars:
    """hostvars that count merges (raw_get, like HostVars', is one VariableManager.get_vars per call)."""

    def __init__(self, hosts: dict) -> None:
        self.hosts, self.merges = hosts, {}

    def raw_get(self, host: str) -> dict:
        self.merges[host] = self.merges.get(host, 0) + 1
        return self.hosts[host]

    def __contains__(self, host: object) -> bool:
        return host in self.hosts


def _templar_for(variables: dict) -> Templar:
    return Templar(loader=DataLoader(), variables=variables)


def test_each_host_merged_once_each_variable_templated_once_and_module_output_read_as_is() -> None:
    facts = {"default_ipv4": {"interface": "eth0"}}
    registered = {"preflight": {"ok": True}}
    raw = _CountingHostvars({"gpu-01": {
        "ansible_facts": facts, "__preflight_host": registered,
        "site_pool": "a", "gpuops_pool": trust_as_template("{{ site_pool }}-pool"),
    }})
    hostvars = ReadOnce(raw, _templar_for, data=("ansible_facts", "__preflight_host"))
    with mock.patch.object(Templar, "template", autospec=True, side_effect=Templar.template) as templating:
        for _round in range(3):
            assert get_var(hostvars["gpu-01"], "gpuops_pool") == "a-pool"  # templated with the host's variables
            assert get_var(hostvars["gpu-01"], "ansible_facts") is facts  # module output: not templated
            assert hostvars["gpu-01"].get("__preflight_host") is registered
    assert raw.merges == {"gpu-01": 1}
    assert [call.args[1] for call in templating.call_args_list] == ["{{ site_pool }}-pool"]


def test_reads_answer_as_hostvars_do() -> None:
    hostvars = ReadOnce(_CountingHostvars({"gpu-01": {"bad": trust_as_template("{{ nowhere }}"), "none": None}}),
                        _templar_for)
    assert "gpu-01" in hostvars
    assert "gpu-02" not in hostvars
    with pytest.raises(KeyError):
        hostvars["gpu-02"]
    host = hostvars["gpu-01"]
    assert get_var(host, "missing", "d") == "d"
    assert get_var(host, "none", "d") == "d"
    assert get_var(host, "bad", "d") == "d"  # get_var's rule: an untemplatable variable reads as the default
    for _attempt in range(2):  # not kept: it raises again
        with pytest.raises(AnsibleUndefinedVariable, match="nowhere"):
            host.get("bad")
