"""docs/architecture.md "Where does X live": the hop table's rows for the variables below, checked against the code.

Each row is at most three hops (inventory -> decided in -> applied by). Column 2 names `file` `function` pairs that
read the variable (a string literal of its name in the function, or a module-level map the function uses that names
it) and the `gpuops_plan` keys they decide (in plan.SCHEMA; in plan.ROLE_SETTINGS[variable].keys where the plan maps
it). Column 3 names files, each followed by what it reads: a plan key of column 2 (or one under it), the variable, or
the file's role's own variable whose default (roles/<role>/defaults/main.yml) reads one of those. Read from the files
themselves (comments dropped), so a row naming a function or file that does not read it fails.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import plan

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
VARIABLES = ("gpuops_platform", "nvidia_driver_version", "gpuops_members", "gpuops_teams", "gpuops_registry_mirror")
SECTION = "## Where does X live"
COLUMNS = 4  # behaviour and the three hops
MIN_ROLE_FILES = 200  # fewer role files than this: the scan of roles/ missed the tree
FILE_SPAN = re.compile(r"^[\w.-]+(/[\w.<>-]+)+\.(py|yml|yaml|j2)$")
IDENT = re.compile(r"^[A-Za-z_]\w*$")
SPAN = re.compile(r"`([^`]+)`")
PLACEHOLDER = re.compile(r"^<\w+>$")
# Between two parts of a plan key in Jinja: an optional `| default(...)` and the parenthesis around it.
_GAP = r"(?:\s*\|\s*default\([^()]*\)\s*\)?)?"


def _table(text: str) -> list[list[str]]:
    """The section's table rows, each a list of its cells (header and rule left out)."""
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[2:]]


def _rows(text: str) -> dict[str, list[str]]:
    """variable -> its row: the row whose column 1 starts with the variable (exactly one each)."""
    found: dict[str, list[list[str]]] = {}
    for cells in _table(text):
        spans = SPAN.findall(cells[1]) if len(cells) > 1 else []
        if spans and spans[0] in VARIABLES:
            found.setdefault(spans[0], []).append(cells)
    return {name: rows[0] for name, rows in found.items() if len(rows) == 1} | {
        name: [] for name, rows in found.items() if len(rows) != 1
    }


def _key(span: str) -> tuple[str, ...]:
    """`gpuops_plan.hosts.<host>.packages` -> ("hosts", "<>", "packages")."""
    return tuple("<>" if PLACEHOLDER.match(part) else part for part in span.split(".")[1:])


def _in_schema(key: tuple[str, ...]) -> bool:
    node = plan.SCHEMA
    for part in key:
        node = node.get("additionalProperties") if part == "<>" else (node.get("properties") or {}).get(part)
        if not isinstance(node, dict):
            return False
    return True


def _reads_key(text: str, key: tuple[str, ...]) -> bool:
    """Whether Jinja in ``text`` reads gpuops_plan.<key> (a placeholder: any [subscript] or .name); a key of a host's
    part (hosts.<>.x) also through gpuops_plan_host, this host's part (roles/_gpuops_vars/vars/main.yml)."""
    def pattern(start: str, parts: tuple[str, ...]) -> str:
        return start + "".join(
            _GAP + (r"(?:\[[^\]]+\]|\.\w+)" if part == "<>" else r"\." + re.escape(part) + r"\b") for part in parts
        )
    this_host = key[:2] == ("hosts", "<>") and re.search(pattern(r"\bgpuops_plan_host\b", key[2:]), text)
    return bool(this_host) or re.search(pattern("gpuops_plan", key), text) is not None


def _uncommented(text: str) -> str:
    """``text`` without comments (YAML/Jinja line comments and {# #} blocks)."""
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


@cache
def _code(path: Path) -> str:
    """The file without comments."""
    return _uncommented(path.read_text(encoding="utf-8"))


