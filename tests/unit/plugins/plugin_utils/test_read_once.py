"""platform.ReadOnce: hostvars read by several steps of one task, each host merged once, each variable templated
once by Ansible's own Templar, module output (facts, a registered result) read as it is; reads answer as hostvars'
do (get_var's defaults, a failing read raising every time). Without a templar (the inventory_plan filter's, on
Ansible's real HostVars of inventories/cluster): each host merged once per call, each variable read once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from ansible.errors import AnsibleUndefinedVariable
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager
from ansible_collections.gpuops.cluster.plugins.filter.plan import inventory_plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import ReadOnce, get_var

REPO = Path(__file__).resolve().parents[4]


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


def test_without_a_templar_each_host_is_read_once_through_its_own_view() -> None:
    raw = {"gpu-01": {"gpuops_pool": "a", "none": None}, "odd": "not a mapping"}
    hostvars = ReadOnce(raw)
    assert hostvars["gpu-01"].get("gpuops_pool") == "a"
    assert get_var(hostvars["gpu-01"], "none", "d") == "d"
    assert get_var(hostvars["gpu-01"], "missing", "d") == "d"
    assert get_var(hostvars["odd"], "gpuops_pool", "d") == "d"  # as get_var reads a value that is not a mapping
    with pytest.raises(KeyError):
        hostvars["gpu-02"]


@pytest.mark.parametrize("platform", [None, "kubernetes"])
def test_the_inventory_plan_filter_merges_each_host_once_per_call(platform: str | None) -> None:
    """Each hostvars[host] of Ansible's is a full merge of the host's variables (VariableManager.get_vars): the
    filter, which reads every GPU host's variables in several parts of the plan, merges each host once."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(REPO / "inventories" / "cluster")])
    variables = VariableManager(loader=loader, inventory=inventory)
    hostvars = HostVars(inventory=inventory, variable_manager=variables, loader=loader)
    merges: Counter = Counter()
    merge = VariableManager.get_vars

    def counting(self: VariableManager, *args: object, **kwargs: object) -> dict:
        merges[kwargs["host"].name] += 1
        return merge(self, *args, **kwargs)

    gpu_hosts = [host.name for host in inventory.groups["gpu_nodes"].get_hosts()]
    assert gpu_hosts, "inventories/cluster has no gpu_nodes: the count below would check nothing"
    with mock.patch.object(VariableManager, "get_vars", autospec=True, side_effect=counting):
        built = inventory_plan(gpu_hosts, hostvars, platform)
    assert sorted(built["hosts"]) == sorted(gpu_hosts)
    assert merges == Counter(dict.fromkeys([*gpu_hosts, "cp-01"], 1))  # cp-01: its node registration
