"""Iluvatar ixsmi table: exact per-GPU values, including the BI-V150 dies that print N/A power."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import iluvatar
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

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


# Synthetic, not a capture: what `ixsmi --query-gpu=<CSV_FIELDS> --format=csv` prints if ixsmi follows
# nvidia-smi's CSV conventions (header "field [unit]", "<n> <unit>" cells, "[N/A]"), filled with the values
# of GPUs 0 and 1 of the BI-V150 table fixture. No real ixsmi CSV capture was found (vendors.md 3.6).
CSV = """index, name, pci.bus_id, driver_version, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], temperature.gpu, board.power.draw [W]
0, Iluvatar BI-V150, 00000000:13:00.0, 4.3.0, 0 %, 0 %, 64 MiB, 32768 MiB, 35, [N/A]
1, Iluvatar BI-V150, 00000000:16:00.0, 4.3.0, 12 %, 3 %, 64 MiB, 32768 MiB, 34, 103.00 W
"""


def test_csv_mode_reads_the_same_devices_by_header() -> None:
    assert iluvatar.sniff_csv(CSV) and not iluvatar.sniff(CSV) and not iluvatar.sniff_csv(TEXT)
    first, second = iluvatar.parse_csv(CSV)
    table = iluvatar.parse(TEXT)
    assert (first.device, second.device) == (table[0].device, table[1].device)
    assert first == DeviceSample(
        device=first.device,
        utilization_ratio=0.0,
        memory_bandwidth_utilization_ratio=0.0,
        memory_used_bytes=64 * MIB,
        memory_total_bytes=32768 * MIB,
        temperatures_celsius={"core": 35.0},
    )
    assert second.power_watts == 103.0
    assert second.utilization_ratio == pytest.approx(0.12)
    assert second.memory_bandwidth_utilization_ratio == pytest.approx(0.03)


def test_csv_nounits_and_missing_identity() -> None:
    nounits = "index, name, pci.bus_id, memory.used [MiB]\n0, Iluvatar BI-V150, 00000000:13:00.0, 64\n"
    assert iluvatar.parse_csv(nounits)[0].memory_used_bytes == 64 * MIB
    other_units = "index, name, pci.bus_id, memory.total [MiB], temperature.gpu\n0, Iluvatar BI-V150, 0000:13:00.0, 32 GiB, 35 C\n"
    gpu = iluvatar.parse_csv(other_units)[0]
    assert (gpu.memory_total_bytes, gpu.temperatures_celsius) == (32768 * MIB, {"core": 35.0})
    with pytest.raises(ParseError):
        iluvatar.parse_csv("index, name\n0, Iluvatar BI-V150\n")
    with pytest.raises(ParseError):
        iluvatar.parse_csv('Field "board.power.draw" is not a valid field to query.\n')


def test_backend_mode_csv_runs_the_query() -> None:
    from xpuwatch.vendors.command import CommandResult
    from xpuwatch.vendors.registry import BackendContext, all_specs

    class Runner:
        argv: tuple[str, ...] = ()

        def which(self, tool: str) -> str | None:
            return tool

        def run(self, argv: object, timeout: float) -> CommandResult:
            Runner.argv = tuple(argv)  # type: ignore[call-overload]
            return CommandResult(Runner.argv, CSV, "", 0, 0.0, 0.0)

    backend = all_specs()["iluvatar"].create(BackendContext(runner=Runner(), options={"mode": "csv"}))
    assert len(backend.sample()) == 2
    assert Runner.argv == ("ixsmi", *iluvatar.CSV_ARGS)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, len(CSV)), at=st.integers(0, len(CSV)), junk=st.text(max_size=30))
def test_csv_damaged_raises_nothing_but_parse_error(cut: int, at: int, junk: str) -> None:
    text = (CSV[:at] + junk + CSV[at:])[: cut + len(junk)]
    try:
        samples = iluvatar.parse_csv(text)
    except ParseError:
        return
    assert all(isinstance(s, DeviceSample) for s in samples)
