"""preflight action: the role's variables checked against the role's argument spec (role_argument_spec), as
Ansible's implicit role validation checks them; the platform options not given come from the host's variables,
through the platform rule's one mapping (plugin_utils/platform.py), templated and validated like given ones; a given
option wins.

The remote call (gpu_facts) is replaced by a canned answer shaped like gpu_facts' RETURN on a host without GPUs:
what is tested is the action's own argument handling, not the facts."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.loader import cache_loader
from ansible.template import Templar, trust_as_template
from ansible.vars.manager import VariableManager
from ansible_collections.gpuops.cluster.plugins.action.preflight import ActionModule, spec_options
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import ARGUMENT_SPEC

NO_GPU_FACTS = {
    "ansible_facts": {
        "gpu": {"count": 0, "gpus": [], "driver_version": None, "topology": None},
        "gpu_host": {"os": {"distribution": "Debian", "distribution_version": "12"}},
    },
}


ROLE = Path(__file__).resolve().parents[4] / "roles" / "preflight"
ROLE_SPEC = ROLE / "meta" / "argument_specs.yml"
ROLE_DEFAULTS = ROLE / "defaults" / "main.yml"
SHARED_DEFAULTS = ROLE.parent / "_gpuops_vars" / "defaults" / "main.yml"


def _role_vars(host_vars: dict) -> dict:
    """The host's variables as the role's task sees them: the shared gpuops_* defaults (role _gpuops_vars, which
    the play imports first), the role's defaults (templates trusted, as read from the role's file), then the host's
    own."""
    defaults = {**yaml.safe_load(SHARED_DEFAULTS.read_text()), **yaml.safe_load(ROLE_DEFAULTS.read_text())}
    trusted = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in defaults.items()}
    return {**trusted, **host_vars}


def _action(args: dict, host_vars: dict) -> ActionModule:
    task = Task.load({"action": "gpuops.cluster.preflight"})
    task.args = dict(args)  # as the executor hands them over: templated
    loader = DataLoader()
    return ActionModule(task, mock.MagicMock(), PlayContext(), loader, Templar(loader, variables=host_vars), None)


def _run(args: dict, host_vars: dict) -> dict:
    with mock.patch.object(ActionModule, "_execute_module", return_value=NO_GPU_FACTS), \
         mock.patch.object(ActionModule, "_remove_tmp_path"):
        return _action(args, host_vars).run(task_vars=host_vars)


def _request(args: dict, host_vars: dict) -> dict:
    """The platform rule's inputs in the judged plan, which preflight_fleet decides the fleet's platform from."""
    plan = _run(args, host_vars)["preflight"]["plan"]
    return {key: plan[key] for key in ("platform", "team_size", "gpu_count", "multi_node_training")}


def test_platform_inputs_come_from_the_host_vars() -> None:
    host = {"gpuops_platform": "compose", "gpuops_gpu_count": 4, "gpuops_multi_node_training": True,
            "gpuops_members": [{"name": "alice"}, {"name": "bob"}]}
    assert _request({}, host) == {"platform": "compose", "team_size": 2, "gpu_count": 4,
                                  "multi_node_training": True}


def test_unset_everywhere_gives_the_defaults() -> None:
    assert _request({}, {}) == {"platform": "auto", "team_size": None, "gpu_count": None,
                                "multi_node_training": False}


def test_templated_host_vars_are_rendered() -> None:
    # trusted, as a template read from an inventory file is
    people = 7
    host = {"site_people": people, "gpuops_team_size": trust_as_template("{{ site_people }}")}
    assert _request({}, host)["team_size"] == people


def test_a_given_option_wins_over_the_host_vars() -> None:
    host = {"gpuops_team_size": 12, "gpuops_platform": "kubernetes"}
    request = _request({"team_size": 3, "platform": "auto"}, host)
    assert (request["team_size"], request["platform"]) == (3, "auto")


def test_a_bad_host_var_is_refused_by_the_options_spec() -> None:
    refused = "value of platform must be one of: auto, compose, kubernetes, got: slurm"
    with pytest.raises(AnsibleActionFail, match=refused):
        _run({}, {"gpuops_platform": "slurm"})


def test_spec_options_are_the_roles_main_entry_point() -> None:
    spec = yaml.safe_load(ROLE_SPEC.read_text())["argument_specs"]["main"]["options"]
    assert spec_options(str(ROLE_SPEC)) == spec
    assert "preflight_probe_timeout" in spec


@pytest.mark.parametrize(("host", "named"), [
    ({"preflight_topology_required": "maybe"}, "preflight_topology_required"),
    ({"preflight_probe_timeout": "soon"}, "preflight_probe_timeout"),
    ({"preflight_free_space": "lots"}, "preflight_free_space"),
])
def test_a_bad_role_variable_is_refused_first_naming_it(host: dict, named: str) -> None:
    host_vars = _role_vars(host)
    with mock.patch.object(ActionModule, "_execute_module") as gather:
        result = _action({"role_argument_spec": str(ROLE_SPEC)}, host_vars).run(task_vars=host_vars)
    assert result["failed"] is True
    assert result["msg"].startswith("Validation of arguments failed:")
    assert any(named in error for error in result["argument_errors"])
    # named as Ansible's own role validation names it: the role and its folder
    assert result["validate_args_context"] == {"type": "role", "name": "preflight", "argument_spec_name": "main",
                                               "path": str(ROLE_SPEC.parents[1])}
    gather.assert_not_called()  # nothing ran on the host


def test_role_variables_are_templated_before_the_check() -> None:
    host = {"site_timeout": 5, "preflight_probe_timeout": trust_as_template("{{ site_timeout }}")}
    result = _run({"role_argument_spec": str(ROLE_SPEC)}, _role_vars(host))
    assert "failed" not in result
    assert "role_argument_spec" not in result["preflight"]["plan"]


def test_without_a_spec_the_role_variables_are_not_read() -> None:
    assert "failed" not in _run({}, {"preflight_topology_required": "maybe"})


def test_options_not_given_are_the_role_variables_as_checked() -> None:
    host = {"site_timeout": 5, "preflight_probe_timeout": trust_as_template("{{ site_timeout }}"),
            "preflight_free_space": [{"path": "/data", "min_free": "1G"}]}
    plan = _run({"role_argument_spec": str(ROLE_SPEC)}, _role_vars(host))["preflight"]["plan"]
    assert (plan["probe_timeout"], plan["free_space"]) == (5.0, host["preflight_free_space"])
    assert (plan["driver_version"], plan["cuda_version"]) == ("", "")  # neither variable is set


def test_the_driver_cuda_and_datasets_are_read_where_they_are_kept() -> None:
    """No preflight_* copy: the driver pin, the CUDA release and the datasets are the host's nvidia_driver_version,
    gpuops_cuda_version and compose_stack_datasets, templated and validated by the action's spec."""
    datasets = [{"name": "imagenet", "src": "nas:/export/imagenet", "fstype": "nfs4"}]
    host = {"site_cuda": "12.4", "gpuops_cuda_version": trust_as_template("{{ site_cuda }}"),
            "nvidia_driver_version": "550.90.07", "compose_stack_datasets": datasets}
    plan = _run({"role_argument_spec": str(ROLE_SPEC)}, _role_vars(host))["preflight"]["plan"]
    assert (plan["cuda_version"], plan["driver_version"], plan["nfs_datasets"]) == ("12.4", "550.90.07", datasets)
    with pytest.raises(AnsibleActionFail, match="nfs_datasets"):
        _run({}, {"compose_stack_datasets": "nas:/export"})


