"""The collection's own Xid and SXid tables against the catalogs in ../shared/data/xid (read in place, row by row).

Skipped with the reason when ../shared/data is absent (a failure under CI=true, tests/ci_skips.py). That every bucket
of the table has a defined behaviour is test_gpu_health_verdict.py's test of every code.
"""

from __future__ import annotations

import csv

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_events import table_action
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health_xid_table import SXID_TABLE, XID_TABLE
from conftest import shared_path

XID_CATALOG_ROWS = 172  # ../shared/data/xid/README.md: Xid 1-172
SXID_MAPPING_ROWS = 398


def _rows(name: str) -> list:
    with shared_path("xid", name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_every_catalog_row_maps_to_the_same_immediate_action() -> None:
    rows = _rows("xid-catalog.csv")
    assert len(rows) == XID_CATALOG_ROWS
    differ = []
    for row in rows:
        code = int(row["xid"])
        expected = row["immediate_action"] or "UNKNOWN"  # an empty cell: NVIDIA gives no immediate action
        if table_action(XID_TABLE, code) != (expected, row["mnemonic"]):
            differ.append((code, row["immediate_action"], table_action(XID_TABLE, code)))
    assert differ == []
    assert sorted(XID_TABLE) == sorted(int(row["xid"]) for row in rows)


def test_every_sxid_row_maps_to_nvsentinels_action() -> None:
    rows = _rows("sxid-catalog.csv")
    assert len(rows) == SXID_MAPPING_ROWS
    assert [table_action(SXID_TABLE, int(row["sxid"])) for row in rows] == [
        (row["nvsentinel_action"], row["mnemonic"]) for row in rows
    ]
    assert len(SXID_TABLE) == len(rows)
