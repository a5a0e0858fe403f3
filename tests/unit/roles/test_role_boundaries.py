"""No role reads another role's files or private variables, and nothing shipped reads the test scenarios.

A role that reaches into ``role_path ~ '/../<other>'`` breaks when the roles are installed apart and hides a
dependency its argument spec does not declare; shared data is passed in as a parameter (the monitoring assets come
from the lookup gpuops.cluster.monitoring_assets). Shipped playbooks must not include files from molecule/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
OTHER_ROLE = re.compile(r"role_path\W[^\n]*\.\.|\.\./(?:\.\./)*(?:roles/)?(" + "|".join(map(re.escape, ROLES)) + r")/")
# _<role>_* (vars/, set_fact) and __<role>_* (registered) belong to <role>; an internal role's own are _<name>_* too.
PRIVATE = re.compile(
    r"(?<![A-Za-z0-9_])_{1,2}("
    + "|".join(map(re.escape, sorted({r.lstrip("_") for r in ROLES}, key=len, reverse=True)))
    + r")_[a-z0-9_]+"
)
MOLECULE = re.compile(r"(?:\.\./|\bplaybook_dir\W[^\n]*)molecule/")


def reaches(text: str, own: str | None) -> list[str]:
    """Lines of ``text`` that reach into another role (not ``own``) or up out of the role through role_path."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in OTHER_ROLE.finditer(line):
            if match.group(1) != own:
                found.append(f"line {number}: {line.strip()}")
                break
    return found


def private_reads(text: str, own: str) -> list[str]:
    """Another role's private variables (``_<role>_*``, ``__<role>_*``) named in ``text`` of role ``own``."""
    own = own.lstrip("_")
    return [f"line {number}: {match.group(0)}" for number, line in enumerate(text.splitlines(), start=1)
            for match in PRIVATE.finditer(line) if match.group(1) != own]


def role_files(role: str) -> list[Path]:
    return [p for p in sorted((REPO / "roles" / role).rglob("*"))
            if p.is_file() and p.suffix in {".yml", ".yaml", ".j2", ".py"} and "files" not in p.parts]


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_only_its_own_files(role: str) -> None:
    found = {str(path.relative_to(REPO)): hits for path in role_files(role)
             if (hits := reaches(path.read_text(encoding="utf-8"), role))}
    assert found == {}, f"{role} reads another role's files; pass them in as a parameter instead: {found}"


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_no_other_roles_private_variables(role: str) -> None:
    found = {str(path.relative_to(REPO)): hits for path in role_files(role)
             if (hits := private_reads(path.read_text(encoding="utf-8"), role))}
    assert found == {}, f"{role} reads another role's private variables; pass the value as a parameter: {found}"


def test_private_reads_can_fail() -> None:
    assert private_reads("taints: {{ _kube_node_registration.taints }}", "kube_join") == [
        "line 1: _kube_node_registration"]
    assert private_reads("x: \"{{ __kube_control_plane_objects }}\"", "kube_join")
    assert not private_reads("x: {{ _kube_join_token }} {{ __kube_join_ca }}", "kube_join")
    assert not private_reads("register: __kube_apply_helm", "_kube_apply")
    assert not private_reads("kube_join_node_registration: {{ kube_node_registration }}", "kube_join")


def test_shipped_playbooks_do_not_include_molecule_files() -> None:
    found = [f"{path.relative_to(REPO)}: {line.strip()}" for path in sorted((REPO / "playbooks").rglob("*.yml"))
             for line in path.read_text(encoding="utf-8").splitlines() if MOLECULE.search(line)]
    assert found == []


def test_reaches_can_fail() -> None:
    assert reaches("src: \"{{ role_path }}/../monitoring_assets/files\"", "kube_monitoring")
    assert reaches("lookup('file', '../../compose_stack/files/x')", "kube_monitoring")
    assert reaches("lookup('file', '../roles/compose_stack/x')", None)
    assert not reaches("paths: [\"{{ role_path }}/vars\"]", "nvidia_driver")
    assert not reaches("dir=kube_monitoring_assets_dir", "kube_monitoring")
    assert MOLECULE.search("include_tasks: ../molecule/resources/node.yml")
    assert not MOLECULE.search("# molecule/resources/create.yml also uses it")
