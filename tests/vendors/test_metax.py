"""MetaX mx-smi table: exact per-GPU values; MOFFETT's mx-smi (same tool name) is never read as MetaX."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.vendors import metax
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

FIX = Path(__file__).parents[1] / "fixtures" / "metax"
MIB = 1024**2
TEXT = (FIX / "mx-smi_C550_2.2.4.txt").read_text()

# (index, bus id, temperature C, power W) per C550 as printed.
ROWS = [
    ("0", "0000:0f:00.0", 29.0, 53.0),
    ("1", "0000:34:00.0", 29.0, 53.0),
    ("2", "0000:48:00.0", 30.0, 54.0),
    ("3", "0000:5a:00.0", 29.0, 54.0),
    ("4", "0000:87:00.0", 30.0, 53.0),
    ("5", "0000:ae:00.0", 32.0, 55.0),
    ("6", "0000:c2:00.0", 32.0, 56.0),
    ("7", "0000:d7:00.0", 31.0, 56.0),
]

# Synthetic: the first lines of MOFFETT's SPU tool as its user guide names it ("MOFFETT-SMI" header,
# https://docs.moffettai.com/moffett_docs/macs-1.1.4/tool/smi-userguide.html); not a capture.
MOFFETT = (
    "+----------------------------------------------+\n| MOFFETT-SMI  v1.1.4   Driver Version: 1.1.4   |\n"
)


def c550(index: str, bus: str, temp: float, power: float) -> DeviceSample:
    return DeviceSample(
        device=Device("metax", "MetaX C550", index, bus, pci_bus_id=bus, driver_version="2.15.9"),
        utilization_ratio=0.0,
        memory_used_bytes=858 * MIB,
        memory_total_bytes=65536 * MIB,
        temperatures_celsius={"core": temp},
        power_watts=power,
        power_limit_watts=450.0,
    )


def test_fixture_gives_exact_values_per_gpu() -> None:
    assert list(metax.parse(TEXT)) == [c550(*row) for row in ROWS]


def test_moffett_tool_is_not_metax() -> None:
    assert metax.sniff(TEXT)
    assert not metax.sniff(MOFFETT)
    assert not metax.sniff(MOFFETT + TEXT)
    with pytest.raises(ParseError, match="MOFFETT"):
        metax.parse(MOFFETT)


def test_busy_gpu_with_unit_printed_once() -> None:
    text = TEXT.replace(
        "| 29C         53W / 450W             | 858/65536 MiB       | Available            |",
        "| 71C         398W / 450W            | 60123/65536 MiB     | Available            |",
        1,
    ).replace("| 0%                   |", "| 88%                  |", 1)
    first = metax.parse(text)[0]
    assert first.utilization_ratio == pytest.approx(0.88)
    assert (first.memory_used_bytes, first.power_watts) == (60123 * MIB, 398.0)
    assert first.temperatures_celsius == {"core": 71.0}


def test_cut_output_keeps_complete_gpus() -> None:
    cut = TEXT[: TEXT.index("| 3           MetaX C550")]
    assert [s.device.index for s in metax.parse(cut)] == ["0", "1", "2"]
