"""filter gpuops.cluster.platform_request: one host's inputs of the platform rule, from its variables.

The one mapping from inventory variables to the rule's inputs (plugin_utils/plan.py): preflight passes it to its
module (roles/preflight/tasks/gather.yml) and inventory_plan reads every host with it. Expected values by hand.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.plan import FilterModule

platform_request = FilterModule().filters()["platform_request"]


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


def test_not_a_host_s_variables_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"hostvars\[inventory_hostname\]"):
        platform_request(["gpu-01"])
