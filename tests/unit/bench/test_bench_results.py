"""bench/results.json: every entry was written by a bench script, with the generator fields of bench/_meta.py."""

from __future__ import annotations

import json
import re
import subprocess

import _meta
import pytest

WRITERS = {"parsers": "bench/run.py", "fleet": "bench/fleet.py", "converge": "bench/converge.py"}
COMMIT = re.compile(r"^[0-9a-f]{40}(-dirty)?$")
LIMIT_ON_TWO_CORES = 3.0  # 1.5 x 2: the limit the issue sets, on this project's 2-core machine
UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# the generator fields, in their order, as _meta.generator writes them (the one writer of an entry's generator)
FIELDS = tuple(_meta.generator({"command": "", "commit": "", "measured_at": "", "load_1min_before": 0.0}, "", None))


def results() -> dict:
    return json.loads(_meta.RESULTS.read_text())


def problems(key: str, entry: object) -> list[str]:
    """What is wrong with one entry of results.json (empty when nothing)."""
    if key not in WRITERS:
        return [f"{key}: no bench script writes this key (known: {sorted(WRITERS)}); remove it or re-measure"]
    gen = entry.get("generator") if isinstance(entry, dict) else None
    missing = [name for name in FIELDS if not isinstance(gen, dict) or name not in gen]
    if missing:
        return [f"{key}: lacks generator fields {missing}"]
    checks = {
        "script": gen["script"] == WRITERS[key],
        "command": WRITERS[key] in gen["command"],
        "commit": bool(COMMIT.match(str(gen["commit"]))),
        "measured_at": bool(UTC.match(str(gen["measured_at"]))),
        "cores": isinstance(gen["cores"], int) and gen["cores"] > 0,
        "loads": all(isinstance(gen[k], (int, float)) for k in ("load_1min_before", "load_1min_after")),
        "load_limit": gen["load_limit"] == _meta.load_limit(gen["cores"]) if isinstance(gen["cores"], int) else False,
        "over_load": gen["over_load"] is True
        or (gen["over_load"] is False and max(gen["load_1min_before"], gen["load_1min_after"]) <= gen["load_limit"]),
        "targets_gpu": gen["targets_gpu"] in (True, False, None),
    }
    found = [f"{key}: generator field {name} is wrong: {gen.get(name)!r}" for name, ok in checks.items() if not ok]
    if key == "fleet":
        for size in entry.get("sizes", []):
            loads = [size.get("load_1min_before"), size.get("load_1min_after")]
            if not all(isinstance(x, (int, float)) for x in loads) or not isinstance(size.get("over_load"), bool):
                found.append(f"fleet: size {size.get('hosts')} lacks its load before/after or over_load")
            elif not size["over_load"] and max(loads) > size["load_limit"]:
                found.append(f"fleet: size {size['hosts']} was above the load limit but is not marked over_load")
    return found


def test_every_entry_carries_its_generator_fields():
    found = [p for key, entry in results().items() for p in problems(key, entry)]
    assert not found, "bench/results.json: " + "; ".join(found)


@pytest.mark.parametrize(
    ("key", "entry", "expected"),
    [
        ("converge_previous", {"generator": {}}, "no bench script writes this key"),
        ("converge", {"first_seconds": 1.0}, "lacks generator fields"),
        ("fleet", {"generator": {"script": "bench/fleet.py"}}, "lacks generator fields ['command', 'commit'"),
    ],
)
def test_an_entry_without_its_fields_or_writer_is_refused(key, entry, expected):
    assert expected in " ".join(problems(key, entry))


