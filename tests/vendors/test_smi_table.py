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
        ("N/A / N/A", (None, None)),
        ("N/A / 32768MiB", (None, 32768 * MIB)),
    ],
)
def test_used_total(token: str, pair: tuple[float | None, float | None]) -> None:
    assert t.used_total(token, t.MIB_AS_BYTES, "mem") == pair


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


def test_device_blocks_split_by_rules_and_stop_at_the_process_table() -> None:
    text = "\n".join(
        [
            "| A | Pwr:Usage/Cap |",
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
    assert t.device_blocks(text, "Pwr:Usage/Cap", rows=2) == [
        (("0", "x"), ("a", "b")),
        (("1", "y"), ("c", "d")),
    ]
    with pytest.raises(ParseError, match="expected 3"):
        t.device_blocks(text, "Pwr:Usage/Cap", rows=3)


@settings(max_examples=200, deadline=None)
@given(token=st.text(max_size=40))
def test_token_parsers_raise_only_parse_error(token: str) -> None:
    for call in (
        lambda: t.quantity(token, t.MIB_AS_BYTES, "x"),
        lambda: t.used_total(token, t.MIB_AS_BYTES, "x"),
        lambda: t.pci_bus_id(token),
        lambda: t.device_blocks(token, "|", rows=1),
    ):
        with contextlib.suppress(ParseError):
            call()
