"""AMD-family tool values into base units: numbers with units, "N/A" markers, device ids, JSON loading.

Vendor layer, shared by every AMD reader (amdsmi library, amd-smi JSON/monitor, rocm-smi JSON) and by the
Hygon DTK tools (a rocm-smi fork). Pure functions; no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from xpuwatch.vendors.base import DeviceSample, ParseError, VendorMetric

VENDOR = "amd"
UNKNOWN_MODEL = "unknown"

ECC_DEFERRED = VendorMetric(
    name="accelerator_amd_ecc_deferred_errors_total",
    type="counter",
    unit="",
    help="ECC errors the GPU deferred (poisoned, to be handled on consumption) since the driver was loaded.",
    source="amdsmi_get_gpu_total_ecc_count().deferred_count; amd-smi metric --json ecc.total_deferred_count",
)

# ---------------------------------------------------------------------------------------------------
# Values and units


# Scale to base unit, by lower-cased unit text. Memory "MB" is MiB on AMD and Hygon tools (see module doc).
_SCALES: dict[str, dict[str, tuple[float, float]]] = {
    # unit -> (multiplier, divisor); dividing keeps 41 % == 0.41 and 53 mW == 0.053 exact in binary floats
    "power": {"w": (1, 1), "mw": (1, 1e3), "uw": (1, 1e6), "µw": (1, 1e6), "μw": (1, 1e6), "kw": (1e3, 1)},
    "energy": {"j": (1, 1), "mj": (1, 1e3), "uj": (1, 1e6), "µj": (1, 1e6), "μj": (1, 1e6), "kj": (1e3, 1)},
    "bytes": {
        "b": (1, 1),
        "kb": (1024, 1),
        "kib": (1024, 1),
        "mb": (1024**2, 1),
        "mib": (1024**2, 1),
        "gb": (1024**3, 1),
        "gib": (1024**3, 1),
    },
    "celsius": {"c": (1, 1), "°c": (1, 1), "℃": (1, 1), "mc": (1, 1e3), "m°c": (1, 1e3)},
    "hertz": {"hz": (1, 1), "khz": (1e3, 1), "mhz": (1e6, 1), "ghz": (1e9, 1)},
    "percent": {"%": (1, 100)},
}

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\d\s].*?)?\s*$")


def is_na(value: object) -> bool:
    """True for the vendors' "no reading" markers: None, "N/A", "N/A (Secondary die)", "", "Unsupported"."""
    if value is None:
        return True
    if isinstance(value, str):
        v = value.strip().lower()
        return v == "" or v.startswith("n/a") or v in {"na", "none", "-", "unsupported", "not supported"}
    return False


def finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def quantity(raw: object) -> tuple[float, str | None] | None:
    """A reading as (number, unit or None); None when it is "N/A" or not a number.

    Accepts amd-smi ``{"value": x, "unit": u}`` (x a number or a numeric string), a bare number, and
    strings such as ``"45.0"``, ``"199 W"``, ``"103 °C"``, ``"30.0c"``. Booleans are not numbers.
    """
    unit: str | None = None
    if isinstance(raw, Mapping):
        u = raw.get("unit")
        unit = u.strip() if isinstance(u, str) and u.strip() else None
        raw = raw.get("value")
    if isinstance(raw, bool) or is_na(raw):
        return None
    if isinstance(raw, int | float):
        try:
            x = finite(float(raw))
        except OverflowError:
            return None
        return None if x is None else (x, unit)
    if isinstance(raw, str):
        m = _NUMBER.match(raw)
        if not m:
            return None
        try:
            x = finite(float(m.group(1)))
        except (OverflowError, ValueError):
            return None
        if x is None:
            return None
        return x, (m.group(2) or unit)
    return None


@dataclass
class Notes:
    """Per-device problems met while reading one device: ``items`` (joined into ``DeviceSample.error``) and
    ``unread`` (reading -> reason, ``DeviceSample.unread``: a printed value that could not be read)."""

    items: list[str] = field(default_factory=list)
    unread: dict[str, str] = field(default_factory=dict)

    def add(self, text: str) -> None:
        if text not in self.items:
            self.items.append(text)

    def drop(self, reading: str, reason: str) -> None:
        """One printed reading could not be read: it is dropped (no series) and named in ``unread``."""
        self.unread.setdefault(reading, reason[:120])
        self.add(f"{reading}: {reason}"[:160])

    def text(self) -> str | None:
        return "; ".join(self.items) if self.items else None


def printed(raw: object) -> bool:
    """True when the tool printed something for this reading that is not an "N/A" marker."""
    if isinstance(raw, Mapping):
        raw = raw.get("value")
    return not is_na(raw)


