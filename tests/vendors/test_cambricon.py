"""Cambricon cnmon table: fixture in, exact per-device values out; edge cases of the layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.vendors import cambricon
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "cambricon"
MIB = 1024**2
TEXT = (FIX / "cnmon_MLU370-X8_v5.10.13.txt").read_text()


def mlu(index: str, bus: str, temp: float) -> DeviceSample:
    return DeviceSample(
        device=Device("cambricon", "MLU370-X8", index, bus, pci_bus_id=bus, driver_version="5.10.13"),
        utilization_ratio=0.0,
        memory_used_bytes=0.0,
        memory_total_bytes=23374 * MIB,
        temperatures_celsius={"core": temp},
        power_watts=106.0,
        power_limit_watts=250.0,
    )


def test_fixture_gives_exact_values_per_card() -> None:
    assert list(cambricon.parse(TEXT)) == [mlu("0", "0000:39:00.0", 32.0), mlu("1", "0000:3d:00.0", 39.0)]


def test_sniff_claims_cnmon() -> None:
    assert cambricon.sniff(TEXT)


def test_ecc_count_becomes_vendor_metric_and_na_gives_none() -> None:
    text = TEXT.replace("| 0%                N/A |", "| 37%                 3 |", 1)
    text = text.replace("|  0%   32C        106 W/ 250 W |", "|  0%   N/A        N/A / N/A     |", 1)
    first, second = cambricon.parse(text)
    assert first.utilization_ratio == pytest.approx(0.37)
    assert first.vendor_metrics == {cambricon.ECC_ERRORS.name: 3.0}
    assert first.temperatures_celsius == {}
    assert (first.power_watts, first.power_limit_watts) == (None, None)
    assert second == mlu("1", "0000:3d:00.0", 39.0)


def test_sr_iov_virtual_function_row_is_its_own_device() -> None:
    text = TEXT.replace("| 1     /   MLU370-X8    v1.1.6 |", "| 0     1   MLU370-X8    v1.1.6 |")
    vf = cambricon.parse(text)[1].device
    assert (vf.index, vf.uuid, vf.pci_bus_id) == ("0-1", "0000:3d:00.0-vf1", "0000:3d:00.0")


def test_garbled_reading_costs_only_that_reading() -> None:
    text = TEXT.replace("32C", "3#C", 1)
    first, second = cambricon.parse(text)
    assert first.up and first.error is None
    assert first.temperatures_celsius == {}
    assert (
        set(first.unread) == {"temperatures_celsius.core"}
        and "'3#C'" in first.unread["temperatures_celsius.core"]
    )
    assert (first.power_watts, first.memory_total_bytes) == (106.0, 23374 * 2**20)
    assert first.device.uuid == "0000:39:00.0"
    assert second == mlu("1", "0000:3d:00.0", 39.0)


def test_table_cut_inside_second_card_keeps_the_first() -> None:
    cut = TEXT[: TEXT.index("0000:3D:00.0") + 5]
    assert list(cambricon.parse(cut)) == [mlu("0", "0000:39:00.0", 32.0)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Invalid card id.\n",
        "cnmon: error while loading shared libraries: libcndev.so: cannot open shared object file\n",
        TEXT[:300],
    ],
)
def test_usage_text_and_cut_header_are_parse_errors(text: str) -> None:
    with pytest.raises(ParseError):
        cambricon.parse(text)
