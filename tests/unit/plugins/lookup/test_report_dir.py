"""lookup gpuops.cluster.report_dir: the one default of the report folder (preflight, plan.yml, validate).

gpuops_report_dir when set (templated, so an inventory may write it from inventory_dir), else reports/ beside
the playbook's folder, resolved.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.lookup.report_dir import LookupModule
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import with_out_of_service


def report_dir(variables: dict, terms: list | None = None) -> str:
    templar = Templar(loader=DataLoader(), variables=variables)
    [found] = LookupModule(loader=DataLoader(), templar=templar).run(terms or [], variables=variables)
    return found


def test_reports_beside_the_playbooks_folder_when_unset(tmp_path):
    (tmp_path / "playbooks").mkdir()
    assert report_dir({"playbook_dir": str(tmp_path / "playbooks")}) == str((tmp_path / "reports").resolve())


def test_gpuops_report_dir_wins_and_is_templated(tmp_path):
    variables = {"playbook_dir": str(tmp_path / "playbooks"), "inventory_dir": str(tmp_path / "site"),
                 "gpuops_report_dir": trust_as_template("{{ inventory_dir }}/reports")}  # as the inventory loads it
    assert report_dir(variables) == str(tmp_path / "site" / "reports")
    assert report_dir({"gpuops_report_dir": str(tmp_path / "r")}) == str(tmp_path / "r")


def test_empty_gpuops_report_dir_is_the_default(tmp_path):
    assert report_dir({"playbook_dir": str(tmp_path / "p"), "gpuops_report_dir": ""}) == str(tmp_path / "reports")


def test_outside_a_playbook_it_says_what_to_set():
    with pytest.raises(AnsibleLookupError, match="set gpuops_report_dir"):
        report_dir({})


def test_health_state_is_the_file_preflights_plan_reads(tmp_path):
    """roles/health writes its state where this term says; preflight's plan reads the GPUs out of service there."""
    path = report_dir({"gpuops_report_dir": str(tmp_path)}, ["health_state"])
    assert path == str(tmp_path / "health" / "state.json")
    (tmp_path / "health").mkdir()
    (tmp_path / "health" / "state.json").write_text('{"hosts": {"a": {"out_of_service": {"1": {"event": "Xid 79"}}}}}')
    assert with_out_of_service({"hosts": {"a": {}}}, str(tmp_path))["hosts"]["a"]["out_of_service"] == {
        "1": {"event": "Xid 79"}}
    with pytest.raises(AnsibleLookupError, match="unknown term"):
        report_dir({"gpuops_report_dir": str(tmp_path)}, ["health"])
