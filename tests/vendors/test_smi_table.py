"""The shared table layer: cells, device blocks, tokens to base units, PCI ids; fuzzed for ParseError only."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import ParseError

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


_CACHED = "\n".join(
    [
        "+---+",
        "| Idx  Name   | Temp   Pwr |",
        "|===|",
        "| {i}    {name}    | {temp}C    {pwr} W |",
        "+---+",
        "",
    ]
)


def test_table_rows_reads_a_repeated_header_once() -> None:
    """The second parse of the same tool's header takes its layout and value spans from the cache."""
    t._cached_layout.cache_clear()
    first = t.table_rows(_CACHED.format(i=0, name="MLU", temp=31, pwr=99), "Pwr")
    layout = t._cached_layout(("| Idx  Name   | Temp   Pwr |",))
    spans = dict(layout.spans)
    second = t.table_rows(_CACHED.format(i=1, name="MLU", temp=32, pwr=98), "Pwr")
    info = t._cached_layout.cache_info()
    assert (info.misses, info.hits, info.currsize) == (1, 2, 1)
    assert layout.spans == spans and len(spans) == 4  # the same four value spans: nothing recomputed
    assert [dict(r.values) for r in first + second] == [
        {"idx": "0", "name": "MLU", "temp": "31C", "pwr": "99 W"},
        {"idx": "1", "name": "MLU", "temp": "32C", "pwr": "98 W"},
    ]


def test_layout_cache_is_bounded() -> None:
    """At most _LAYOUTS headers, _SPANS_PER_LAYOUT spans each; a header over _CACHED_HEADER_CHARS is not kept."""
    t._cached_layout.cache_clear()
    for n in range(t._LAYOUTS + 10):
        t.table_rows(_CACHED.replace("Name", f"N{n:03d}").format(i=0, name="X", temp=1, pwr=2), "Pwr")
    assert t._cached_layout.cache_info().currsize == t._LAYOUTS
    t._cached_layout.cache_clear()
    wide = "| Idx " + " " * t._CACHED_HEADER_CHARS + "| Pwr |"
    rows = t.table_rows("\n".join(["+---+", wide, "|===|", "| 0 | 5 W |", "+---+", ""]), "Pwr")
    assert dict(rows[0].values) == {"idx": "0", "pwr": "5 W"}
    assert t._cached_layout.cache_info().currsize == 0
    layout = t._cached_layout(("| Idx  Name   | Temp   Pwr |",))
    for start in range(t._SPANS_PER_LAYOUT + 100):
        layout.column(0, (1, start, start + 1, "x"), (start, start + 1))
    assert len(layout.spans) == t._SPANS_PER_LAYOUT


@settings(max_examples=100, deadline=None)
@given(
    name=st.text(alphabet="abXY -/", min_size=1, max_size=12),
    values=st.lists(st.text(alphabet="0123456789 WC%/", max_size=10), min_size=4, max_size=4),
)
def test_cached_layout_reads_as_a_fresh_one(name: str, values: list[str]) -> None:
    """A table read after another one with the same header (warm cache) gives the rows a cold read gives."""

    def table(a: str, b: str) -> str:
        return "\n".join(["+---+", f"| Idx  {name}   | Pwr |", "|===|", f"| 0  {a} | {b} |", "+---+", ""])

    def read(text: str) -> list[dict[str, str]] | str:
        try:
            return [dict(r.values) for r in t.table_rows(text, "Pwr")]
        except ParseError as exc:
            return str(exc)

    read(table(values[0], values[1]))
    warm = read(table(values[2], values[3]))
    t._cached_layout.cache_clear()
    assert warm == read(table(values[2], values[3]))