def test_the_role_variables_are_validated_once_by_the_roles_spec() -> None:
    """The role's spec checked preflight_*; the action's options spec then sees only the options given and the
    inventory's platform inputs, never the role's variables a second time."""
    host = {"preflight_topology_required": False, "preflight_probe_timeout": 5}
    seen = []
    validate = ActionModule.validate_argument_spec

    def spy(self, argument_spec=None, **kwargs):
        seen.append(dict(self._task.args))
        return validate(self, argument_spec=argument_spec, **kwargs)

    with mock.patch.object(ActionModule, "validate_argument_spec", spy):
        plan = _run({"role_argument_spec": str(ROLE_SPEC)}, _role_vars(host))["preflight"]["plan"]
    assert (plan["topology_required"], plan["probe_timeout"]) == (False, 5.0)
    assert len(seen) == 1
    assert not {"topology_required", "probe_timeout"} & set(seen[0]), seen[0]


def test_a_given_option_wins_over_the_role_variable() -> None:
    plan = _run({"role_argument_spec": str(ROLE_SPEC), "cuda_version": "12.4"}, _role_vars({}))["preflight"]["plan"]
    assert plan["cuda_version"] == "12.4"


def test_every_role_variable_is_an_option_or_read_by_the_fleet_task() -> None:
    # The role's task passes no option: a preflight_<name> that is neither an option of the action nor read by the
    # fleet step would be checked and then silently unused.
    fleet_tasks = (ROLE / "tasks" / "fleet.yml").read_text()
    unused = [name for name in spec_options(str(ROLE_SPEC))
              if name.removeprefix("preflight_") not in ARGUMENT_SPEC and name not in fleet_tasks]
    assert unused == []


