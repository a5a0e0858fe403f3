"""scripts/gen-xid-table: the committed Xid/SXid tables are what the script writes from ../shared/data/xid."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from pathlib import Path

from conftest import shared_path

REPO = Path(__file__).resolve().parents[3]
gen = SourceFileLoader("gen_xid_table", str(REPO / "scripts" / "gen-xid-table")).load_module()


def test_committed_tables_are_what_the_script_writes():
    shared_path("xid", "xid-catalog.csv")
    shared_path("xid", "sxid-catalog.csv")
    committed = (REPO / "plugins" / "module_utils" / gen.TABLES).read_text(encoding="utf-8")
    assert committed == gen.render(gen.xid_rows(), gen.sxid_rows()), "run scripts/gen-xid-table and commit"