def _shown(raw: object) -> str:
    if isinstance(raw, Mapping):
        raw = raw.get("value")
    return repr(raw)[:40]


def scaled(
    raw: object, kind: str, default_unit: str | None, notes: Notes, what: str, field: str | None = None
) -> float | None:
    """``raw`` in the base unit of ``kind`` (power W, energy J, bytes, celsius, percent -> 0..1 ratio).

    A reading without a unit takes ``default_unit``. "N/A" markers are None. A printed value that is not a
    number, has no or an unknown unit is None and recorded in ``notes.unread`` under ``field`` (a
    DeviceSample field name; else ``what``, the tool's key or column).
    """
    key = field or what
    q = quantity(raw)
    if q is None:
        if printed(raw):
            notes.drop(key, f"{what}: {_shown(raw)} is not a number")
        return None
    x, unit = q
    unit = unit if unit is not None else default_unit
    if unit is None:
        notes.drop(key, f"{what}: no unit")
        return None
    scale = _SCALES[kind].get(unit.strip().lower().replace(" ", ""))
    if scale is None:
        notes.drop(key, f"{what}: unknown unit {unit[:20]!r}")
        return None
    mult, div = scale
    return finite(x * mult / div)


def ratio(raw: object, notes: Notes, what: str, field: str | None = None) -> float | None:
    """A percentage (0..100, unit "%" or none) as a 0..1 ratio; out-of-range values are dropped (unread)."""
    r = scaled(raw, "percent", "%", notes, what, field)
    if r is None:
        return None
    if not 0.0 <= r <= 1.0:
        notes.drop(field or what, f"{what}: {r * 100:g}% out of range")
        return None
    return r


def nonneg(x: float | None, notes: Notes, what: str, field: str | None = None) -> float | None:
    """Drop negative readings (memory, power, energy cannot be negative): unread."""
    if x is not None and x < 0:
        notes.drop(field or what, f"{what}: negative")
        return None
    return x


def amount(
    raw: object, kind: str, default_unit: str | None, notes: Notes, what: str, field: str
) -> float | None:
    """``scaled`` then ``nonneg``: a quantity that cannot be negative (bytes, watts, joules, hertz)."""
    return nonneg(scaled(raw, kind, default_unit, notes, what, field), notes, what, field)


def count(raw: object, notes: Notes | None = None, field: str | None = None) -> int | None:
    """A cumulative count (ECC, PCIe replays): a non-negative integer without a unit, else None.

    With ``notes``, a printed value that is no such count is recorded as unread under ``field``.
    """
    q = quantity(raw)
    if q is None or q[1] is not None or q[0] < 0 or q[0] != int(q[0]) or q[0] > 2**63:
        if notes is not None and field is not None and printed(raw):
            notes.drop(field, f"{_shown(raw)} is not a count")
        return None
    return int(q[0])


def text(raw: object) -> str | None:
    """A printable identity string, None for "N/A" and non-strings."""
    if isinstance(raw, Mapping):
        raw = raw.get("value")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    if not isinstance(raw, str) or is_na(raw):
        return None
    s = raw.strip()
    return s[:200] if s.isprintable() else None


def device_uuid(
    vendor: str, index: str, unique_id: object = None, serial: object = None, bdf: object = None
) -> str:
    """Stable device id: unique (ASIC) id as ``0x%016x``, else serial, else ``pci-<bdf>``, else index.

    An all-zero unique id is treated as absent (virtual functions and masked captures report zeros).
    """
    uid = text(unique_id)
    if uid:
        try:
            n = int(uid, 16)
        except ValueError:
            return uid
        if n != 0:
            return f"0x{n:016x}"
    sn = text(serial)
    if sn and sn.strip("0"):
        return sn
    bus = text(bdf)
    if bus:
        return f"pci-{bus.lower()}"
    return f"{vendor}-index-{index}"


def load_json(raw: str, what: str) -> object:
    """Parse a tool's JSON, skipping banner lines before it (watch mode prints one). Raises ParseError."""
    start = next(
        (i for i, line in enumerate(raw.splitlines(keepends=True)) if line.lstrip()[:1] in ("[", "{")),
        None,
    )
    if start is None:
        raise ParseError(f"{what}: no JSON in the output")
    body = "".join(raw.splitlines(keepends=True)[start:])
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"{what}: invalid JSON: {str(exc)[:120]}") from exc


def with_notes(sample: DeviceSample, notes: Notes) -> DeviceSample:
    """``sample`` with the notes as ``error`` and the unread readings as ``unread``."""
    if not notes.items and not notes.unread:
        return sample
    return replace(sample, error=notes.text(), unread={**sample.unread, **notes.unread})
