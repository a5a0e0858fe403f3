"""docs/roles/<role>.md: the generated block matches roles/<role>/meta/argument_specs.yml (run `make docs`)."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
gen = SourceFileLoader("gen_role_docs", str(REPO / "scripts" / "gen-role-docs")).load_module()


@pytest.mark.parametrize("role", gen.roles())
def test_committed_page_is_what_the_generator_writes(role):
    path = gen.page_path(role)
    assert path.exists(), f"{role}: no docs/roles/{role}.md. Fix: make docs, then commit it"
    current = path.read_text()
    assert current == gen.expected_page(role, current), (
        f"{role}: docs/roles/{role}.md differs from roles/{role}/meta/argument_specs.yml. Fix: make docs, then commit"
    )


def test_every_role_has_a_spec_and_a_page():
    with_tasks = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert with_tasks == gen.roles(), "a role without meta/argument_specs.yml has no generated page"


def test_a_changed_spec_makes_the_page_stale():
    role = "docker_engine"
    current = gen.page_path(role).read_text()
    edited = current.replace("| `docker_engine_hold` | bool | `true` |", "| `docker_engine_hold` | bool | `false` |")
    assert edited != current
    assert gen.expected_page(role, edited) == current


def test_hand_written_prose_around_the_block_is_kept():
    role = "docker_engine"
    current = gen.page_path(role).read_text()
    page = "# Title\n\nprose before\n\n" + gen.BEGIN + "\nold table\n" + gen.END + "\n\nprose after\n"
    out = gen.expected_page(role, page)
    assert out.startswith("# Title\n\nprose before\n\n")
    assert out.endswith(gen.END + "\n\nprose after\n")
    assert "old table" not in out
    assert "| `docker_engine_hold` |" in out
    assert gen.BEGIN in current


def test_markup_becomes_markdown():
    assert gen.markup("O(a=b), C(x|y), V(1), B(bold), I(it), M(gpuops.cluster.gpu_facts) <z>", "r", "main") == [
        "`a=b`, `x|y`, `1`, **bold**, *it*, `gpuops.cluster.gpu_facts` &lt;z&gt;"
    ]


def test_committed_module_pages_are_what_the_generator_writes(capsys):
    rc = gen.main(["--check", *gen.modules()])
    assert rc == 0, capsys.readouterr().err
