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
    for filename, name, doc, source, rows in (
        ("gpu_health_xid_table.py", "XID_TABLE", gen.XID_DOC, "../shared/data/xid/xid-catalog.csv", gen.xid_rows()),
        (
            "gpu_health_sxid_table.py",
            "SXID_TABLE",
            gen.SXID_DOC,
            "../shared/data/xid/sxid-catalog.csv",
            gen.sxid_rows(),
        ),
    ):
        committed = (REPO / "plugins" / "module_utils" / filename).read_text(encoding="utf-8")
        assert committed == gen.render(name, doc, source, rows), f"{filename}: run scripts/gen-xid-table and commit"
