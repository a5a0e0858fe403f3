# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Action gpuops.cluster.preflight: ONE remote call (gpu_facts with OS facts and probes), then the host's
rules in-process on the controller (plugin_utils/preflight.py). Documented in plugins/modules/preflight.py."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import ReadOnceHost, get_var
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import platform_request as inventory_request
from ansible_collections.gpuops.cluster.plugins.plugin_utils.preflight import (
    ARGUMENT_SPEC,
    host_checks,
    nfs_targets,
)

GATHER_MODULE = "gpuops.cluster.gpu_facts"
# The OS facts of gpu_host.os that setup gives under the same name and meaning: carried into the host's ansible_facts,
# so the inputs pass (playbooks/tasks/inputs.yml) runs no setup on a host read here. Not _ansible_facts_gathered: a
# later play's gather_facts (gathering = smart) still gathers every fact.
SETUP_OS_FACTS = ("distribution", "distribution_version", "distribution_major_version", "distribution_release",
                  "os_family", "kernel", "architecture")
# The options read from the variable that holds the fact where the task gives none: the driver pin, the CUDA release,
# the team's GPUs (checked as a whole by the gpuops_* check before this) and the datasets compose_stack mounts.
HOST_OPTIONS = {"driver_version": "nvidia_driver_version", "cuda_version": "gpuops_cuda_version",
                "gpu_assignments": "gpuops_members", "nfs_datasets": "compose_stack_datasets"}


def spec_options(path: str) -> dict:
    """The options of a role's main entry point in its meta/argument_specs.yml, as Ansible's implicit role
    validation reads them. Read once per task: each host's task runs in a freshly forked worker."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=loader)["argument_specs"]["main"]["options"]


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def _role_variables(self, spec_file: str, task_vars: dict) -> tuple[dict | None, dict]:
        """Ansible's implicit role validation, done here (the module's role_argument_spec option says why).
        Returns a failed result or None, and the role's variables as templated (each once) and checked."""
        options = spec_options(spec_file)
        provided = self._templar.template({name: task_vars[name] for name in options if name in task_vars})
        checked = ArgumentSpecValidator(options).validate(provided, validate_role_argument_spec=True)
        errors = checked.error_messages
        if not errors:
            return None, {name: checked.validated_parameters[name] for name in provided}
        role_dir = Path(spec_file).parents[1]  # roles/<role>/meta/argument_specs.yml
        return {
            "failed": True,
            "msg": "Validation of arguments failed:\n" + "\n".join(errors),
            "argument_errors": errors,
            "validate_args_context": {"type": "role", "name": role_dir.name, "argument_spec_name": "main",
                                      "path": str(role_dir)},
        }, provided

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        spec_file = self._task.args.pop("role_argument_spec", None)
        from_role = {}
        if spec_file:
            refused, role_vars = self._role_variables(str(spec_file), task_vars or {})
            if refused:
                result.update(refused)
                return result
            prefix = Path(str(spec_file)).parents[1].name + "_"
            for name, value in role_vars.items():
                option = name[len(prefix):] if name.startswith(prefix) else None
                if option in ARGUMENT_SPEC and self._task.args.get(option) is None and value is not None:
                    from_role[option] = value
        # An option not given is the host's inventory variable (platform.platform_request, HOST_OPTIONS), each
        # templated once: hostvars[inventory_hostname] in the task's arguments cost a full variable merge per reference.
        host_vars = ReadOnceHost(task_vars or {}, self._templar, frozenset())
        inventory = {**inventory_request(host_vars), **{o: get_var(host_vars, n) for o, n in HOST_OPTIONS.items()}}
        for key, value in inventory.items():
            if self._task.args.get(key) is None and value is not None:
                self._task.args[key] = value
        _validation, plan = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        plan.update(from_role)
        targets = nfs_targets(plan["nfs_datasets"])
        gather_args = {
            "topology": plan["topology"],
            "os_facts": True,
            "free_space_paths": [str(item.get("path")) for item in plan["free_space"] if item.get("path")],
            "tcp_probes": [{"host": t["host"], "port": t["port"]} for t in targets],
            "probe_timeout": plan["probe_timeout"],
        }
        try:
            gathered = self._execute_module(module_name=GATHER_MODULE, module_args=gather_args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        for key in ("warnings", "deprecations"):
            if gathered.get(key):
                result[key] = gathered[key]
        if gathered.get("failed") or "ansible_facts" not in gathered:
            result.update(failed=True, msg=f"{GATHER_MODULE} failed: {gathered.get('msg', gathered)}")
            return result
        facts = gathered["ansible_facts"]
        gpu = facts.get("gpu") or {}
        host = facts.get("gpu_host") or {}
        os_facts = host.get("os") or {}
        judged = host_checks(
            plan,
            {
                "os": {"distribution": os_facts.get("distribution"), "version": os_facts.get("distribution_version")},
                "gpu": gpu,
                "host": host,
                "name": (task_vars or {}).get("inventory_hostname"),
                # A topology the inventory declares satisfies the topology rule (plan.host_part uses it).
                "declared_topology": host_vars.get("gpuops_gpu_topology"),
            },
        )
        # An OS outside host_facts' table (no os_family), which setup names otherwise: none carried, the inputs pass
        # runs setup. A null (an EL host's release: setup reads it from VERSION's parentheses) is not carried.
        if os_facts.get("os_family"):
            facts = {**facts, **{key: os_facts[key] for key in SETUP_OS_FACTS if os_facts.get(key) is not None}}
        result.update(
            changed=False,
            ansible_facts=facts,
            preflight={**judged, "plan": plan},
        )
        return result
