"""Moore Threads mthreads-gmi table: the published excerpt parses into its two complete GPUs exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.vendors import mthreads
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "mthreads"
MIB = 1024**2
TEXT = (FIX / "mthreads-gmi_S5000_2.3.2_excerpt.txt").read_text()


def s5000(index: str, bus: str, used_mib: int, temp: float) -> DeviceSample:
    return DeviceSample(
        device=Device("mthreads", "MTT S5000", index, bus, pci_bus_id=bus, driver_version="3.3.5-server"),
        utilization_ratio=0.0,
        memory_used_bytes=used_mib * MIB,
        memory_total_bytes=81920 * MIB,
        temperatures_celsius={"core": temp},
    )


def test_excerpt_gives_its_two_complete_gpus_exactly() -> None:
    # The excerpt holds the first 2 complete device blocks of a larger table (see its .source).
    assert list(mthreads.parse(TEXT)) == [
        s5000("0", "0000:2a:00.0", 66641, 52.0),
        s5000("1", "0000:3a:00.0", 64889, 51.0),
    ]
    assert all(s.power_watts is None for s in mthreads.parse(TEXT))  # no power column in this view


def test_excerpt_cut_inside_second_block_keeps_the_first() -> None:
    cut = TEXT[: TEXT.index("On-die", TEXT.index("00000000:3a"))]
    assert list(mthreads.parse(cut)) == [s5000("0", "0000:2a:00.0", 66641, 52.0)]


def test_busy_gpu_and_unavailable_temperature() -> None:
    text = TEXT.replace("|0%    66641MiB(81920MiB)", "|93%   80000MiB(81920MiB)", 1).replace(
        "|52C ", "|N/A ", 1
    )
    first = mthreads.parse(text)[0]
    assert first.utilization_ratio == pytest.approx(0.93)
    assert first.memory_used_bytes == 80000 * MIB
    assert first.temperatures_celsius == {}


def test_header_only_is_rejected() -> None:
    with pytest.raises(ParseError):
        mthreads.parse(TEXT[: TEXT.index("+---")])