def test_the_roles_gather_task_passes_only_its_spec() -> None:
    # each option given as "{{ preflight_<name> }}" would be templated twice per host (the executor, then the check)
    tasks = yaml.safe_load((ROLE / "tasks" / "gather.yml").read_text())
    assert tasks[0]["gpuops.cluster.preflight"] == {"role_argument_spec": "{{ role_path }}/meta/argument_specs.yml"}


# A GPU seen whose topology gpu_facts was asked for and could not read (topology_error, as gpu_facts sets it; the
# error text is the one the H200 run on driver 580 reported), on a compose host.
UNREAD_TOPOLOGY_FACTS = {
    "ansible_facts": {
        "gpu": {"count": 1, "gpus": [{"index": 0, "name": "NVIDIA H200"}], "driver_version": "580.159.04",
                "topology": None,
                "topology_error": {"command": "nvidia-smi topo -m", "error": "no `nvidia-smi topo -m` matrix found"}},
        "gpu_host": {"os": {"distribution": "Debian", "distribution_version": "12.7"}},
    },
}


def _run_unread(host_vars: dict) -> dict:
    host_vars = {"inventory_hostname": "h200-01", **_role_vars(host_vars)}
    with mock.patch.object(ActionModule, "_execute_module", return_value=UNREAD_TOPOLOGY_FACTS), \
         mock.patch.object(ActionModule, "_remove_tmp_path"):
        return _action({"role_argument_spec": str(ROLE_SPEC)}, host_vars).run(task_vars=host_vars)


def _topology_check(result: dict) -> dict:
    return next(c for c in result["preflight"]["checks"] if c["name"] == "topology")


def test_unread_topology_is_refused_naming_the_inventory_host() -> None:
    check = _topology_check(_run_unread({}))
    assert (check["ok"], check["status"]) == (False, "failed")
    assert check["msg"].startswith("h200-01: 1 GPU(s) seen, but their topology could not be read from `nvidia-smi")


def test_the_role_variable_turns_the_refusal_into_a_warning() -> None:
    result = _run_unread({"preflight_topology_required": False})
    assert result["preflight"]["plan"]["topology_required"] is False
    assert _topology_check(result)["status"] == "warn"


def test_a_topology_declared_for_the_host_satisfies_the_rule() -> None:
    declared = {"numa_groups": [{"numa_node": 0, "gpus": [0], "cpus": "0-15"}]}
    check = _topology_check(_run_unread({"gpuops_gpu_topology": declared}))
    assert (check["ok"], check["status"]) == (True, "ok")
    assert "gpuops_gpu_topology" in check["msg"]


def test_no_pin_judges_the_running_driver() -> None:
    result = _run_unread({"gpuops_cuda_version": "13.0"})
    assert result["preflight"]["driver_judged"] == {"version": "580.159.04", "source": "running"}


def test_the_fleet_sets_no_fact() -> None:
    """A fact outranks a role default: a fact named like a preflight_* variable (preflight_report_dir, once) made the
    next run, with the fact cache on, take the last run's folder as its report folder. The fleet action sets none:
    what it decided is the plan (gpuops_plan: platform, report_dir), which the role sets with set_fact (not cached);
    preflight_run_dir and preflight_result, which repeated it, are retired."""
    source = (ROLE.parents[1] / "plugins" / "action" / "preflight_fleet.py").read_text()
    assert "ansible_facts=" not in source
    assert "preflight_run_dir" not in source
    assert "preflight_result" not in source


