"""docs/vendors/README.md stays true: its vendor x metric table agrees with the mixed-node golden wherever it
says **G**, and its detection-order table is the registry's."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.conftest import ROOT
from xpuwatch.vendors.registry import all_specs

DOC = ROOT / "docs" / "vendors" / "README.md"
GOLDEN = ROOT / "tests" / "golden" / "mixed-node.txt"


def _table(marker: str) -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split(f"<!-- {marker}: begin -->", 1)[1].split(f"<!-- {marker}: end -->", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.strip().splitlines()]
    return [rows[0], *rows[2:]]  # drop the |---| line


def _golden_keys() -> set[tuple[str, str]]:
    """(row key, vendor) for every device series of the golden; a row key is the metric name, plus
    ``{sensor="..."}`` / ``{type="..."}`` where the table splits a metric by that label."""
    out: set[tuple[str, str]] = set()
    for fam in text_string_to_metric_families(GOLDEN.read_text()):
        for s in fam.samples:
            vendor = s.labels.get("vendor")
            if vendor is None:
                continue
            out.add((s.name, vendor))
            for label in ("sensor", "type"):
                if label in s.labels:
                    out.add((f'{s.name}{{{label}="{s.labels[label]}"}}', vendor))
    return out


def test_vendor_metric_table_matches_the_golden() -> None:
    head, *rows = _table("vendor-metric-table")
    vendors = head[1:]
    assert vendors == [
        "nvidia",
        "amd",
        "hygon",
        "huawei",
        "cambricon",
        "kunlunxin",
        "metax",
        "mthreads",
        "iluvatar",
        "enflame",
        "intel",
    ]
    golden = _golden_keys()
    checked = 0
    for row in rows:
        m = re.match(r"`([^`]+)`", row[0])
        assert m, row[0]
        key = m.group(1)
        assert len(row) == len(head), row
        for vendor, cell in zip(vendors, row[1:], strict=True):
            says_golden = re.match(r"G\b", cell) is not None
            assert says_golden == ((key, vendor) in golden), f"{key} x {vendor}: cell {cell!r}"
            checked += 1
    # Every shared metric of the golden has a row (vendor-only ones, accelerator_<vendor>_*, are listed below it).
    vendor_only = (*(f"accelerator_{v}_" for v in vendors), "accelerator_slice_")
    rows_keys = {re.match(r"`([^`]+)`", r[0]).group(1) for r in rows}  # type: ignore[union-attr]
    shared = {k for k, _ in golden if not k.startswith(vendor_only)}
    assert shared - {"accelerator_ecc_errors_total", "accelerator_temperature_celsius"} <= rows_keys
    assert checked == len(rows) * len(vendors)


def test_detection_table_is_the_registry() -> None:
    _, *rows = _table("detection-table")
    want = [
        (str(s.priority), f"`{n}`", s.vendor, ", ".join(f"`{x}`" for x in s.supersedes))
        for n, s in all_specs().items()
        if s.auto
    ]
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == want
