"""The shared table layer: cells, device blocks, tokens to base units, PCI ids; fuzzed for ParseError only."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vendors import smi_table as t
from vendors.base import ParseError

MIB = 1024**2


@pytest.mark.parametrize(
    ("token", "units", "value"),
    [
        ("106 W", t.WATTS, 106.0),
        ("88W", t.WATTS, 88.0),
        ("39 C", t.CELSIUS, 39.0),
        ("0.0%", t.PERCENT_AS_RATIO, 0.0),
        ("0 %", t.PERCENT_AS_RATIO, 0.0),
        ("97%", t.PERCENT_AS_RATIO, 0.97),
        ("23374 MiB", t.MIB_AS_BYTES, 23374 * MIB),
        ("1500MHz", t.MHZ_AS_HERTZ, 1.5e9),
        ("3", t.COUNT, 3.0),
        ("N/A", t.WATTS, None),
        ("n/a", t.WATTS, None),
        (" - ", t.WATTS, None),
        ("Not Supported", t.WATTS, None),
    ],
)
def test_quantity(token: str, units: dict[str, float], value: float | None) -> None:
    got = t.quantity(token, units, "x")
    assert got == (pytest.approx(value) if value is not None else None)


@pytest.mark.parametrize(
    "token", ["", "W", "12 MB", "1e3 W", "-5 W", "12 W extra", "0x10 W", "9" * 400 + " W"]
)
def test_quantity_rejects(token: str) -> None:
    with pytest.raises(ParseError):
        t.quantity(token, t.WATTS if "MB" not in token else t.MIB_AS_BYTES, "x")


@pytest.mark.parametrize(
    ("token", "pair"),
    [
        ("0 MiB/ 23374 MiB", (0.0, 23374 * MIB)),
        ("64MiB / 32768MiB", (64 * MIB, 32768 * MIB)),
        ("858/65536 MiB", (858 * MIB, 65536 * MIB)),
        ("0 / 63 MB", (0.0, 63 * MIB)),
        ("N/A / N/A", (None, None)),
        ("N/A / 32768MiB", (None, 32768 * MIB)),
    ],
)
def test_used_total(token: str, pair: tuple[float | None, float | None]) -> None:
    c = t.CellReader(t.Row({"mem": token}, token))
    assert c.pair(("used", "total"), ["mem"], t.MEMORY_AS_BYTES) == pair
    assert c.unread == {}


@pytest.mark.parametrize(
    ("token", "bus"),
    [
        ("00000000:03:00.0", "0000:03:00.0"),
        ("0000:3D:00.0", "0000:3d:00.0"),
        ("00:01:00.0", "0000:01:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("0001:af:1f.7", "0001:af:1f.7"),
    ],
)
def test_pci_bus_id(token: str, bus: str) -> None:
    assert t.pci_bus_id(token) == bus


def test_table_rows_split_by_rules_and_stop_at_the_process_table() -> None:
    text = "\n".join(
        [
            "+---+",
            "| A | Pwr:Usage/Cap |",
            "| B | M             |",
            "|===|",
            "| 0 | x |",
            "| a | b |",
            "+---+",
            "| 1 | y |",
            "| c | d |",
            "+---+",
            "| Processes:  |",
            "| 9 | z |",
            "+---+",
        ]
    )
    rows = t.table_rows(text, "Pwr:Usage/Cap")
    assert [dict(r.values) for r in rows] == [
        {"a": "0", "pwr:usage/cap": "x", "b": "a", "m": "b"},
        {"a": "1", "pwr:usage/cap": "y", "b": "c", "m": "d"},
    ]
    with pytest.raises(ParseError, match="expected 2"):
        t.table_rows(text.replace("| a | b |\n", ""), "Pwr:Usage/Cap")


@settings(max_examples=200, deadline=None)
@given(token=st.text(max_size=40))
def test_token_parsers_raise_only_parse_error(token: str) -> None:
    for call in (
        lambda: t.quantity(token, t.MIB_AS_BYTES, "x"),
        lambda: t.CellReader(t.Row({"x": token}, token)).pair(("a", "b"), ["x"], t.MEMORY_AS_BYTES),
        lambda: t.pci_bus_id(token),
        lambda: t.table_rows(token, "|"),
    ):
        with contextlib.suppress(ParseError):
            call()
