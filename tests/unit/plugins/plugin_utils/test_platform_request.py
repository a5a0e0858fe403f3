"""plugin_utils.platform.platform_request: one host's inputs of the platform rule, from its variables.

The one mapping from inventory variables to the rule's inputs: the preflight action reads each host with it from its
task variables, and plan.inventory_plan reads every host with it. Expected values by hand.
"""

from __future__ import annotations

from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import platform_request


def test_nothing_set_is_auto_with_no_counts():
    assert platform_request({}) == {"platform": "auto", "team_size": None, "gpu_count": None,
                                    "multi_node_training": False}


def test_each_variable_reaches_its_input():
    host = {"gpuops_platform": "kubernetes", "gpuops_team_size": 12, "gpuops_gpu_count": 32,
            "gpuops_multi_node_training": True, "gpuops_members": [{"name": "a"}]}
    assert platform_request(host) == {"platform": "kubernetes", "team_size": 12, "gpu_count": 32,
                                      "multi_node_training": True}


def test_the_team_size_defaults_to_the_members_counted():
    members = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    assert platform_request({"gpuops_members": members})["team_size"] == len(members)
