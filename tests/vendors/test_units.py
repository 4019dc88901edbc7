"""The unit spellings the vendor tools print, all read by one helper (``smi_table.quantity`` with its unit
tables): this list is the record of which spelling means what, and a new spelling is added here first."""

from __future__ import annotations

import re

import pytest

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import ParseError

MIB = 2**20

# (as printed, unit table, value in base units, who prints it)
SPELLINGS = [
    ("768MiB", t.MEMORY_AS_BYTES, 768 * MIB, "nvidia-smi, hl-smi, xpu-smi 5.x, cnmon, mx-smi"),
    ("0 MiB", t.MEMORY_AS_BYTES, 0.0, "efsmi -q, xpu-smi -q"),
    ("512Mib", t.MEMORY_AS_BYTES, 512 * MIB, "hl-smi 1.4 table (a 32 GiB HL-205 prints 32768Mib)"),
    ("32768 MB", t.MEMORY_AS_BYTES, 32768 * MIB, "xpu_smi 4.x (an R300 of 32 GiB), hl-smi -L"),
    ("98304 MB", t.MEMORY_AS_BYTES, 98304 * MIB, "hl-smi -L on Gaudi 2 (its table prints 98304MiB)"),
    ("64 GiB", t.MEMORY_AS_BYTES, 64 * 1024 * MIB, "mthreads-gmi"),
    ("16 KiB", t.MEMORY_AS_BYTES, 16 * 1024.0, "kernel-style sizes"),
    ("50 %", t.PERCENT_AS_RATIO, 0.5, "xpu-smi -q, efsmi -q"),
    ("84.1%", t.PERCENT_AS_RATIO, 0.841, "efsmi monitor (with its % unit row), nvidia-smi"),
    ("34C", t.CELSIUS, 34.0, "nvidia-smi, hl-smi, cnmon"),
    ("39 C", t.CELSIUS, 39.0, "efsmi 1.2"),
    ("34℃", t.CELSIUS, 34.0, "efsmi 1.6+"),
    ("34°C", t.CELSIUS, 34.0, "ixsmi"),
    ("108W", t.WATTS, 108.0, "nvidia-smi"),
    ("76.00 W", t.WATTS, 76.0, "xpu-smi -q"),
    ("7000MHz", t.MHZ_AS_HERTZ, 7e9, "efsmi monitor (with its MHz unit row)"),
]


@pytest.mark.parametrize(("printed", "units", "value", "who"), SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_every_spelling_is_read_by_the_one_helper(
    printed: str, units: dict[str, float], value: float, who: str
) -> None:
    assert t.quantity(printed, units, who) == pytest.approx(value)


def test_the_memory_table_holds_exactly_the_listed_spellings() -> None:
    """A spelling added to the table without a line above (or the reverse) fails here."""
    listed = {re.sub(r"^[0-9.]+\s*", "", p) for p, u, _, _ in SPELLINGS if u is t.MEMORY_AS_BYTES}
    assert listed == set(t.MEMORY_AS_BYTES)


@pytest.mark.parametrize("printed", ["512 mib", "512 Mb", "512 MiB/s", "512 TB", "x MiB", "512 W"])
def test_other_spellings_are_refused_not_guessed(printed: str) -> None:
    with pytest.raises(ParseError):
        t.quantity(printed, t.MEMORY_AS_BYTES, "memory")


@pytest.mark.parametrize("printed", ["N/A", "-", "--", "NA"])
def test_unavailable_markers_are_no_reading(printed: str) -> None:
    assert t.quantity(printed, t.MEMORY_AS_BYTES, "memory") is None
