"""Iluvatar ixsmi table: exact per-GPU values, including the BI-V150 dies that print N/A power."""

from __future__ import annotations

from pathlib import Path

import pytest

from vendors import iluvatar
from vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "iluvatar"
MIB = 1024**2
TEXT = (FIX / "ixsmi_BI-V150_4.3.0.txt").read_text()

# (index, bus id, temperature C, power W or None) per BI-V150 as printed; cap is 350 W where power is shown.
ROWS = [
    ("0", "0000:13:00.0", 35.0, None),
    ("1", "0000:16:00.0", 34.0, 103.0),
    ("2", "0000:1c:00.0", 35.0, None),
    ("3", "0000:1f:00.0", 34.0, 106.0),
    ("4", "0000:27:00.0", 35.0, None),
    ("5", "0000:2a:00.0", 35.0, 105.0),
    ("6", "0000:34:00.0", 34.0, None),
    ("7", "0000:37:00.0", 34.0, 106.0),
    ("8", "0000:3d:00.0", 34.0, None),
    ("9", "0000:40:00.0", 35.0, 107.0),
    ("10", "0000:48:00.0", 34.0, None),
    ("11", "0000:4b:00.0", 33.0, 103.0),
    ("12", "0000:54:00.0", 34.0, None),
    ("13", "0000:57:00.0", 35.0, 104.0),
    ("14", "0000:64:00.0", 35.0, None),
    ("15", "0000:67:00.0", 36.0, 107.0),
]


def bi_v150(index: str, bus: str, temp: float, power: float | None) -> DeviceSample:
    return DeviceSample(
        device=Device("iluvatar", "Iluvatar BI-V150", index, bus, pci_bus_id=bus, driver_version="4.3.0"),
        utilization_ratio=0.0,
        memory_used_bytes=64 * MIB,
        memory_total_bytes=32768 * MIB,
        temperatures_celsius={"core": temp},
        power_watts=power,
        power_limit_watts=None if power is None else 350.0,
        clocks_hertz={"sm": 1500e6, "memory": 1600e6},
    )


def test_fixture_gives_exact_values_per_gpu() -> None:
    assert list(iluvatar.parse(TEXT)) == [bi_v150(*row) for row in ROWS]


def test_na_power_is_none_never_zero() -> None:
    samples = iluvatar.parse(TEXT)
    assert [s.power_watts for s in samples[:2]] == [None, 103.0]
    assert all(s.up for s in samples)


def test_nvidia_smi_is_not_claimed() -> None:
    nvidia_like = TEXT.replace("IX-ML: 4.3.0 ", "NVIDIA-SMI 535")
    assert not iluvatar.sniff(nvidia_like)
    with pytest.raises(ParseError):
        iluvatar.parse(nvidia_like)


def test_cut_output_keeps_complete_gpus() -> None:
    cut = TEXT[: TEXT.index("| 5    Iluvatar")] + "| 5    Iluv"
    assert [s.device.index for s in iluvatar.parse(cut)] == ["0", "1", "2", "3", "4"]
