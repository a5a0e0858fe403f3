"""The layout shows the layers: module_utils ships to hosts, plugin_utils stays on the controller.

* Every ``plugins/module_utils/<name>.py`` is imported by a module, directly or through another module_utils file
  a module imports. Anything else is controller-only logic and belongs in ``plugins/plugin_utils/``.
* Nothing a module ships with imports ``plugin_utils`` (it is not sent to the host).
* No Python plugin builds a path to a playbook or to a role's files (``COLLECTION / "playbooks" / "site.yml"``,
  ``os.path.join(root, "roles", ...)``): plays and roles hand plugins their data as arguments. Words in docstrings,
  documentation and messages are not paths; only string parts of ``/`` path joins and of path-taking calls count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "plugins"
PACKAGE = "ansible_collections.gpuops.cluster.plugins."


# ------------------------------------------------------------------------------------------ the import graph


def collection_imports(source: str) -> set[str]:
    """``<kind>.<name>`` of every collection plugin file ``source`` imports (``module_utils.text``, ...)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and (node.module + ".").startswith(PACKAGE):
            target = node.module[len(PACKAGE):]
            if "." in target:  # from ...plugins.module_utils.text import cut
                found.add(target)
            else:  # from ...plugins.module_utils import text, topology
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(PACKAGE):] for alias in node.names if alias.name.startswith(PACKAGE))
    return {".".join(name.split(".")[:2]) for name in found}


# A role that ships a module_utils file to its hosts as a plain script (the shipped_script lookup, which ships the
# file and every module_utils file it imports): gpu_health's scheduled sweep runs gpu_health_metrics there.
SHIPPED_SCRIPT = re.compile(r"""gpuops\.cluster\.shipped_script['"],\s*['"](\w+)['"]""")


def shipped_as_scripts(roles: Path) -> set[str]:
    """Names of the module_utils files a role ships to its hosts through the shipped_script lookup."""
    return {match.group(1) for path in sorted(roles.rglob("*.yml"))
            for match in SHIPPED_SCRIPT.finditer(path.read_text(encoding="utf-8"))}


def shipped_with_modules(plugins: Path) -> set[str]:
    """Names of the module_utils files some module imports, directly or through other module_utils files, or that a
    role ships to its hosts as a script (with what that imports)."""
    todo = [name for module in sorted((plugins / "modules").glob("*.py"))
            for name in collection_imports(module.read_text(encoding="utf-8"))]
    todo += [f"module_utils.{name}" for name in shipped_as_scripts(plugins.parent / "roles")]
    reached: set[str] = set()
    while todo:
        kind, name = todo.pop().split(".", 1)
        if kind != "module_utils" or name in reached:
            continue
        reached.add(name)
        todo.extend(collection_imports((plugins / "module_utils" / f"{name}.py").read_text(encoding="utf-8")))
    return reached


def test_every_module_utils_file_ships_with_a_module() -> None:
    present = {path.stem for path in (PLUGINS / "module_utils").glob("*.py") if path.stem != "__init__"}
    unused = sorted(present - shipped_with_modules(PLUGINS))
    assert unused == [], (
        f"plugins/module_utils/ holds files no module imports: {unused}. module_utils is what ships to hosts with "
        "modules; fix: git mv the file to plugins/plugin_utils/ and import it from there"
    )


def test_modules_and_module_utils_do_not_import_plugin_utils() -> None:
    found = {str(path.relative_to(REPO)): sorted(name for name in names if name.startswith("plugin_utils."))
             for path in sorted([*(PLUGINS / "modules").glob("*.py"), *(PLUGINS / "module_utils").glob("*.py")])
             if (names := collection_imports(path.read_text(encoding="utf-8")))}
    found = {path: names for path, names in found.items() if names}
    assert found == {}, f"plugin_utils does not ship to hosts, so a module cannot import it: {found}"


def test_the_graph_follows_module_utils_chains_and_finds_an_orphan(tmp_path: Path) -> None:
    (tmp_path / "modules").mkdir()
    (tmp_path / "module_utils").mkdir()
    (tmp_path / "modules" / "m.py").write_text(f"from {PACKAGE}module_utils import a as _a\n")
    (tmp_path / "module_utils" / "a.py").write_text(f"def f():\n    from {PACKAGE}module_utils.b import g\n")
    (tmp_path / "module_utils" / "b.py").write_text(f"from {PACKAGE}plugin_utils.c import h\n")
    (tmp_path / "module_utils" / "orphan.py").write_text("X = 1\n")
    assert shipped_with_modules(tmp_path) == {"a", "b"}
    assert collection_imports(f"import {PACKAGE}module_utils.text\nimport os\n") == {"module_utils.text"}


def test_the_collection_graph_reaches_through_module_utils() -> None:
    # gpu_facts_common is imported by no module, only by module_utils/gpu_facts.py (which the module imports).
    assert "gpu_facts_common" not in {
        name.split(".")[1] for name in collection_imports((PLUGINS / "modules" / "gpu_facts.py").read_text())
    }
    assert {"gpu_facts", "gpu_facts_common", "text"} <= shipped_with_modules(PLUGINS)


# ----------------------------------------------------------------------- paths to playbooks and role files

