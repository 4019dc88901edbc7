"""Kunlunxin xpu-smi (driver 5.x box) and xpu_smi (driver 4.x DEVICES table): exact per-device values."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.vendors import kunlunxin
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "kunlunxin"
MIB = 1024**2
P800 = (FIX / "xpu-smi_P800_drv5.0.21.21.txt").read_text()
R300 = (FIX / "xpu_smi_R300_rt4.31_drv4.0.txt").read_text()
L3_USED, L3_TOTAL = kunlunxin.L3_USED.name, kunlunxin.L3_TOTAL.name

# (index, bus id, temperature C, power W) per P800 as printed.
P800_ROWS = [
    ("0", "0000:03:00.0", 37.0, 88.0),
    ("1", "0000:05:00.0", 41.0, 90.0),
    ("2", "0000:63:00.0", 36.0, 89.0),
    ("3", "0000:65:00.0", 36.0, 89.0),
    ("4", "0000:83:00.0", 40.0, 88.0),
    ("5", "0000:85:00.0", 40.0, 90.0),
    ("6", "0000:a3:00.0", 39.0, 90.0),
    ("7", "0000:a5:00.0", 40.0, 87.0),
]


def p800(index: str, bus: str, temp: float, power: float) -> DeviceSample:
    return DeviceSample(
        device=Device("kunlunxin", "P800 OAM", index, bus, pci_bus_id=bus, driver_version="5.0.21.21"),
        utilization_ratio=0.0,
        memory_used_bytes=0.0,
        memory_total_bytes=98304 * MIB,
        temperatures_celsius={"core": temp},
        power_watts=power,
        power_limit_watts=400.0,
        ecc_errors={"uncorrected": 0},
        vendor_metrics={L3_USED: 0.0, L3_TOTAL: 96 * MIB},
    )


def r300(index: str, bus: str) -> DeviceSample:
    return DeviceSample(
        device=Device("kunlunxin", "R300", index, bus, pci_bus_id=bus, driver_version="4.0", serial="02Kxxx"),
        utilization_ratio=0.0,
        memory_used_bytes=0.0,
        memory_total_bytes=32768 * MIB,
        vendor_metrics={L3_USED: 0.0, L3_TOTAL: 63 * MIB},
    )


def test_p800_fixture_gives_exact_values_per_xpu() -> None:
    assert list(kunlunxin.parse_v5(P800)) == [p800(*row) for row in P800_ROWS]


def test_r300_fixture_gives_exact_values_per_xpu() -> None:
    assert list(kunlunxin.parse_v4(R300)) == [r300("0", "0000:53:00.0"), r300("1", "0000:56:00.0")]


def test_dispatch_and_sniffers_tell_the_generations_apart() -> None:
    assert kunlunxin.sniff_v5(P800) and not kunlunxin.sniff_v4(P800)
    assert kunlunxin.sniff_v4(R300) and not kunlunxin.sniff_v5(R300)
    assert list(kunlunxin.parse(P800)) == list(kunlunxin.parse_v5(P800))
    assert list(kunlunxin.parse(R300)) == list(kunlunxin.parse_v4(R300))
    with pytest.raises(ParseError):
        kunlunxin.parse("Usage: xpu_smi [options]\n")


def test_p800_busy_card_with_ecc_errors() -> None:
    text = P800.replace(
        "|   0  P800 OAM           N/A   | 00000000:03:00.0 N/A |                    0 |",
        "|   0  P800 OAM           N/A   | 00000000:03:00.0 N/A |                    2 |",
    ).replace(
        "| N/A   37C  N/A     88W / 400W |      0MiB / 98304MiB |      0%      Default |",
        "| N/A   61C  N/A    312W / 400W |  81920MiB / 98304MiB |     97%      Default |",
    )
    first = kunlunxin.parse_v5(text)[0]
    assert first.ecc_errors == {"uncorrected": 2}
    assert first.utilization_ratio == pytest.approx(0.97)
    assert first.memory_used_bytes == 81920 * MIB
    assert (first.temperatures_celsius, first.power_watts) == ({"core": 61.0}, 312.0)


def test_p800_cut_after_three_xpus_keeps_three() -> None:
    cut = P800[: P800.index("00000000:65:00.0")]
    assert [s.device.index for s in kunlunxin.parse_v5(cut)] == ["0", "1", "2"]


def test_r300_cut_mid_row_drops_the_cut_row() -> None:
    cut = R300[: R300.index("0000:56:00.0") + 4]
    assert list(kunlunxin.parse_v4(cut)) == [r300("0", "0000:53:00.0")]


def test_r300_row_with_missing_cells_is_rejected() -> None:
    text = R300.replace("| 02Kxxx | /dev/xpu1  ", "", 1)
    with pytest.raises(ParseError):
        kunlunxin.parse_v4(text)
