"""lookup gpuops.cluster.monitoring_assets: the site's one monitoring assets directory, which compose_stack and
kube_monitoring both read - gpuops_monitoring_assets_dir when set (templated), else the collection's own copy."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.lookup.monitoring_assets import SHIPPED, LookupModule


def assets(variables: dict, *patterns: str) -> list[str]:
    templar = Templar(loader=DataLoader(), variables=variables)
    return LookupModule(loader=DataLoader(), templar=templar).run(list(patterns), variables=variables)


def test_unset_or_empty_is_the_collections_copy():
    assert assets({}) == [SHIPPED]
    assert assets({"gpuops_monitoring_assets_dir": ""}) == [SHIPPED]
    assert assets({}, "prometheus/rules/gpu.rules.yml") == [f"{SHIPPED}/prometheus/rules/gpu.rules.yml"]


def test_gpuops_monitoring_assets_dir_wins_and_is_templated(tmp_path):
    (tmp_path / "site" / "prometheus" / "rules").mkdir(parents=True)
    (tmp_path / "site" / "prometheus" / "rules" / "own.yml").write_text("groups: []\n")
    variables = {"inventory_dir": str(tmp_path),
                 "gpuops_monitoring_assets_dir": trust_as_template("{{ inventory_dir }}/site")}  # as an inventory
    assert assets(variables) == [str(tmp_path / "site")]
    assert assets(variables, "prometheus/rules/*.yml") == [str(tmp_path / "site" / "prometheus" / "rules" / "own.yml")]


def test_a_directory_without_the_layout_or_a_pattern_without_match_is_refused(tmp_path):
    with pytest.raises(AnsibleLookupError, match=r"not a monitoring assets directory.*gpuops_monitoring_assets_dir"):
        assets({"gpuops_monitoring_assets_dir": str(tmp_path)})
    with pytest.raises(AnsibleLookupError, match=r"nothing matches 'grafana/none/\*\.json'"):
        assets({}, "grafana/none/*.json")


def test_an_option_is_refused_the_retired_dir_included():
    with pytest.raises(AnsibleLookupError, match=r"takes no option, got \['dir'\]; fix: name the directory in gpuops"):
        LookupModule(loader=DataLoader(), templar=Templar(loader=DataLoader())).run([], variables={}, dir="/srv/x")