PLAY_OR_ROLE = re.compile(r"^(?:\.\.?/)*(?:playbooks|roles)(?:/|$)|(?:^|/)site\.ya?ml$")
PATH_CALLS = {"join", "Path", "PurePath", "PosixPath", "joinpath", "open", "glob", "iglob", "rglob", "exists",
              "isfile", "isdir", "listdir", "scandir", "walk", "read_text", "read_bytes", "relpath", "realpath",
              "abspath", "normpath", "is_file", "is_dir", "stat"}

# The one sanctioned reader of another part's files: the lookup that locates the data-only role monitoring_assets,
# so that no role reads another role's files (docs in the lookup). Listed here, exactly, so nothing else hides.
# And the one reader of the roles' OS tables: preflight judges a host's OS by the table of every role the host will
# run (each role's meta/main.yml platforms, which the inputs pass reads through the os_refusal filter,
# and the roles per platform in playbooks/vars/run_roles.yml, which the plays read), so that preflight refuses an OS
# exactly when a role would (issue 36); metadata only, no role's tasks or variables.
# And the one reader of a role's defaults (platform.role_defaults): a default has one home, its role's defaults file,
# which Python reads where its caller passes none instead of keeping a copy: every gpuops_* default (_gpuops_vars,
# design.md; get_var, the MPS rule's measured figures, issue 36), the kubelet reservations (kube_node's, read by
# kube_plan) and the role settings the plan takes a role's default of (plan._setting) (issue 37).
ALLOWED = {
    "plugins/lookup/monitoring_assets.py": {"*/roles/monitoring_assets/files"},
    "plugins/plugin_utils/os_support.py": {"*/roles", "*/playbooks/vars/run_roles.yml"},
    "plugins/plugin_utils/platform.py": {"*/roles/*/defaults/main.yml"},
}


def _parts(node: ast.AST) -> list[str]:
    """String parts of a path expression (f-string parts included); ``*`` for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _parts(node.left) + _parts(node.right)
    return ["*"]


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Constant):  # ", ".join(...) joins text, not a path
            return None
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def play_or_role_paths(source: str) -> set[str]:
    """Paths to a playbook or a role's files that ``source`` builds: ``/`` joins and arguments of path calls."""
    tree = ast.parse(source)
    nested = {id(child) for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
              for child in (node.left, node.right)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and id(node) not in nested:
            parts = _parts(node)
        elif isinstance(node, ast.Call) and _call_name(node) in PATH_CALLS:
            parts = [part for arg in node.args for part in _parts(arg)]
        else:
            continue
        if any(PLAY_OR_ROLE.search(part) for part in parts if part != "*"):
            found.add("/".join(parts))
    return found


@pytest.mark.parametrize("rel", sorted(str(path.relative_to(REPO)) for path in PLUGINS.rglob("*.py")))
def test_no_plugin_builds_a_path_to_a_playbook_or_a_role(rel: str) -> None:
    found = play_or_role_paths((REPO / rel).read_text(encoding="utf-8"))
    assert found == ALLOWED.get(rel, set()), (
        f"{rel} builds a path into playbooks/ or roles/: {sorted(found)}. A plugin gets its data from the play "
        "(an argument or a variable), not by reading a playbook or a role's files"
    )


def test_the_path_check_finds_joins_and_ignores_words() -> None:
    assert play_or_role_paths('SITE = COLLECTION / "playbooks" / "site.yml"\n') == {"*/playbooks/site.yml"}
    assert play_or_role_paths('p = os.path.join(root, "roles", name, "defaults")\n') == {"*/roles/*/defaults"}
    assert play_or_role_paths('text = Path(f"playbooks/{name}.yml").read_text()\n') == {"playbooks/*.yml"}
    assert play_or_role_paths('data = open("../roles/x/vars/main.yml").read()\n') == {"../roles/x/vars/main.yml"}
    assert play_or_role_paths('def f(site=ROOT / "site.yml"):\n    pass\n') == {"*/site.yml"}
    words = (
        '"""Reads playbooks/site.yml? No: the roles/ folder is named in prose only."""\n'
        'DOCUMENTATION = "Used by C(playbooks/upgrade_driver.yml) and roles/x"\n'
        'raise ValueError(f"fix: run site.yml or playbooks/{name}.yml")\n'
        'msg = ", ".join(["roles", "playbooks/site.yml"])\n'
        'out = Path(tmp) / "objects" / f"{kind}.yaml"\n'
    )
    assert play_or_role_paths(words) == set()


# ------------------------------------------------------------------------------ tests mirror the collection

TESTS = REPO / "tests" / "unit" / "plugins"


@pytest.mark.parametrize("rel", sorted(str(path.relative_to(REPO)) for path in TESTS.glob("*/test_*.py")))
def test_a_plugin_test_sits_in_the_folder_of_what_it_tests(rel: str) -> None:
    kind = Path(rel).parent.name
    assert (PLUGINS / kind).is_dir(), f"{rel}: there is no plugins/{kind}/ for it to mirror"
    text = (REPO / rel).read_text(encoding="utf-8")
    tested = sorted(collection_imports(text))
    assert any(name.startswith(f"{kind}.") for name in tested) or f"{PACKAGE}{kind}." in text, (
        f"{rel} sits in tests/unit/plugins/{kind}/ but imports nothing from plugins/{kind}/ (it imports {tested}); "
        "fix: git mv it to tests/unit/plugins/<kind>/ of the file it tests"
    )
