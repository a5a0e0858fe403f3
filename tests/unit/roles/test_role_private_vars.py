"""No role reads another role's private variables.

``_<role>_*`` (internal, vars/ and set_fact) and ``__<role>_*`` (registered) belong to ``<role>``: another role
that reads or sets one depends on internals its argument spec does not declare. A role hands data on through its
public ``<role>_*`` variables or the plan. A private name built at run time (``'__' ~ other ~ '_objects'``) hides
the same dependency from this check, so it counts too unless it names the role's own prefix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
SCANNED = ("tasks", "handlers", "templates", "vars", "defaults")
NAME = re.compile(r"(?<![A-Za-z0-9_])_{1,3}[a-z][a-z0-9_]*")
BUILT = re.compile(r"""(['"])(_{1,3}[a-z0-9_]*)\1\s*[~+]""")  # '__' ~ x, "_kube_" + y
COMMENT = re.compile(r"(?s:\{#.*?#\})|^[ \t]*#[^\n]*|[ \t]#[ \t][^\n]*", re.MULTILINE)


def owner(name: str, roles: list[str]) -> str | None:
    """The role whose private prefix ``name`` carries (the longest role name wins), or None."""
    owners = [role for role in roles if re.match(r"_{1,2}" + re.escape(role) + "_", name)]
    return max(owners, key=len) if owners else None


def foreign_private_names(text: str, role: str, roles: list[str]) -> list[str]:
    """Private names of other roles that ``text`` (a file of ``role``) uses or builds; comments are skipped."""
    text = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keeps the line numbers
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in NAME.finditer(line):
            other = owner(match.group(0), roles)
            if other not in (None, role):
                found.append(f"line {number}: {match.group(0)} ({other}'s)")
        for match in BUILT.finditer(line):
            if owner(match.group(2), roles) != role:
                found.append(f"line {number}: builds a private name from {match.group(0)!r}")
    return found


def role_files(role: str) -> list[Path]:
    base = REPO / "roles" / role
    return [p for part in SCANNED for p in sorted((base / part).rglob("*")) if p.is_file()]


@pytest.mark.parametrize("role", ROLES)
def test_role_reads_no_other_roles_private_variables(role: str) -> None:
    found = {str(path.relative_to(REPO)): hits for path in role_files(role)
             if (hits := foreign_private_names(path.read_text(encoding="utf-8"), role, ROLES))}
    assert found == {}, (
        f"{role} uses another role's private variables: {found}. Fix: the owning role publishes the value as a "
        "public <role>_* variable (or in the plan), and this role takes it as a parameter"
    )


# Playbooks that hand a role's product on read only its documented outputs (<role>_objects, <role>_files,
# compose_stack_review, kube_node_registration, set by the role's render or review entry point) and the plan.
READS_OUTPUTS_ONLY = ["playbooks/render.yml", "playbooks/tasks/render_role.yml"]


@pytest.mark.parametrize("playbook", READS_OUTPUTS_ONLY)
def test_render_reads_no_role_private_variables(playbook: str) -> None:
    text = (REPO / playbook).read_text(encoding="utf-8")
    assert "include_role" in text, f"{playbook} runs no role any more: the check would prove nothing"
    assert foreign_private_names(text, "", ROLES) == [], (
        f"{playbook} reads a role's private results. Fix: read the role's documented output (its render entry "
        "point's <role>_objects) or the plan")


def test_the_check_finds_foreign_names_and_skips_own_and_comments() -> None:
    roles = ["kube_node", "kube_join", "kube_control_plane", "_pinned_packages", "compose_stack"]
    assert foreign_private_names("when: _kube_node_registration is defined", "kube_join", roles)
    assert foreign_private_names("{{ __kube_control_plane_objects | first }}", "kube_join", roles)
    assert foreign_private_names("{{ lookup('vars', '__' ~ role ~ '_objects') }}", "kube_join", roles)
    assert foreign_private_names("x: \"{{ ___pinned_packages_result }}\"", "nvidia_driver", roles)
    assert not foreign_private_names("{{ __kube_join_token.stdout }}", "kube_join", roles)
    assert not foreign_private_names("{{ lookup('vars', '__kube_join_' ~ part) }}", "kube_join", roles)
    assert not foreign_private_names("_pinned_packages_packages: [a]", "nvidia_driver", roles)  # its public input
    assert not foreign_private_names("# kube_join no longer reads __kube_control_plane_objects", "kube_join", roles)
    assert not foreign_private_names("{# _kube_node_registration #}{{ kube_node_labels }}", "kube_join", roles)
    assert not foreign_private_names("a: 1  # was _kube_node_registration", "kube_join", roles)
    assert owner("__kube_control_plane_objects", roles) == "kube_control_plane"
    assert foreign_private_names("objects: \"{{ __kube_cni_objects }}\"", "", [*roles, "kube_cni"])
    assert not foreign_private_names("objects: \"{{ lookup('vars', role ~ '_objects') }}\"", "", roles)
