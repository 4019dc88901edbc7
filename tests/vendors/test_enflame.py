"""Enflame efsmi table: exact per-GCU values (capacity, DUsed utilization, ECC mode, serial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.vendors import enflame
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "enflame"
MIB = 1024**2
TEXT = (FIX / "efsmi_S60_1.2.0.301.txt").read_text()
ECC = enflame.ECC_ENABLED.name


def s60(index: str, bus: str, sn: str, mem_mib: int, temp: float, power: float, ecc: float) -> DeviceSample:
    return DeviceSample(
        device=Device("enflame", "S60", index, bus, pci_bus_id=bus, driver_version="1.2.0.301", serial=sn),
        utilization_ratio=0.0,
        memory_total_bytes=mem_mib * MIB,
        temperatures_celsius={"core": temp},
        power_watts=power,
        power_limit_watts=300.0,
        vendor_metrics={ECC: ecc},
    )


def test_fixture_gives_exact_values_per_gcu() -> None:
    assert list(enflame.parse(TEXT)) == [
        s60("0", "0000:01:00.0", "SN00000000000", 49120, 39.0, 105.0, 0.0),
        s60("1", "0000:09:00.0", "SN00000000001", 42976, 46.0, 128.0, 1.0),
    ]


def test_memory_used_is_unknown_not_zero() -> None:
    assert all(s.memory_used_bytes is None for s in enflame.parse(TEXT))


def test_busy_gcu_and_unavailable_power() -> None:
    text = TEXT.replace("| 46 C   Active   128W  300W |", "| 46 C   Active   N/A   N/A  |").replace(
        "|   0.0%      SN00000000001 |", "|  87.5%      SN00000000001 |"
    )
    second = enflame.parse(text)[1]
    assert second.utilization_ratio == pytest.approx(0.875)
    assert (second.power_watts, second.power_limit_watts) == (None, None)


def test_cut_output_keeps_the_complete_gcu() -> None:
    cut = TEXT[: TEXT.index("| 46 C")]
    assert [s.device.index for s in enflame.parse(cut)] == ["0"]


def test_banner_without_table_is_rejected() -> None:
    with pytest.raises(ParseError):
        enflame.parse(TEXT[: TEXT.index("+2024")])
