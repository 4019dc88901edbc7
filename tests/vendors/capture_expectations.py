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
