"""No role reads another role's files, and nothing shipped reads the test scenarios (private variables:
test_role_private_vars.py).

A role that reaches into ``role_path ~ '/../<other>'`` breaks when the roles are installed apart and hides a
dependency its argument spec does not declare; shared data is passed in as a parameter (the monitoring assets come
from the lookup gpuops.cluster.monitoring_assets). Shipped playbooks must not include files from molecule/, nor
build a path into roles/ or plugins/ or to a playbook file (``lookup('file', playbook_dir ~ '/../roles/x/defaults/
main.yml')``): a playbook gets a role's settings by listing the role, and a module is called, not looked for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
OTHER_ROLE = re.compile(r"role_path\W[^\n]*\.\.|\.\./(?:\.\./)*(?:roles/)?(" + "|".join(map(re.escape, ROLES)) + r")/")
MOLECULE = re.compile(r"(?:\.\./|\bplaybook_dir\W[^\n]*)molecule/")
PART_PATH = re.compile(r"(?:\.\./|\bplaybook_dir\W[^\n]*/)(?:roles|plugins)/|\bplaybook_dir\W[^\n]*\.ya?ml\b")


def reaches(text: str, own: str | None) -> list[str]:
    """Lines of ``text`` that reach into another role (not ``own``) or up out of the role through role_path."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in OTHER_ROLE.finditer(line):
            if match.group(1) != own:
                found.append(f"line {number}: {line.strip()}")
                break
    return found


def role_files(role: str) -> list[Path]:
    return [p for p in sorted((REPO / "roles" / role).rglob("*"))
            if p.is_file() and p.suffix in {".yml", ".yaml", ".j2", ".py"} and "files" not in p.parts]


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_only_its_own_files(role: str) -> None:
    found = {str(path.relative_to(REPO)): hits for path in role_files(role)
             if (hits := reaches(path.read_text(encoding="utf-8"), role))}
    assert found == {}, f"{role} reads another role's files; pass them in as a parameter instead: {found}"


def test_shipped_playbooks_do_not_include_molecule_files() -> None:
    found = [f"{path.relative_to(REPO)}: {line.strip()}" for path in sorted((REPO / "playbooks").rglob("*.yml"))
             for line in path.read_text(encoding="utf-8").splitlines() if MOLECULE.search(line)]
    assert found == []


def part_paths(text: str) -> list[str]:
    """Lines (not comments) of a playbook file that build a path into roles/, plugins/ or to a playbook."""
    return [f"line {number}: {line.strip()}" for number, line in enumerate(text.splitlines(), start=1)
            if not line.lstrip().startswith("#") and PART_PATH.search(line)]


def test_shipped_playbooks_do_not_read_role_plugin_or_playbook_files() -> None:
    found = {str(path.relative_to(REPO)): hits
             for path in sorted([*(REPO / "playbooks").rglob("*.yml"), REPO / "site.yml"])
             if (hits := part_paths(path.read_text(encoding="utf-8")))}
    assert found == {}, f"a playbook reads another part's files by path; list the role or call the module: {found}"


def test_part_paths_can_fail() -> None:
    assert part_paths('x: "{{ playbook_dir }}/../roles/validate/defaults/main.yml"')
    assert part_paths("x: \"{{ lookup('ansible.builtin.file', playbook_dir ~ '/validate.yml') }}\"")
    assert part_paths("- (playbook_dir ~ '/../plugins/modules/gpu_health.py') is file")
    assert not part_paths('render_dir: "{{ playbook_dir }}/../build/render"')
    assert not part_paths("ansible.builtin.include_tasks: ../playbooks/tasks/node_container.yml")
    assert not part_paths("# see playbook_dir ~ '/../roles/validate'")


def test_reaches_can_fail() -> None:
    assert reaches("src: \"{{ role_path }}/../monitoring_assets/files\"", "kube_monitoring")
    assert reaches("lookup('file', '../../compose_stack/files/x')", "kube_monitoring")
    assert reaches("lookup('file', '../roles/compose_stack/x')", None)
    assert not reaches("paths: [\"{{ role_path }}/vars\"]", "nvidia_driver")
    assert not reaches("dir=kube_monitoring_assets_dir", "kube_monitoring")
    assert MOLECULE.search("include_tasks: ../molecule/resources/node.yml")
    assert not MOLECULE.search("# molecule/resources/create.yml also uses it")
