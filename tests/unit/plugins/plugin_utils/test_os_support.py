"""os_support: the roles a run uses (playbooks/vars/run_roles.yml) are read once per process and shared read-only;
preflight and the inputs pass print one refusal of an OS, worded by one function."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.cluster.plugins.filter.plan import os_refusal
from ansible_collections.gpuops.cluster.plugins.plugin_utils import os_support, preflight


def test_run_roles_parses_its_file_at_most_once_over_many_calls(monkeypatch) -> None:
    """Every host's worker asks for the roles (the filters, preflight); the file is parsed once per process."""
    parsed = []
    load = os_support.yaml.load

    def counting(text, *args, **kwargs):
        if "_gpuops_run_roles:" in text:  # run_roles.yml, not a role's meta/main.yml (role_table's own cache)
            parsed.append(text)
        return load(text, *args, **kwargs)

    monkeypatch.setattr(os_support.yaml, "load", counting)
    for _round in range(5):
        layers = os_support.run_roles()
        os_support.host_roles("kubernetes")
        os_support.platforms_with_play()
        os_refusal(["kube_node"], {"distribution": "Debian", "distribution_version": "12.7"})
    assert len(parsed) <= 1, f"run_roles.yml parsed {len(parsed)} times in 5 rounds of calls"
    assert "kube_node" in layers["kubernetes"]
    assert "nvidia_driver" in layers["host"]


def test_no_caller_can_change_the_shared_roles() -> None:
    layers = os_support.run_roles()
    with pytest.raises(TypeError):
        layers["host"] = []  # type: ignore[index]
    with pytest.raises(AttributeError):
        layers["host"].append("burnin")  # type: ignore[union-attr]
    mine = os_support.host_roles("compose")
    mine.append("burnin")
    assert "burnin" not in os_support.host_roles("compose")
    assert os_support.run_roles()["host"] == layers["host"]


@pytest.mark.parametrize(
    ("platform", "facts"),
    [
        ("compose", {"distribution": "Rocky", "version": "9.4"}),  # the platform's roles refuse, the host layer not
        ("kubernetes", {"distribution": "Rocky", "version": "9.4"}),
        (None, {"distribution": "Ubuntu", "version": "20.04"}),  # the host layer alone, every role refusing
        ("compose", {"distribution": "Fedora", "version": "40"}),
        ("compose", {}),  # nothing known: an unknown OS
    ],
    ids=["rocky9-compose", "rocky9-kubernetes", "ubuntu2004-undecided", "fedora40-compose", "unknown-compose"],
)
def test_preflight_and_the_inputs_pass_print_the_same_refusal(platform, facts) -> None:
    """The same OS judged for the same roles reads the same in preflight's report and in the inputs pass's failure:
    one sentence, from one function."""
    roles = os_support.host_roles(platform)
    judged = preflight.os_supported(facts, platform)
    said = os_refusal(roles, {"distribution": facts.get("distribution"), "distribution_version": facts.get("version")})
    assert judged["ok"] is False
    assert said
    assert judged["msg"] == said
