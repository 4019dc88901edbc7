"""Implausible readings: exported as printed, counted per device and reason, logged once, never clamped."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from tests.conftest import FIXTURES
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import EMPTY
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.plausibility import REASONS, implausible
from xpuwatch.exporter.poller import BackendPoller, BackendView, PollSettings
from xpuwatch.vendors.base import Device, DeviceSample, Slice
from xpuwatch.vendors.mthreads import parse as parse_mthreads

MIB = 1 << 20
S4000 = (
    FIXTURES
    / "mthreads"
    / "mthreads-gmi_S4000_1.12.2_drv1.2.0_used-exceeds-total-44302of32768_88pct_excerpt.txt"
)
DEV = Device("mthreads", "MTT S4000", "0", "0000:08:00.0")


def test_each_reason_is_counted() -> None:
    odd = DeviceSample(
        DEV,
        utilization_ratio=1.2,
        sm_active_ratio=1.01,
        memory_used_bytes=44302 * MIB,
        memory_total_bytes=32768 * MIB,
        power_watts=-5.0,
        temperatures_celsius={"core": 65.0, "hotspot": 255.0},
        clocks_hertz={"sm": -1.0},
        slices=(Slice("0000:08:00.0", "v1", "vgpu", "vgpu", None, 3.0, 2.0, 1.5),),
    )
    assert implausible(odd) == (
        ("used_above_total", 2),
        ("ratio_above_one", 3),
        ("negative_power", 1),
        ("temperature_above_150c", 1),
        ("negative_value", 1),
    )
    assert [r for r, _ in implausible(odd)] == list(REASONS)
    edge = DeviceSample(
        DEV,
        utilization_ratio=1.0,
        memory_used_bytes=1.0,
        memory_total_bytes=1.0,
        power_watts=0.0,
        temperatures_celsius={"core": 150.0},
    )
    assert implausible(edge) == ()
    assert implausible(DeviceSample.lost(DEV, "gone")) == ()


def test_used_above_total_is_exported_as_printed_and_counted() -> None:
    (s,) = parse_mthreads(S4000.read_text())
    assert (s.memory_used_bytes, s.memory_total_bytes) == (
        44302 * MIB,
        32768 * MIB,
    )  # not clamped, not swapped
    view = BackendView("mthreads", True, (s,), 1, None, None, {}, 0, True)
    fams = {f.name: f for f in families("n1", [view], EMPTY, None)}
    assert [x.value for x in fams[C.MEMORY_USED].samples] == [44302 * MIB]
    assert [x.value for x in fams[C.MEMORY_TOTAL].samples] == [32768 * MIB]
    (odd,) = fams[C.IMPLAUSIBLE].samples
    assert (
        odd.labels["reason"] == "used_above_total" and odd.labels["uuid"] == "0000:08:00.0" and odd.value == 1
    )


def test_plausible_devices_give_no_series() -> None:
    s = DeviceSample(DEV, utilization_ratio=0.5, memory_used_bytes=1.0, memory_total_bytes=2.0)
    view = BackendView("mthreads", True, (s,), 1, None, None, {}, 0, True)
    assert C.IMPLAUSIBLE not in {f.name for f in families("n1", [view], EMPTY, None)}


class OddBackend:
    name = "odd"

    def open(self) -> None:
        pass

    def sample(self) -> Sequence[DeviceSample]:
        return [
            DeviceSample(DEV, memory_used_bytes=44302 * MIB, memory_total_bytes=32768 * MIB, power_watts=-1.0)
        ]

    def close(self) -> None:
        pass


def test_each_device_and_reason_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    p = BackendPoller(
        OddBackend(), PollSettings(interval=1, timeout=30), lambda: 1000.0, monotonic=lambda: 0.0
    )
    with caplog.at_level(logging.WARNING, logger="xpuwatch.exporter.poller"):
        for _ in range(3):
            p.poll_once()
    lines = [r.getMessage() for r in caplog.records if "implausible" in r.getMessage()]
    assert lines == [
        "backend odd: device 0 (0000:08:00.0) reads used_above_total (memory used 46454013952 B > total "
        "34359738368 B): exported as printed, counted in xpuwatch_implausible_readings",
        "backend odd: device 0 (0000:08:00.0) reads negative_power (power -1.0 W, limit None W): exported as "
        "printed, counted in xpuwatch_implausible_readings",
    ]