@cache
def _tree(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once (walked, never changed)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _function_reads(path: Path, function: str, variable: str) -> str | None:
    """None when ``function`` in ``path`` reads ``variable``; else why not."""
    tree = _tree(path)
    maps = {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
        and any(isinstance(c, ast.Constant) and c.value == variable for c in ast.walk(node.value))
    }
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not defs:
        return f"{path.relative_to(REPO)} has no function {function}"
    body = [n for d in defs for n in ast.walk(d)]
    if any(isinstance(n, ast.Constant) and n.value == variable for n in body):
        return None
    if any(isinstance(n, ast.Name) and n.id in maps for n in body):
        return None
    return f"{path.relative_to(REPO)} {function} does not read {variable} (nor a map of this file naming it)"


def _decided(variable: str, cell: str) -> tuple[list[str], set[tuple[str, ...]]]:
    """Problems of column 2, and the plan keys it decides."""
    problems = []
    head, _arrow, tail = cell.partition("→")
    keys = {_key(s) for s in SPAN.findall(tail) if s.startswith("gpuops_plan.")}
    if not keys:
        problems.append(f"{variable}: column 2 names no gpuops_plan key after →")
    for key in keys:
        if not _in_schema(key):
            problems.append(f"{variable}: gpuops_plan.{'.'.join(key)} is not in plan.SCHEMA")
        elif variable in plan.ROLE_SETTINGS and key not in {_key("p." + k) for k in plan.ROLE_SETTINGS[variable].keys}:
            problems.append(f"{variable}: gpuops_plan.{'.'.join(key)} is not among plan.ROLE_SETTINGS' keys for it")
    # `file` `function` [and|, `function`]...: the functions right after a file, joined by "and" or commas only.
    pairs = re.findall(r"`([^`]+)`((?:(?:\s*,\s*|\s+and\s+|\s+)`\w+`)*)", head)
    named = [(f, SPAN.findall(fns)) for f, fns in pairs if FILE_SPAN.match(f)]
    if not named:
        problems.append(f"{variable}: column 2 names no `file` `function` before →")
    for file, functions in named:
        path = REPO / file
        if not path.is_file():
            problems.append(f"{variable}: {file} does not exist")
            continue
        if not functions:
            problems.append(f"{variable}: column 2 names {file} with no function")
        for function in functions:
            why = (
                _function_reads(path, function, variable)
                if path.suffix == ".py"
                else (None if re.search(rf"\b{variable}\b", _code(path)) else f"{file} does not read {variable}")
            )
            if why:
                problems.append(f"{variable}: {why}")
    return problems, keys


def _applied(variable: str, cell: str, keys: set[tuple[str, ...]]) -> list[str]:
    """Problems of column 3: each file reads what the row says it reads."""
    if "→" in cell:
        return [f"{variable}: column 3 chains a further hop (→)"]
    problems: list[str] = []
    claims: dict[str, list[str]] = {}
    pending: list[str] = []
    for span in SPAN.findall(cell):
        if FILE_SPAN.match(span):
            if pending and claims[pending[-1]]:
                pending = []
            pending.append(span)
            claims[span] = []
        elif pending and (span.startswith("gpuops_plan.") or IDENT.match(span)):
            for file in pending:
                claims[file].append(span)
    if not claims:
        return [f"{variable}: column 3 names no file"]

    def reads(text: str, claim: str) -> bool:
        if claim.startswith("gpuops_plan."):
            return _reads_key(text, _key(claim))
        return re.search(rf"\b{re.escape(claim)}\b", text) is not None

    def allowed(claim: str, role: str | None) -> str | None:
        """None when the claim is one column 2 leads to; else why not."""
        if claim == variable:
            return None
        if claim.startswith("gpuops_plan."):
            key = _key(claim)
            return None if any(key[: len(k)] == k for k in keys) else f"{claim} is not under a key column 2 decides"
        if role and claim.startswith(role + "_"):
            defaults = REPO / "roles" / role / "defaults" / "main.yml"
            value = (yaml.safe_load(defaults.read_text(encoding="utf-8")) or {}).get(claim)
            if isinstance(value, str) and (reads(value, variable) or any(_reads_key(value, k) for k in keys)):
                return None
            return f"{claim}'s default in roles/{role}/defaults/main.yml is neither {variable} nor a column 2 key"
        return f"{claim} is neither {variable}, a gpuops_plan key nor a variable of the file's role"

    for file, spans in claims.items():
        path = REPO / file
        if not path.is_file():
            problems.append(f"{variable}: {file} does not exist")
            continue
        role = path.relative_to(REPO).parts[1] if path.relative_to(REPO).parts[0] == "roles" else None
        # Other spans are prose (a key of the file's output, a filter), not claims.
        read = [
            c for c in spans if c.startswith("gpuops_plan.") or c == variable or (role and c.startswith(role + "_"))
        ]
        if not read:
            problems.append(f"{variable}: column 3 names {file} without what it reads")
        for claim in read:
            why = allowed(claim, role)
            if why:
                problems.append(f"{variable}: {file}: {why}")
            elif not reads(_code(path), claim):
                problems.append(f"{variable}: {file} does not read {claim}")
    return problems


def check(text: str) -> list[str]:
    """Every problem of the table's rows for VARIABLES."""
    rows = _rows(text)
    problems = [
        f"{name}: no row, or more than one, starts column 1 with it" for name in VARIABLES if not rows.get(name)
    ]
    for variable, cells in rows.items():
        if not cells:
            continue
        if len(cells) != COLUMNS:
            problems.append(f"{variable}: {len(cells)} columns, not behaviour + the three hops")
            continue
        found, keys = _decided(variable, cells[2])
        problems += found + _applied(variable, cells[3], keys)
    return problems


def test_the_rows_match_the_code():
    assert check(DOC.read_text(encoding="utf-8")) == []


def _mutated(old: str, new: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # a decide-hop function that does not read the variable
        (
            "`plugins/plugin_utils/plan.py` `build_plan` (the rule: team.namespace_of)",
            "`plugins/plugin_utils/plan.py` `host_part` (the rule: team.namespace_of)",
            "host_part does not read",
        ),
        # a function that does not exist
        ("`platform_request`", "`platform_requests`", "has no function platform_requests"),
        # a file that does not exist
        ("`roles/validate/vars/main.yml`", "`roles/validate/vars/other.yml`", "does not exist"),
        # an applying file that does not read the plan key it claims
        ("`roles/diagnose/tasks/slowdown.yml` reads", "`roles/diagnose/tasks/main.yml` reads", "does not read"),
        # an applying file that does not read the variable
        ("`roles/training_image/vars/main.yml`", "`roles/training_image/tasks/main.yml`", "does not read"),
        # a plan key the plan does not have
        ("→ `gpuops_plan.pins.registry_mirror`", "→ `gpuops_plan.pins.mirror`", "not in plan.SCHEMA"),
        # a role alias whose default is not the variable
        ("and `gpuops_teams` (the", "and `kube_tenancy_extra_pvcs` (the", "kube_tenancy_extra_pvcs's default"),
        # a further hop in column 3
        ("to its target);", "to its target) → `roles/nvidia_driver/tasks/pinned.yml`;", "→"),
    ],
)
def test_a_wrong_row_is_found(old, new, expected):
    problems = check(_mutated(old, new))
    assert any(expected in p for p in problems), problems


