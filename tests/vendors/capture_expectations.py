"""Checks a capture against its hand-written ``<capture>.expected.yaml`` (format in the helpers' BRIEF).

Interim: the corpus test (tests/vendors/test_corpus.py) replaces this once it lands; the Hygon and AMD tests
call ``check`` for their captures meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from vendors.base import DeviceSample
from vendors.registry import all_formats

DEVICE_FIELDS = ("model", "uuid", "pci_bus_id", "driver_version", "serial")


def reading(sample: DeviceSample, name: str) -> Any:
    """A DeviceSample reading by name; mapping fields dotted (``temperatures_celsius.core``)."""
    field, _, key = name.partition(".")
    value = getattr(sample, field)
    if key:
        return value.get(key) if isinstance(value, Mapping) else None
    return value


def check(capture: Path) -> int:
    """Assert that ``capture`` reads as its expectations say; returns the number of values checked."""
    spec = yaml.safe_load(capture.with_name(capture.name + ".expected.yaml").read_text(encoding="utf-8"))
    fmt = all_formats()[spec["format"]]
    text = capture.read_text(encoding="utf-8")
    assert fmt.sniff(text), f"{spec['format']} does not claim {capture.name}"
    samples = {s.device.index: s for s in fmt.parse(text)}
    assert len(samples) == spec["devices"]
    checked = 0
    for index, want in spec.get("device", {}).items():
        s = samples[str(index)]
        assert s.up is want.get("up", True), index
        for name in DEVICE_FIELDS:
            if name in want:
                assert getattr(s.device, name) == want[name], (index, name)
                checked += 1
        for name, value in want.get("values", {}).items():
            assert reading(s, name) == pytest.approx(value, rel=1e-6), (index, name)
            checked += 1
        for name in want.get("absent", []):
            assert reading(s, name) is None, (index, name)
            checked += 1
        for name in want.get("unread", []):
            assert name in s.unread, (index, name)
            checked += 1
        if "unread" not in want:
            assert not s.unread, (index, dict(s.unread))
    return checked


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
