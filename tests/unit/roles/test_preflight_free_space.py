"""preflight's free-space check measures the data folders the run will use: compose_stack_data_dir and
docker_engine_data_root as the inventory sets them (inventories/small-team puts Docker's on /srv/docker), else their
one home's defaults (roles/_gpuops_vars; test_one_home_for_defaults fails on a default written anywhere else). A
literal /var/lib/docker measured the root filesystem wherever the inventory moved Docker's data."""

from __future__ import annotations

from pathlib import Path

import jinja2
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"


def _paths(**variables) -> list[str]:
    entries = yaml.safe_load((ROLES / "preflight" / "defaults" / "main.yml").read_text())["preflight_free_space"]
    environment = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    return [environment.from_string(entry["path"]).render(**variables) for entry in entries]


def test_the_free_space_check_measures_the_inventorys_data_folders():
    assert _paths(compose_stack_data_dir="/data/gpuops", docker_engine_data_root="/srv/docker") == [
        "/data/gpuops", "/srv/docker"]


def test_unset_they_are_the_shared_defaults():
    shared = yaml.safe_load((ROLES / "_gpuops_vars" / "defaults" / "main.yml").read_text())
    assert _paths(**shared) == [shared["compose_stack_data_dir"], shared["docker_engine_data_root"]]