def test_a_load_above_the_limit_must_be_marked(monkeypatch):
    monkeypatch.setattr(_meta.sys, "argv", [str(_meta.REPO / "bench" / "fleet.py")])
    start = {**_meta.started(), "load_1min_before": 29.0}
    monkeypatch.setattr(_meta.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(_meta, "load1", lambda: 0.5)
    gen = _meta.generator(start, "bench/fleet.py", False)
    assert gen["load_limit"] == LIMIT_ON_TWO_CORES
    assert gen["over_load"] is True
    assert not problems("fleet", {"generator": gen, "sizes": []})
    assert "over_load is wrong" in " ".join(problems("fleet", {"generator": {**gen, "over_load": False}, "sizes": []}))
    assert _meta.generator({**start, "load_1min_before": 2.9}, "bench/fleet.py", False)["over_load"] is False
    assert _meta.generator({**start, "load_1min_before": 2.9}, "bench/fleet.py", False, (3.5,))["over_load"] is True


def test_the_generator_records_the_command_as_run():
    argv = [str(_meta.REPO / "bench" / "fleet.py"), "--sizes", "10,50", "--rounds", "1"]
    assert _meta.command(argv) == "python bench/fleet.py --sizes 10,50 --rounds 1"


def test_record_writes_each_entry_with_its_generator_beside_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(_meta, "RESULTS", tmp_path / "results.json")
    monkeypatch.setattr(_meta.sys, "argv", [str(_meta.REPO / "bench" / "run.py")])
    (tmp_path / "results.json").write_text('{"fleet": {"kept": true}}')
    entry = _meta.record("parsers", _meta.started(), "bench/run.py", None, {"tables": []})
    written = json.loads((tmp_path / "results.json").read_text())
    assert written == {"fleet": {"kept": True}, "parsers": entry}
    assert (list(entry["generator"]), entry["tables"]) == (list(FIELDS), [])
    assert problems("parsers", entry) == []


def test_fleet_writes_an_entry_with_every_field(tmp_path, monkeypatch):
    import fleet  # noqa: PLC0415  (imports ansible_env from tests/, on pytest's pythonpath)

    monkeypatch.setattr(_meta, "RESULTS", tmp_path / "results.json")
    monkeypatch.setattr(_meta.sys, "argv", [str(_meta.REPO / "bench" / "fleet.py"), "--sizes", "10,50"])
    (tmp_path / "results.json").write_text('{"parsers": {"kept": true}}')
    size = {
        "hosts": 10,
        "init": "sleep",
        "rounds": 3,
        "load_1min_before": 0.4,
        "load_1min_after": 0.6,
        "load_1min_peak": 0.9,
        "forks": 2,
        "load_limit": 3.0,
        "over_load": False,
        "median_seconds": {"ping": 7.0, "setup": 9.0, "preflight": 8.0},
    }
    big = {**size, "hosts": 50, "median_seconds": {"ping": 23.0, "setup": 29.0, "preflight": 24.0}}
    assert fleet.record_fleet(_meta.started(), [10, 50], [size, big]) == json.loads(
        (tmp_path / "results.json").read_text())["fleet"]
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["parsers"] == {"kept": True}
    assert written["fleet"]["generator"]["script"] == "bench/fleet.py"
    assert written["fleet"]["generator"]["targets_gpu"] is False
    assert written["fleet"]["marginal_seconds_per_host"] == [
        {"from_hosts": 10, "to_hosts": 50, "seconds_per_host": {"ping": 0.4, "setup": 0.5, "preflight": 0.4}}
    ]
    assert written["fleet"]["generator"]["command"] == "python bench/fleet.py --sizes 10,50"
    assert problems("fleet", written["fleet"]) == []


def test_the_commit_is_dirty_for_any_tracked_change_but_a_recorded_figure_file(tmp_path, monkeypatch):
    """The one dirty-tree rule of every recorded figure (results.json, the test summary, the gpu-check report): a
    bench script writes bench/results.json before the next one starts, which must not make that one's commit dirty."""
    monkeypatch.delenv("GPUOPS_COMMIT", raising=False)
    monkeypatch.setattr(_meta, "REPO", tmp_path)
    assert _meta.commit() is None, "outside git there is no commit"

    def git(*argv):
        return subprocess.run(["git", "-C", str(tmp_path), *argv], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "bench").mkdir()
    for name in ("bench/results.json", "bench/test-summary.json", "Makefile"):
        (tmp_path / name).write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    head = git("rev-parse", "HEAD").strip()
    assert _meta.commit() == head
    (tmp_path / "bench" / "results.json").write_text('{"fleet": {}}\n')
    (tmp_path / "bench" / "test-summary.json").write_text('{"format": 1}\n')
    (tmp_path / "untracked.py").write_text("")
    assert _meta.commit() == head, "recorded figure files and untracked files leave the commit clean"
    (tmp_path / "Makefile").write_text("all:\n")
    assert _meta.commit() == f"{head}-dirty"
    monkeypatch.setenv("GPUOPS_COMMIT", "6978a87")
    assert _meta.commit() == "6978a87", "a copy without .git names its commit"
