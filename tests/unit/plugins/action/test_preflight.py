"""preflight action: the platform options not given come from the host's variables, through the platform rule's
one mapping (plugin_utils/platform.py), templated and validated like given ones; a given option wins.

The remote call (gpu_facts) is replaced by a canned answer shaped like gpu_facts' RETURN on a host without GPUs:
what is tested is the action's own argument handling, not the facts."""

from __future__ import annotations

from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.cluster.plugins.action.preflight import ActionModule

NO_GPU_FACTS = {
    "ansible_facts": {
        "gpu": {"count": 0, "gpus": [], "driver_version": None, "topology": None},
        "gpu_host": {"os": {"distribution": "Debian", "distribution_version": "12"}},
    },
}


def _run(args: dict, host_vars: dict) -> dict:
    task = Task.load({"action": {"module": "gpuops.cluster.preflight", **args}})
    task.args = dict(args)  # as the executor hands them over: templated
    loader = DataLoader()
    action = ActionModule(task, mock.MagicMock(), PlayContext(), loader, Templar(loader, variables=host_vars), None)
    with mock.patch.object(ActionModule, "_execute_module", return_value=NO_GPU_FACTS), \
         mock.patch.object(ActionModule, "_remove_tmp_path"):
        return action.run(task_vars=host_vars)


def test_platform_inputs_come_from_the_host_vars() -> None:
    host = {"gpuops_platform": "compose", "gpuops_gpu_count": 4, "gpuops_multi_node_training": True,
            "gpuops_members": [{"name": "alice"}, {"name": "bob"}]}
    result = _run({}, host)
    assert result["preflight"]["request"] == {"platform": "compose", "team_size": 2, "gpu_count": 4,
                                              "multi_node_training": True}


def test_unset_everywhere_gives_the_defaults() -> None:
    assert _run({}, {})["preflight"]["request"] == {"platform": "auto", "team_size": None, "gpu_count": None,
                                                    "multi_node_training": False}


def test_templated_host_vars_are_rendered() -> None:
    # trusted, as a template read from an inventory file is
    people = 7
    host = {"site_people": people, "gpuops_team_size": trust_as_template("{{ site_people }}")}
    assert _run({}, host)["preflight"]["request"]["team_size"] == people


def test_a_given_option_wins_over_the_host_vars() -> None:
    host = {"gpuops_team_size": 12, "gpuops_platform": "kubernetes"}
    request = _run({"team_size": 3, "platform": "auto"}, host)["preflight"]["request"]
    assert (request["team_size"], request["platform"]) == (3, "auto")


def test_a_bad_host_var_is_refused_by_the_options_spec() -> None:
    refused = "value of platform must be one of: auto, compose, kubernetes, got: slurm"
    with pytest.raises(AnsibleActionFail, match=refused):
        _run({}, {"gpuops_platform": "slurm"})
