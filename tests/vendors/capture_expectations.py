"""Helpers of the Hygon and AMD tests: which captures of a folder have expectations, and the check that a
spoiled value costs exactly one reading. The expectations themselves are checked by tests/vendors/test_corpus.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xpuwatch.vendors.base import DeviceSample

DEVICE_FIELDS = ("model", "uuid", "pci_bus_id", "driver_version", "serial")


def reading(sample: DeviceSample, name: str) -> Any:
    """A DeviceSample reading by name; mapping fields dotted (``temperatures_celsius.core``)."""
    field, _, key = name.partition(".")
    value = getattr(sample, field)
    if key:
        return value.get(key) if isinstance(value, Mapping) else None
    return value


def captures(directory: Path) -> list[Path]:
    """Every capture in ``directory`` that has an expectations file."""
    return sorted(
        p.with_name(p.name.removesuffix(".expected.yaml")) for p in directory.glob("*.expected.yaml")
    )


_SCALARS = (
    "utilization_ratio",
    "memory_bandwidth_utilization_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_used_ratio",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "pcie_replay_errors",
)
_MAPPINGS = ("temperatures_celsius", "clocks_hertz", "ecc_errors", "vendor_metrics")


def flat(sample: DeviceSample) -> dict[str, float]:
    """Every reading of ``sample`` by name (mapping fields dotted), None-valued ones left out."""
    out = {n: float(v) for n in _SCALARS if (v := getattr(sample, n)) is not None}
    for m in _MAPPINGS:
        out.update({f"{m}.{k}": float(v) for k, v in getattr(sample, m).items()})
    return out


def assert_one_reading_lost(base: DeviceSample, got: DeviceSample, garbled: bool) -> None:
    """``got`` (one value of ``base``'s output spoiled) keeps the device up and every other reading; a
    garbled value is reported unread, an "N/A"/"-" one is not."""
    assert got.up and got.device == base.device
    before, after = flat(base), flat(got)
    lost = set(before) - set(after)
    if lost & {"memory_used_bytes", "memory_total_bytes"} and "memory_used_ratio" not in before:
        after.pop("memory_used_ratio", None)  # without bytes the tool's own percentage takes over, by design
    assert {k: before[k] for k in after} == after, "a reading changed"
    assert len(lost) <= 1, lost
    if garbled and lost:
        assert got.unread, f"{lost} dropped without an unread entry"
    if not garbled:
        assert not got.unread, dict(got.unread)
