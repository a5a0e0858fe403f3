"""A platform without a play is refused in preflight; the plays say which platforms they serve
(playbooks/vars/run_roles.yml, which preflight_fleet reads)."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.gpuops.cluster.plugins.action.preflight_fleet import _no_play
from ansible_collections.gpuops.cluster.plugins.plugin_utils.os_support import platforms_with_play
from ansible_collections.gpuops.cluster.plugins.plugin_utils.platform import PLATFORMS

PLAYBOOKS = Path(__file__).resolve().parents[4] / "playbooks"


def _run_roles() -> dict:
    return yaml.safe_load((PLAYBOOKS / "vars" / "run_roles.yml").read_text())["_gpuops_run_roles"]


def test_every_platform_run_roles_lists_has_a_play_that_site_yml_imports():
    site = [p["ansible.builtin.import_playbook"] for p in yaml.safe_load((PLAYBOOKS / "site.yml").read_text())]
    platforms = [name for name in _run_roles() if name != "host"]
    assert platforms, "run_roles.yml lists the roles of at least one platform"
    for name in platforms:
        assert name in PLATFORMS, f"run_roles.yml names {name!r}, not a platform of the rule ({PLATFORMS})"
        assert f"{name}.yml" in site, name
        assert (PLAYBOOKS / f"{name}.yml").is_file(), name


def test_preflight_takes_those_platforms_as_the_ones_with_a_play():
    assert platforms_with_play() == [name for name in _run_roles() if name != "host"]


def test_the_preflight_play_skips_the_implicit_validation_only_because_the_action_makes_it():
    """rolespec_validate false is safe only while the role's per-host task asks its action for the role check."""
    play, _inputs = yaml.safe_load((PLAYBOOKS / "preflight.yml").read_text())
    [task] = play["tasks"]
    assert task["ansible.builtin.import_role"]["rolespec_validate"] is False
    [gather] = yaml.safe_load((PLAYBOOKS.parent / "roles" / "preflight" / "tasks" / "gather.yml").read_text())
    assert gather["gpuops.cluster.preflight"]["role_argument_spec"] == "{{ role_path }}/meta/argument_specs.yml"


def test_no_play_message_names_the_platform_and_the_fix():
    decision = _no_play({"ok": True, "platform": "kubernetes", "source": "auto", "reason": "24 GPUs"}, ["compose"])
    assert decision["ok"] is False
    assert "the fleet's platform is kubernetes (24 GPUs), but no play applies kubernetes" in decision["reason"]
    assert "set gpuops_platform to compose" in decision["reason"]