def inventory_readers(variable: str, texts: dict[str, str]) -> list[str]:
    """The files of ``texts`` (path -> text) whose code reads ``variable`` itself: roles take what the plan decided
    from it (the row's column 3), so only the plan reads it. Its home's defaults (roles/_gpuops_vars) and the argument
    specs' prose are left out; the specs' defaults are the defaults files'."""
    return sorted(
        path
        for path, text in texts.items()
        if not path.startswith("roles/_gpuops_vars/")
        and "/meta/" not in path
        and re.search(rf"\b{variable}\b", text)
    )


def _role_code() -> dict[str, str]:
    files = [p for p in (REPO / "roles").rglob("*") if p.is_file() and p.suffix in {".yml", ".yaml", ".j2"}]
    assert len(files) >= MIN_ROLE_FILES, f"only {len(files)} role files: the scan missed roles/"
    return {str(p.relative_to(REPO)): _code(p) for p in files}


def test_only_the_plan_reads_the_registry_mirror():
    """gpuops_registry_mirror: inventory -> plan (pins.registry_mirror) -> every role that pulls an image."""
    assert inventory_readers("gpuops_registry_mirror", _role_code()) == []


def test_kube_tenancy_reads_the_members_from_the_plan():
    """gpuops_members: inventory -> plan (team.members) -> kube_tenancy, which reads the plan's team only."""
    code = {path: text for path, text in _role_code().items() if path.startswith("roles/kube_tenancy/")}
    assert "roles/kube_tenancy/vars/main.yml" in code, sorted(code)
    assert "roles/kube_tenancy/defaults/main.yml" in code, sorted(code)
    assert inventory_readers("gpuops_members", code) == []
    assert _reads_key(code["roles/kube_tenancy/vars/main.yml"], ("team", "members"))


@pytest.mark.parametrize(("text", "key", "reads"), [
    ("{{ gpuops_plan_host.packages | default({}) }}", ("hosts", "<>", "packages"), True),
    ("{{ (gpuops_plan.hosts | default({}))[inventory_hostname].packages }}", ("hosts", "<>", "packages"), True),
    ("{{ gpuops_plan_host.workspaces }}", ("hosts", "<>", "packages"), False),
    ("{{ gpuops_plan_host.packages }}", ("pins", "packages"), False),
])
def test_a_read_of_this_hosts_part_counts_as_a_read_of_the_hosts_map(text: str, key: tuple[str, ...], reads: bool):
    assert _reads_key(text, key) is reads


def test_a_role_reading_the_mirror_itself_is_found():
    texts = {
        "roles/r/vars/main.yml": '_r_image: "{{ r_image | gpuops.cluster.mirror_image(gpuops_registry_mirror) }}"',
        "roles/r/templates/t.j2": "{# gpuops_registry_mirror #}\n"
        "{{ i | mirror_image(gpuops_plan.pins.registry_mirror) }}",
        "roles/r/defaults/main.yml": "# r_mirror: the plan's, not gpuops_registry_mirror\nr_x: 1",
        "roles/_gpuops_vars/defaults/main.yml": 'gpuops_registry_mirror: ""',
        "roles/r/meta/argument_specs.yml": "description: rewritten to C(gpuops_registry_mirror)",
    }
    code = {path: _uncommented(text) for path, text in texts.items()}
    assert inventory_readers("gpuops_registry_mirror", code) == ["roles/r/vars/main.yml"]


def test_a_missing_row_is_found():
    text = _mutated("| team namespaces | `gpuops_teams`", "| team namespaces | `gpuops_team_list`")
    assert "gpuops_teams: no row, or more than one, starts column 1 with it" in check(text)