# gpu_host.os as gpu_facts read it in a gpuops/debian12-systemd container (the bad-input node's image), where setup
# (min and all) gave the same seven values.
DEBIAN12_OS = {"distribution": "Debian", "distribution_version": "12.15", "distribution_major_version": "12",
               "distribution_release": "bookworm", "os_family": "Debian", "kernel": "6.18.44-fc-v1272",
               "architecture": "x86_64", "secure_boot": False, "memtotal_mb": 24105, "processor_vcpus": 2}
INPUTS = ROLE.parents[1] / "playbooks" / "tasks" / "inputs.yml"


def _facts_with_os(os_facts: dict) -> dict:
    answer = {"ansible_facts": {**NO_GPU_FACTS["ansible_facts"], "gpu_host": {"os": os_facts}}}
    with mock.patch.object(ActionModule, "_execute_module", return_value=answer), \
         mock.patch.object(ActionModule, "_remove_tmp_path"):
        return _action({}, {}).run(task_vars={})["ansible_facts"]


def _inputs_run_setup(facts: dict) -> bool:
    """Whether the inputs pass's setup task runs on a host with these facts (its `when`, as Ansible evaluates it)."""
    task = next(t for t in yaml.safe_load(INPUTS.read_text()) if "ansible.builtin.setup" in t)
    loader = DataLoader()
    return Templar(loader, variables={"ansible_facts": facts}).evaluate_conditional(trust_as_template(task["when"]))


def test_the_os_facts_are_set_under_setups_names_and_the_inputs_pass_runs_no_setup() -> None:
    facts = _facts_with_os(DEBIAN12_OS)
    carried = {key: value for key, value in DEBIAN12_OS.items() if key in facts}
    assert carried == {key: DEBIAN12_OS[key] for key in ("distribution", "distribution_version",
                                                         "distribution_major_version", "distribution_release",
                                                         "os_family", "kernel", "architecture")}
    assert facts["gpu_host"]["os"] == DEBIAN12_OS
    assert _inputs_run_setup(facts) is False
    assert _inputs_run_setup({"gpu": facts["gpu"], "gpu_host": facts["gpu_host"]}) is True  # the host's facts before


def test_an_os_named_otherwise_than_setup_names_it_is_left_to_setup() -> None:
    # an ID outside host_facts' table: its NAME, no os_family (setup would say Archlinux, os_family Archlinux)
    facts = _facts_with_os({**DEBIAN12_OS, "distribution": "Arch Linux", "os_family": None})
    assert not {"distribution", "os_family", "kernel"} & set(facts)
    assert _inputs_run_setup(facts) is True
    # an EL host's release, which gpu_facts does not read (setup: VERSION's parentheses, "Plow"): not set as null
    facts = _facts_with_os({**DEBIAN12_OS, "distribution": "RedHat", "os_family": "RedHat",
                            "distribution_version": "9.4", "distribution_major_version": "9",
                            "distribution_release": None})
    assert (facts["distribution"], "distribution_release" in facts) == ("RedHat", False)


def test_the_os_facts_do_not_stop_a_later_plays_gather() -> None:
    """gathering = smart gathers unless the host's cached facts say _ansible_facts_gathered, which only the
    gather_facts action sets: with preflight's facts a later play (gather_facts: true) still gathers all of them
    (kube_control_plane's advertise address reads default_ipv4, which neither preflight nor setup min gives)."""
    manager = VariableManager(loader=DataLoader())
    manager._fact_cache = cache_loader.get("memory")  # never the jsonfile cache
    manager.set_host_facts("gpu-01", _facts_with_os(DEBIAN12_OS))
    assert manager._facts_gathered_for_host("gpu-01") is False  # the play iterator's own test
    manager.set_host_facts("gpu-01", {"_ansible_facts_gathered": True})  # as gather_facts leaves them
    assert manager._facts_gathered_for_host("gpu-01") is True
