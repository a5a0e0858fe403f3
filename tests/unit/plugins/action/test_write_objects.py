"""write_objects action: file names, refusals, and the YAML it writes (read back equal)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible_collections.gpuops.cluster.plugins.action.write_objects import object_file_name, planned_files
from ansible_env import playbook_env

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


KUBELET = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cpuManagerPolicy": "static"}


def test_an_object_without_a_name_takes_the_default_name() -> None:
    """kubeadm's and the kubelet's configuration kinds have no metadata.name: playbooks/render.yml names them after
    the host (default_name); a named object keeps its own name."""
    planned = planned_files([KUBELET, QUOTA], {}, default_name="gpu-train-01")
    assert set(planned) == {"kubeletconfiguration-gpu-train-01.yaml", "resourcequota-vision-quota.yaml"}
    assert yaml.safe_load(planned["kubeletconfiguration-gpu-train-01.yaml"]) == KUBELET
    with pytest.raises(AnsibleActionFail, match=r"without kind or metadata\.name"):
        planned_files([KUBELET], {})


@pytest.mark.parametrize("obj", [{"metadata": {"name": "t"}}, {"kind": "", "metadata": {"name": "t"}},
                                 {"kind": "Secret", "metadata": "t"}, "kind: Secret"])
def test_an_object_without_a_kind_or_a_mapping_is_refused_even_with_a_default_name(obj) -> None:
    with pytest.raises(AnsibleActionFail, match=r"without kind or metadata\.name"):
        planned_files([obj], {}, default_name="gpu-train-01")


PLAY = """
- name: write_objects on the controller
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    objects: [{kind: KubeletConfiguration, cpuManagerPolicy: static}, {kind: ConfigMap, metadata: {name: c}}]
  tasks:
    - name: First write, into a directory that does not exist yet
      gpuops.cluster.write_objects: {objects: "{{ objects }}", default_name: node-1, dest: "{{ out }}/new"}
      register: first
    - name: The same again
      gpuops.cluster.write_objects: {objects: "{{ objects }}", default_name: node-1, dest: "{{ out }}/new"}
      register: again
    - name: Nothing to write still makes the directory
      gpuops.cluster.write_objects: {dest: "{{ out }}/empty"}
      register: empty
    - name: Check mode
      gpuops.cluster.write_objects: {objects: "{{ objects }}", default_name: node-1, dest: "{{ out }}/checked"}
      check_mode: true
      register: checked
    - name: A private file (0640) in a directory the action makes (0750), its parent made too (0750)
      gpuops.cluster.write_objects: {files: {sub/plan.json: "{}"}, dest: "{{ out }}/private/run", mode: "0640"}
    - name: Its mode loosened by hand
      ansible.builtin.file: {path: "{{ out }}/private/run/sub/plan.json", mode: "0644"}
    - name: The same content again, the mode set back
      gpuops.cluster.write_objects: {files: {sub/plan.json: "{}"}, dest: "{{ out }}/private/run", mode: "0640"}
      register: remoded
    - name: A mode that is not octal
      gpuops.cluster.write_objects: {dest: "{{ out }}/bad", mode: 0640}
      register: bad_mode
      ignore_errors: true
    - name: Results
      ansible.builtin.copy:
        content: "{{ {'first': first, 'again': again, 'empty': empty, 'checked': checked, 'remoded': remoded,
                     'bad_mode': bad_mode} | to_json }}"
        dest: "{{ out }}/results.json"
        mode: "0644"
"""


def test_the_action_writes_once_makes_its_directory_and_writes_nothing_in_check_mode(tmp_path) -> None:
    """One real ansible-playbook run on localhost."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    command = [str(Path(sys.executable).with_name("ansible-playbook")), str(playbook), "-e", f"out={tmp_path}"]
    run = subprocess.run(command, env=playbook_env(cache="memory"), capture_output=True, text=True, check=False,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    names = ["configmap-c.yaml", "kubeletconfiguration-node-1.yaml"]
    assert results["first"]["changed"] is True
    assert sorted(Path(p).name for p in results["first"]["written"]) == names
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == names, "no temporary file is left"
    assert oct((tmp_path / "new" / names[0]).stat().st_mode & 0o777) == "0o644"
    assert (results["again"]["changed"], results["again"]["written"]) == (False, [])
    assert results["empty"]["changed"] is True
    assert (tmp_path / "empty").is_dir()
    assert results["checked"]["changed"] is True
    assert len(results["checked"]["written"]) == len(names)
    assert not (tmp_path / "checked").exists(), "check mode writes nothing"
    private = tmp_path / "private" / "run"
    made = (private.parent, private, private / "sub")
    assert [oct(path.stat().st_mode & 0o777) for path in made] == ["0o750", "0o750", "0o750"]
    assert oct((private / "sub" / "plan.json").stat().st_mode & 0o777) == "0o640"
    assert results["remoded"]["written"] == [str(private / "sub" / "plan.json")]
    assert results["bad_mode"]["failed"] is True
    assert "mode '416' is not a quoted octal file mode" in results["bad_mode"]["msg"], "unquoted 0640 is 416"
    assert not (tmp_path / "bad").exists()
