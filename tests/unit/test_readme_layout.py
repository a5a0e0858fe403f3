"""README.md's layout table names every Molecule scenario and every test folder that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def layout_rows() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Repository layout", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def folders(parent: str) -> list[str]:
    return sorted(p.name for p in (REPO / parent).iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


@pytest.mark.parametrize("scenario", [s for s in folders("molecule") if s != "resources"])
def test_every_molecule_scenario_is_in_the_layout(scenario):
    row = next((line for line in layout_rows().splitlines() if line.startswith("| `molecule/`")), "")
    assert re.search(rf"`{scenario}`", row), f"README layout: the molecule/ row does not name `{scenario}`"


@pytest.mark.parametrize("folder", folders("tests"))
def test_every_test_folder_is_in_the_layout(folder):
    assert f"`tests/{folder}/`" in layout_rows(), f"README layout: no row names `tests/{folder}/`"
