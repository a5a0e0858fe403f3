"""write_objects action: file names, refusals, and the YAML it writes (read back equal)."""

from __future__ import annotations

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible_collections.gpuops.cluster.plugins.action.write_objects import object_file_name, planned_files

QUOTA = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "vision-quota", "namespace": "team-vision"},
         "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}


def test_names_and_content() -> None:
    planned = planned_files([QUOTA], {"helm-values-x.yml": "a: 1\n"})
    assert set(planned) == {"resourcequota-vision-quota.yaml", "helm-values-x.yml"}
    assert yaml.safe_load(planned["resourcequota-vision-quota.yaml"]) == QUOTA
    assert planned["helm-values-x.yml"] == "a: 1\n"
    assert object_file_name({"kind": "PyTorchJob", "metadata": {"name": "t"}}) == "pytorchjob-t.yaml"
    # a relative path of names (the compose project's layout, playbooks/render.yml)
    assert planned_files([], {"prometheus/rules/gpu.yml": "x"}) == {"prometheus/rules/gpu.yml": "x"}


@pytest.mark.parametrize(("objects", "files"), [
    ([QUOTA, QUOTA], {}),                                      # same kind and name twice
    ([{"kind": "ConfigMap", "metadata": {}}], {}),             # no name
    ([], {"../escape.yml": "x"}),                              # a path out of dest
    ([], {"rules/../../escape.yml": "x"}),
    ([], {"/etc/escape.yml": "x"}),
    ([], {".hidden.yml": "x"}),
    ([QUOTA], {"resourcequota-vision-quota.yaml": "x"}),       # collides with an object
])
def test_refusals(objects: list, files: dict) -> None:
    with pytest.raises(AnsibleActionFail):
        planned_files(objects, files)
