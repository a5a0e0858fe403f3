"""preflight's free-space check measures the data folders the run will use: compose_stack_data_dir and
docker_engine_data_root as the inventory sets them (inventories/small-team puts Docker's on /srv/docker), else their
roles' defaults. A literal /var/lib/docker measured the root filesystem wherever the inventory moved Docker's data."""

from __future__ import annotations

from pathlib import Path

import jinja2
import yaml
from ansible.parsing.yaml.loader import AnsibleLoader

ROLES = Path(__file__).resolve().parents[3] / "roles"
SETTINGS = {"compose_stack_data_dir": "compose_stack", "docker_engine_data_root": "docker_engine"}  # name -> its role


def _role_default(role: str, name: str) -> str:
    return AnsibleLoader((ROLES / role / "defaults" / "main.yml").read_text()).get_single_data()[name]


def _paths(**variables) -> list[str]:
    entries = yaml.safe_load((ROLES / "preflight" / "defaults" / "main.yml").read_text())["preflight_free_space"]
    return [jinja2.Environment(autoescape=False).from_string(entry["path"]).render(**variables) for entry in entries]


def test_the_free_space_check_measures_the_inventorys_data_folders():
    assert _paths(compose_stack_data_dir="/data/gpuops", docker_engine_data_root="/srv/docker") == [
        "/data/gpuops", "/srv/docker"]


def test_unset_they_are_the_roles_defaults():
    assert _paths() == [_role_default(role, name) for name, role in SETTINGS.items()]
