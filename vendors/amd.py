"""AMD GPUs (Instinct, Radeon) into DeviceSamples: the amdsmi library, else amd-smi or rocm-smi JSON.

Vendor layer. Three sources, tried in this order by ``AmdBackend`` (``options["source"]`` pins one):

1. the ``amdsmi`` Python package (ROCm ``py-interface``: ``amdsmi_interface.py``), read per call;
2. ``amd-smi metric --json`` each poll plus ``amd-smi static --json`` for identity and power cap;
3. ``rocm-smi ... --json`` (deprecated by AMD, still the only tool on older hosts; ``ROCM_SMI_ARGS``,
   falling back to ``ROCM_SMI_MINIMAL_ARGS`` if the tool refuses a flag).

Every number is converted to base units by reading its unit (amd-smi ``{"value", "unit"}`` pairs, the
``(B)``/``(MiB)``/``(uJ)`` suffix of rocm-smi keys). AMD's "MB" is 2**20 bytes: ``amd_smi.cc`` divides
bytes by 1024*1024 (ROCm/amdsmi ``src/amd_smi/amd_smi.cc``, ``amdsmi_get_gpu_vram_usage``). Anything
"N/A" (a bare "N/A", "N/A (Secondary die)", a whole "N/A" section), non-finite, or out of range becomes
``None``: never a made-up 0.

Device identity. ``uuid`` is the ASIC's unique id (amdsmi ``asic_info["asic_serial"]``, amd-smi static
``asic.asic_serial``, rocm-smi ``Unique ID``: the same 64-bit value in all three), written ``0x%016x``;
when it is absent or all zero: the board serial; else ``pci-<bdf>``; else ``amd-index-<n>`` (stable only
while enumeration order is). An MI250X's two GCDs are two devices (two amd-smi entries, two rocm-smi
cards); the secondary GCD reports power as "N/A (Secondary die)" and the primary reports the package.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vendors.base import BackendError, Device, DeviceSample, ParseError, VendorMetric
from vendors.command import CommandRunner, SubprocessRunner
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

log = logging.getLogger(__name__)

VENDOR = "amd"
UNKNOWN_MODEL = "unknown"
DEFAULT_TIMEOUT_SECONDS = 10.0
# amd-smi static is slow (VBIOS, RAS reads) and nearly constant: refreshed every this many polls.
STATIC_REFRESH_POLLS = 60

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
    "celsius": {"c": (1, 1), "°c": (1, 1), "mc": (1, 1e3), "m°c": (1, 1e3)},
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


def _finite(x: float) -> float | None:
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
            x = _finite(float(raw))
        except OverflowError:
            return None
        return None if x is None else (x, unit)
    if isinstance(raw, str):
        m = _NUMBER.match(raw)
        if not m:
            return None
        try:
            x = _finite(float(m.group(1)))
        except (OverflowError, ValueError):
            return None
        if x is None:
            return None
        return x, (m.group(2) or unit)
    return None


@dataclass
class Notes:
    """Per-device problems met while reading (unknown units, out-of-range values), joined into ``error``."""

    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if text not in self.items:
            self.items.append(text)

    def text(self) -> str | None:
        return "; ".join(self.items) if self.items else None


def scaled(raw: object, kind: str, default_unit: str | None, notes: Notes, what: str) -> float | None:
    """``raw`` in the base unit of ``kind`` (power W, energy J, bytes, celsius, percent -> 0..1 ratio).

    A reading without a unit takes ``default_unit``; one with an unknown unit is dropped with a note.
    """
    q = quantity(raw)
    if q is None:
        return None
    x, unit = q
    unit = unit if unit is not None else default_unit
    if unit is None:
        notes.add(f"{what}: no unit")
        return None
    scale = _SCALES[kind].get(unit.strip().lower().replace(" ", ""))
    if scale is None:
        notes.add(f"{what}: unknown unit {unit[:20]!r}")
        return None
    mult, div = scale
    return _finite(x * mult / div)


def ratio(raw: object, notes: Notes, what: str) -> float | None:
    """A percentage (0..100, unit "%" or none) as a 0..1 ratio; out-of-range values are dropped with a note."""
    r = scaled(raw, "percent", "%", notes, what)
    if r is None:
        return None
    if not 0.0 <= r <= 1.0:
        notes.add(f"{what}: {r * 100:g}% out of range")
        return None
    return r


def nonneg(x: float | None, notes: Notes, what: str) -> float | None:
    """Drop negative readings (memory, power, energy cannot be negative)."""
    if x is not None and x < 0:
        notes.add(f"{what}: negative")
        return None
    return x


def count(raw: object) -> int | None:
    """A cumulative count (ECC, PCIe replays): a non-negative integer without a unit, else None."""
    q = quantity(raw)
    if q is None or q[1] is not None:
        return None
    x = q[0]
    if x < 0 or x != int(x) or x > 2**63:
        return None
    return int(x)


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


# ---------------------------------------------------------------------------------------------------
# amd-smi JSON


@dataclass(frozen=True)
class Identity:
    """What ``amd-smi static`` (or amdsmi's info calls) says about one GPU: identity and power cap."""

    model: str | None = None
    unique_id: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    power_limit_watts: float | None = None


def amd_smi_entries(doc: object, what: str = "amd-smi") -> list[tuple[str, Mapping[str, Any]]]:
    """The per-GPU objects of an amd-smi JSON document, as (gpu index, object), last one per index.

    Both shapes: a top-level list ``[{"gpu": 0, ...}]`` (amd-smi < 26) and ``{"gpu_data": [...]}``
    (amd-smi >= 26, ROCm 7). Watch mode repeats indexes; the last entry wins. Raises ParseError.
    """
    if isinstance(doc, Mapping):
        if "gpu_data" not in doc:
            raise ParseError(f"{what}: JSON object without 'gpu_data'")
        doc = doc["gpu_data"]
    if not isinstance(doc, list):
        raise ParseError(f"{what}: expected a list of GPUs")
    out: dict[str, Mapping[str, Any]] = {}
    for i, entry in enumerate(doc):
        if not isinstance(entry, Mapping):
            raise ParseError(f"{what}: entry {i} is not an object")
        gpu = entry.get("gpu")
        if isinstance(gpu, bool) or not isinstance(gpu, int | str) or not str(gpu).strip().isdigit():
            raise ParseError(f"{what}: entry {i} has no integer 'gpu' index")
        out[str(int(str(gpu).strip()))] = entry
    return sorted(out.items(), key=lambda kv: int(kv[0]))


def _section(entry: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    sec = entry.get(name)
    return sec if isinstance(sec, Mapping) else {}


def parse_amd_smi_static(raw: str) -> dict[str, Identity]:
    """``amd-smi static --json`` -> {gpu index: Identity}. Raises ParseError.

    model: ``board.product_name`` (``asic.market_name`` can be generic), else ``asic.market_name``;
    unique id ``asic.asic_serial``; serial ``board.product_serial``; ``bus.bdf``; ``driver.version``;
    power cap ``limit.socket_power`` (older: ``limit.power_cap``), unit-aware.
    """
    out: dict[str, Identity] = {}
    for idx, entry in amd_smi_entries(load_json(raw, "amd-smi static"), "amd-smi static"):
        asic, board, bus = _section(entry, "asic"), _section(entry, "board"), _section(entry, "bus")
        limit, driver = _section(entry, "limit"), _section(entry, "driver")
        notes = Notes()
        cap_raw = limit.get("socket_power", limit.get("power_cap"))
        out[idx] = Identity(
            model=text(board.get("product_name")) or text(asic.get("market_name")),
            unique_id=text(asic.get("asic_serial")),
            serial=text(board.get("product_serial")),
            pci_bus_id=text(bus.get("bdf")),
            driver_version=text(driver.get("version")),
            power_limit_watts=nonneg(scaled(cap_raw, "power", "W", notes, "power cap"), notes, "cap"),
        )
    return out


def _amd_device(vendor: str, idx: str, ident: Identity | None) -> Device:
    ident = ident or Identity()
    return Device(
        vendor=vendor,
        model=ident.model or UNKNOWN_MODEL,
        index=idx,
        uuid=device_uuid(vendor, idx, ident.unique_id, ident.serial, ident.pci_bus_id),
        pci_bus_id=ident.pci_bus_id,
        driver_version=ident.driver_version,
        serial=ident.serial,
    )


def _first(sec: Mapping[str, Any], *keys: str) -> object:
    """The first key of ``sec`` holding a reading (amd-smi renamed fields across releases)."""
    for k in keys:
        if k in sec and quantity(sec[k]) is not None:
            return sec[k]
    return None


def amd_smi_sample(idx: str, entry: Mapping[str, Any], ident: Identity | None = None) -> DeviceSample:
    """One ``amd-smi metric --json`` GPU object -> DeviceSample (see docs/vendors/amd.md for the map)."""
    notes = Notes()
    usage, power = _section(entry, "usage"), _section(entry, "power")
    temp, mem = _section(entry, "temperature"), _section(entry, "mem_usage")
    energy, ecc, pcie = _section(entry, "energy"), _section(entry, "ecc"), _section(entry, "pcie")
    temps = {
        sensor: t
        for sensor, key in (("core", "edge"), ("hotspot", "hotspot"), ("memory", "mem"))
        if (t := scaled(temp.get(key), "celsius", "C", notes, f"temperature.{key}")) is not None
    }
    ecc_counts = {
        kind: n
        for kind, key in (
            ("corrected", "total_correctable_count"),
            ("uncorrected", "total_uncorrectable_count"),
        )
        if (n := count(ecc.get(key))) is not None
    }
    deferred = count(ecc.get("total_deferred_count"))
    clocks = amd_smi_clocks(_section(entry, "clock"), notes)
    sample = DeviceSample(
        device=_amd_device(VENDOR, idx, ident),
        utilization_ratio=ratio(usage.get("gfx_activity"), notes, "usage.gfx_activity"),
        memory_bandwidth_utilization_ratio=ratio(usage.get("umc_activity"), notes, "usage.umc_activity"),
        memory_used_bytes=nonneg(
            scaled(mem.get("used_vram"), "bytes", "MB", notes, "mem_usage.used_vram"), notes, "used_vram"
        ),
        memory_total_bytes=nonneg(
            scaled(mem.get("total_vram"), "bytes", "MB", notes, "mem_usage.total_vram"), notes, "total_vram"
        ),
        temperatures_celsius=temps,
        clocks_hertz=clocks,
        power_watts=nonneg(
            scaled(
                _first(power, "socket_power", "current_socket_power", "average_socket_power"),
                "power",
                "W",
                notes,
                "power.socket_power",
            ),
            notes,
            "socket_power",
        ),
        power_limit_watts=ident.power_limit_watts if ident else None,
        energy_joules=nonneg(
            scaled(energy.get("total_energy_consumption"), "energy", "J", notes, "energy"), notes, "energy"
        ),
        ecc_errors=ecc_counts,
        pcie_replay_errors=count(_first(pcie, "replay_count", "pcie_replay_count")),
        vendor_metrics={ECC_DEFERRED.name: float(deferred)} if deferred is not None else {},
    )
    return with_notes(sample, notes)


def amd_smi_clocks(clock: Mapping[str, Any], notes: Notes) -> dict[str, float]:
    """``clock.gfx_N.clk`` -> graphics, ``clock.mem_N.clk`` -> memory (Hz): the first instance that reads
    (MI300 has one gfx clock per XCD; they run together)."""
    out: dict[str, float] = {}
    for domain, prefix in (("graphics", "gfx_"), ("memory", "mem_")):
        for key in sorted((k for k in clock if str(k).startswith(prefix)), key=str):
            sub = clock[key]
            hz = scaled(sub.get("clk") if isinstance(sub, Mapping) else None, "hertz", "MHz", notes, key)
            if hz is not None and hz >= 0:
                out[domain] = hz
                break
    return out


def with_notes(sample: DeviceSample, notes: Notes) -> DeviceSample:
    return replace(sample, error=notes.text()) if notes.items else sample


def parse_amd_smi_metric(raw: str, static: Mapping[str, Identity] | None = None) -> list[DeviceSample]:
    """``amd-smi metric --json`` (either shape) -> one DeviceSample per GPU. Raises ParseError.

    ``static`` (from ``parse_amd_smi_static``) supplies model, uuid, bus id and the power cap; without it
    the model is "unknown" and the uuid falls back to ``amd-index-<gpu>``.
    """
    entries = amd_smi_entries(load_json(raw, "amd-smi metric"), "amd-smi metric")
    if not entries:
        raise ParseError("amd-smi metric: no GPUs in the output")
    static = static or {}
    return [amd_smi_sample(idx, entry, static.get(idx)) for idx, entry in entries]


_AMD_SMI_SECTION = re.compile(
    r'"(usage|power|temperature|mem_usage|ecc|pcie|energy|clock|asic|bus|board|limit)"\s*:'
)


def sniff_amd_smi_json(raw: str) -> bool:
    """amd-smi JSON: objects with an integer "gpu" and amd-smi section names (or {"gpu_data": ...});
    never Hygon output."""
    head = raw.lstrip()[:4000]
    gpu = '"gpu_data"' in head or re.search(r'"gpu"\s*:\s*\d', head) is not None
    return gpu and _AMD_SMI_SECTION.search(head) is not None and not hygon_markers(head)


# ---------------------------------------------------------------------------------------------------
# amd-smi monitor (one line per GPU)

_MONITOR_TEMPS = {"GPU_TEMP": "hotspot", "HOTSPOT_TEMP": "hotspot", "MEM_TEMP": "memory", "EDGE_TEMP": "core"}


def parse_amd_smi_monitor(raw: str) -> list[DeviceSample]:
    """``amd-smi monitor`` text table -> DeviceSamples. Raises ParseError.

    Columns by header name: POWER (W), GPU_TEMP/HOTSPOT_TEMP (the hotspot sensor: amd-smi monitor reads
    ``AmdSmiTemperatureType.HOTSPOT``), MEM_TEMP, GFX_UTIL, MEM_UTIL (umc activity), SINGLE_ECC/DOUBLE_ECC
    (corrected/uncorrected), PCIE_REPLAY, VRAM_USED/VRAM_TOTAL (MB = MiB). Cells are separated by two
    or more spaces (a value and its unit by one). The PROCESS INFO table after it is ignored.
    """
    lines = raw.splitlines()
    hdr_at = next(
        (
            i
            for i, line in enumerate(lines)
            if line.split()[:1] == ["GPU"] and ("POWER" in line.split() or "GFX_UTIL" in line.split())
        ),
        None,
    )
    if hdr_at is None:
        raise ParseError("amd-smi monitor: no GPU header line")
    header = lines[hdr_at].split()
    out: list[DeviceSample] = []
    for line in lines[hdr_at + 1 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(header):
            raise ParseError(f"amd-smi monitor: row has {len(cells)} cells for {len(header)} columns")
        row = dict(zip(header, cells, strict=True))
        idx = row["GPU"].strip()
        if not idx.isdigit():
            raise ParseError(f"amd-smi monitor: GPU index {idx[:20]!r} is not a number")
        idx = str(int(idx))
        notes = Notes()
        temps = {
            sensor: t
            for col, sensor in _MONITOR_TEMPS.items()
            if col in row and (t := scaled(row[col], "celsius", "C", notes, col)) is not None
        }
        ecc = {
            kind: n
            for kind, col in (("corrected", "SINGLE_ECC"), ("uncorrected", "DOUBLE_ECC"))
            if (n := count(row.get(col))) is not None
        }
        clocks = {
            domain: hz
            for domain, col in (("graphics", "GFX_CLOCK"), ("memory", "MEM_CLOCK"))
            if (hz := scaled(row.get(col), "hertz", "MHz", notes, col)) is not None
        }
        sample = DeviceSample(
            device=_amd_device(VENDOR, idx, None),
            utilization_ratio=ratio(row.get("GFX_UTIL"), notes, "GFX_UTIL"),
            memory_bandwidth_utilization_ratio=ratio(row.get("MEM_UTIL"), notes, "MEM_UTIL"),
            memory_used_bytes=nonneg(
                scaled(row.get("VRAM_USED"), "bytes", "MB", notes, "VRAM_USED"), notes, "v"
            ),
            memory_total_bytes=nonneg(
                scaled(row.get("VRAM_TOTAL"), "bytes", "MB", notes, "VRAM_TOTAL"), notes, "VRAM_TOTAL"
            ),
            temperatures_celsius=temps,
            clocks_hertz=clocks,
            power_watts=nonneg(scaled(row.get("POWER"), "power", "W", notes, "POWER"), notes, "POWER"),
            ecc_errors=ecc,
            pcie_replay_errors=count(row.get("PCIE_REPLAY")),
        )
        out.append(with_notes(sample, notes))
    if not out:
        raise ParseError("amd-smi monitor: header without GPU rows")
    return out


def sniff_amd_smi_monitor(raw: str) -> bool:
    return any(
        line.split()[:1] == ["GPU"] and "POWER" in line.split() and "GFX_UTIL" in line.split()
        for line in raw.splitlines()[:20]
    )


# ---------------------------------------------------------------------------------------------------
# rocm-smi JSON (AMD's, and the Hygon DTK fork's: same layout, different keys and units)

_CARD = re.compile(r"^card(\d+)$")
_KEY_UNIT = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)\s*$")


def rocm_smi_cards(doc: object, what: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``cardN`` objects of a rocm-smi JSON document, by index. Raises ParseError."""
    if not isinstance(doc, Mapping):
        raise ParseError(f"{what}: expected a JSON object keyed card0..cardN")
    cards: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in doc.items():
        m = _CARD.match(str(key))
        if not m:
            continue  # "system" and other non-card sections
        if not isinstance(value, Mapping):
            raise ParseError(f"{what}: {key} is not an object")
        cards.append((str(int(m.group(1))), value))
    if not cards:
        raise ParseError(f"{what}: no card entries")
    return sorted(cards, key=lambda kv: int(kv[0]))


class _Keys:
    """Case-insensitive lookup of rocm-smi keys, with the unit taken from the key's last "(...)"."""

    def __init__(self, card: Mapping[str, Any]) -> None:
        self._by_name: dict[str, tuple[object, str | None]] = {}
        for key, value in card.items():
            k = str(key).strip().lower()
            if not k:
                continue  # DTK prints an empty "" key
            m = _KEY_UNIT.match(k)
            name, unit = (m.group("name"), m.group("unit")) if m else (k, None)
            self._by_name.setdefault(k, (value, None))
            self._by_name.setdefault(name, (value, unit))

    def get(self, *names: str) -> tuple[object, str | None]:
        """The first present name (lower-case, without the unit suffix) as (raw value, unit from key)."""
        for n in names:
            hit = self._by_name.get(n)
            if hit is not None and quantity(hit[0]) is not None:
                return hit
        for n in names:
            if n in self._by_name:
                return self._by_name[n]
        return None, None

    def scaled(self, kind: str, notes: Notes, *names: str) -> float | None:
        raw, unit = self.get(*names)
        q = quantity(raw)
        if q is None:
            return None
        return nonneg(
            scaled({"value": q[0], "unit": q[1] or unit}, kind, None, notes, names[0]), notes, names[0]
        )

    def ratio(self, notes: Notes, *names: str) -> float | None:
        raw, unit = self.get(*names)
        if unit not in (None, "%"):
            notes.add(f"{names[0]}: unit {unit!r} is not %")
            return None
        return ratio(raw, notes, names[0])

    def text(self, *names: str) -> str | None:
        for n in names:
            if (t := text(self._by_name.get(n, (None, None))[0])) is not None:
                return t
        return None


def rocm_smi_sample(vendor: str, idx: str, card: Mapping[str, Any], driver: str | None) -> DeviceSample:
    """One rocm-smi ``cardN`` object -> DeviceSample; keys of AMD's rocm-smi and of Hygon's fork.

    Utilization ``GPU use (%)``/``DCU use (%)``; memory bandwidth ``GPU Memory Read/Write Activity (%)``
    (older ``GPU memory use (%)``, Hygon ``DCU memory use (%)``: rsmi memory busy percent); VRAM
    ``VRAM Total [Used] Memory (B|MiB)``; temperatures ``Temperature (Sensor edge|junction|memory|mem|HBM n)``;
    power ``Current Socket Graphics Package Power (W)`` else ``Average Graphics Package Power (W)``;
    cap ``Max Graphics Package Power (W)``; energy ``Accumulated Energy (uJ)``; ``PCIe Replay Count``.
    """
    k = _Keys(card)
    notes = Notes()
    temps: dict[str, float] = {}
    for sensor, names in (
        ("core", ("temperature (sensor edge)",)),
        ("hotspot", ("temperature (sensor junction)", "temperature (sensor hotspot)")),
        ("memory", ("temperature (sensor memory)", "temperature (sensor mem)", "temperature (sensor vram)")),
    ):
        t = k.scaled("celsius", notes, *names)
        if t is not None:
            temps[sensor] = t
    if "memory" not in temps:  # MI2xx/MI3xx print per-stack HBM sensors instead: report the hottest
        hbm = [
            t
            for i in range(8)
            if (t := k.scaled("celsius", notes, f"temperature (sensor hbm {i})")) is not None
        ]
        if hbm:
            temps["memory"] = max(hbm)
    device = Device(
        vendor=vendor,
        model=k.text("card series", "device name", "card model") or UNKNOWN_MODEL,
        index=idx,
        uuid=device_uuid(vendor, idx, k.text("unique id"), k.text("serial number"), k.text("pci bus")),
        pci_bus_id=k.text("pci bus"),
        driver_version=driver,
        serial=k.text("serial number"),
    )
    sample = DeviceSample(
        device=device,
        utilization_ratio=k.ratio(notes, "gpu use", "dcu use"),
        memory_bandwidth_utilization_ratio=k.ratio(
            notes, "gpu memory read/write activity", "gpu memory use", "dcu memory use"
        ),
        memory_used_bytes=k.scaled("bytes", notes, "vram total used memory"),
        memory_total_bytes=k.scaled("bytes", notes, "vram total memory"),
        temperatures_celsius=temps,
        power_watts=k.scaled(
            "power",
            notes,
            "current socket graphics package power",
            "average graphics package power",
        ),
        power_limit_watts=k.scaled("power", notes, "max graphics package power"),
        energy_joules=k.scaled("energy", notes, "accumulated energy"),
        pcie_replay_errors=count(k.get("pcie replay count")[0]),
    )
    return with_notes(sample, notes)


def rocm_smi_driver(doc: Mapping[str, Any]) -> str | None:
    """Driver version from the ``system`` section of ``rocm-smi -a --json``/``--showdriverversion``."""
    system = doc.get("system")
    return _Keys(system).text("driver version") if isinstance(system, Mapping) else None


def parse_rocm_smi_json(raw: str) -> list[DeviceSample]:
    """AMD ``rocm-smi --json`` (dict ``card0..N``, every value a string) -> DeviceSamples. Raises ParseError.

    Hygon DTK output is refused (use the ``hygon`` backend's parser); ECC is not in rocm-smi JSON.
    """
    doc = load_json(raw, "rocm-smi")
    cards = rocm_smi_cards(doc, "rocm-smi")
    if any(hygon_card(card) for _, card in cards):
        raise ParseError("rocm-smi: this is Hygon DCU output (DCU keys); parse it as hy-smi-json")
    driver = rocm_smi_driver(doc) if isinstance(doc, Mapping) else None
    return [rocm_smi_sample(VENDOR, idx, card, driver) for idx, card in cards]


def hygon_card(card: Mapping[str, Any]) -> bool:
    """Hygon DCU markers in one rocm-smi card: a "DCU ..." key or a Haiguang/Hygon vendor string."""
    for key, value in card.items():
        k = str(key).strip().lower()
        if k.startswith("dcu"):
            return True
        if (
            k == "card vendor"
            and isinstance(value, str)
            and ("haiguang" in value.lower() or "hygon" in value.lower())
        ):
            return True
    return False


def hygon_markers(raw: str) -> bool:
    low = raw.lower()
    return '"dcu' in low or "haiguang" in low or "hygon" in low


def sniff_rocm_smi_json(raw: str) -> bool:
    """AMD rocm-smi JSON: "cardN" objects with rocm-smi keys and no Hygon markers."""
    head = raw[:20000]
    return (
        re.search(r'"card\d+"\s*:', head) is not None
        and any(
            k in head
            for k in ("GPU use (%)", "VRAM Total", "Temperature (Sensor", "Card Series", "Unique ID")
        )
        and not hygon_markers(head)
    )


# ---------------------------------------------------------------------------------------------------
# amdsmi library


class AmdSmiLibrary:
    """Reads GPUs through the ``amdsmi`` Python package (or any module with its API, for tests).

    Calls (ROCm/amdsmi ``py-interface/amdsmi_interface.py``, names and dict keys checked against the
    amdsmi 7.0.2 wheel; units per ``src/amd_smi/amd_smi.cc``):
    ``amdsmi_get_gpu_activity`` (gfx/umc %), ``amdsmi_get_gpu_vram_usage`` (MB = MiB),
    ``amdsmi_get_temp_metric(h, AmdSmiTemperatureType.EDGE|HOTSPOT|VRAM, AmdSmiTemperatureMetric.CURRENT)``
    (°C), ``amdsmi_get_power_info`` (``socket_power``/``current_socket_power``/``average_socket_power`` W),
    ``amdsmi_get_power_cap_info`` (``power_cap`` µW), ``amdsmi_get_energy_count`` (``energy_accumulator``,
    older ``power``, times ``counter_resolution`` µJ), ``amdsmi_get_gpu_total_ecc_count``,
    ``amdsmi_get_pcie_info`` (``pcie_metric.pcie_replay_count``), ``amdsmi_get_clock_info(h,
    AmdSmiClkType.GFX|MEM)`` (``clk`` MHz). Identity: ``amdsmi_get_gpu_asic_info``,
    ``amdsmi_get_gpu_board_info``, ``amdsmi_get_gpu_device_bdf``, ``amdsmi_get_gpu_driver_info``.
    Unsupported readings come back as "N/A" or raise ``AmdSmiLibraryException(ERR_NOT_SUPPORTED)``: None.
    """

    def __init__(self, module: Any) -> None:
        self.lib = module
        self._exc: tuple[type[BaseException], ...] = (
            getattr(module, "AmdSmiException", RuntimeError),
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
        )
        self._handles: list[tuple[str, Any, Device]] = []

    def open(self) -> None:
        """``amdsmi_init(INIT_AMD_GPUS)`` and enumerate handles. Raises BackendError(reason="init")."""
        try:
            flags = getattr(self.lib, "AmdSmiInitFlags", None)
            if flags is not None and hasattr(flags, "INIT_AMD_GPUS"):
                self.lib.amdsmi_init(flags.INIT_AMD_GPUS)
            else:
                self.lib.amdsmi_init()
            handles = list(self.lib.amdsmi_get_processor_handles())
        except self._exc as exc:
            raise BackendError(f"amdsmi init failed: {exc}", reason="init") from exc
        self._handles = [(str(i), h, self._identify(str(i), h)) for i, h in enumerate(handles)]

    def close(self) -> None:
        try:
            self.lib.amdsmi_shut_down()
        except Exception as exc:  # close never raises
            log.debug("amdsmi_shut_down: %s", exc)

    def _call(self, errors: list[str], fn: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, fn)(*args)
        except self._exc as exc:
            code = getattr(exc, "err_code", None)
            errors.append(f"{fn}: {code if code is not None else type(exc).__name__}")
            return None

    def _identify(self, idx: str, h: Any) -> Device:
        errors: list[str] = []
        asic = self._call(errors, "amdsmi_get_gpu_asic_info", h) or {}
        board = self._call(errors, "amdsmi_get_gpu_board_info", h) or {}
        drv = self._call(errors, "amdsmi_get_gpu_driver_info", h) or {}
        bdf = text(self._call(errors, "amdsmi_get_gpu_device_bdf", h))
        serial = text(board.get("product_serial")) if isinstance(board, Mapping) else None
        asic = asic if isinstance(asic, Mapping) else {}
        board = board if isinstance(board, Mapping) else {}
        return Device(
            vendor=VENDOR,
            model=text(board.get("product_name")) or text(asic.get("market_name")) or UNKNOWN_MODEL,
            index=idx,
            uuid=device_uuid(VENDOR, idx, asic.get("asic_serial"), serial, bdf),
            pci_bus_id=bdf,
            driver_version=text(drv.get("driver_version")) if isinstance(drv, Mapping) else None,
            serial=serial,
        )

    def sample(self) -> list[DeviceSample]:
        return [self._sample_one(h, dev) for _, h, dev in self._handles]

    def _sample_one(self, h: Any, dev: Device) -> DeviceSample:
        lib, notes = self.lib, Notes()
        errors: list[str] = []
        calls = 0

        def get(fn: str, *args: Any) -> Any:
            nonlocal calls
            calls += 1
            return self._call(errors, fn, h, *args)

        def field_of(obj: Any, key: str) -> object:
            return obj.get(key) if isinstance(obj, Mapping) else None

        activity = get("amdsmi_get_gpu_activity")
        vram = get("amdsmi_get_gpu_vram_usage")
        temps: dict[str, float] = {}
        ttype = getattr(lib, "AmdSmiTemperatureType", None)
        tmetric = getattr(lib, "AmdSmiTemperatureMetric", None)
        if ttype is not None and tmetric is not None:
            for sensor, name in (("core", "EDGE"), ("hotspot", "HOTSPOT"), ("memory", "VRAM")):
                if hasattr(ttype, name):
                    t = scaled(
                        get("amdsmi_get_temp_metric", getattr(ttype, name), tmetric.CURRENT),
                        "celsius",
                        "C",
                        notes,
                        name,
                    )
                    if t is not None:
                        temps[sensor] = t
        clocks: dict[str, float] = {}
        ctype = getattr(lib, "AmdSmiClkType", None)
        for domain, name in (("graphics", "GFX"), ("memory", "MEM")):
            if ctype is not None and hasattr(ctype, name):
                info = get("amdsmi_get_clock_info", getattr(ctype, name))
                raw = _first(info, "clk", "cur_clk") if isinstance(info, Mapping) else None
                hz = scaled(raw, "hertz", "MHz", notes, f"clock {name}")
                if hz is not None and hz >= 0:
                    clocks[domain] = hz
        power = get("amdsmi_get_power_info")
        cap = get("amdsmi_get_power_cap_info")
        energy = get("amdsmi_get_energy_count")
        ecc = get("amdsmi_get_gpu_total_ecc_count")
        pcie = get("amdsmi_get_pcie_info")
        if len(errors) == calls:
            return DeviceSample.lost(dev, f"every amdsmi call failed: {errors[0]}"[:200])
        joules = None
        if isinstance(energy, Mapping):
            acc = quantity(_first(energy, "energy_accumulator", "power"))
            res = quantity(energy.get("counter_resolution"))
            if acc is not None and res is not None:
                joules = nonneg(_finite(acc[0] * res[0] / 1e6), notes, "energy")
        ecc_counts = {
            kind: n
            for kind, key in (("corrected", "correctable_count"), ("uncorrected", "uncorrectable_count"))
            if (n := count(field_of(ecc, key))) is not None
        }
        deferred = count(field_of(ecc, "deferred_count"))
        power_raw = (
            _first(power, "socket_power", "current_socket_power", "average_socket_power")
            if isinstance(power, Mapping)
            else None
        )
        sample = DeviceSample(
            device=dev,
            utilization_ratio=ratio(field_of(activity, "gfx_activity"), notes, "gfx_activity"),
            memory_bandwidth_utilization_ratio=ratio(
                field_of(activity, "umc_activity"), notes, "umc_activity"
            ),
            memory_used_bytes=nonneg(
                scaled(field_of(vram, "vram_used"), "bytes", "MB", notes, "vram_used"), notes, "u"
            ),
            memory_total_bytes=nonneg(
                scaled(field_of(vram, "vram_total"), "bytes", "MB", notes, "vram_total"), notes, "vram_total"
            ),
            temperatures_celsius=temps,
            clocks_hertz=clocks,
            power_watts=nonneg(scaled(power_raw, "power", "W", notes, "socket_power"), notes, "socket_power"),
            power_limit_watts=nonneg(
                scaled(field_of(cap, "power_cap"), "power", "uW", notes, "power_cap"), notes, "cap"
            ),
            energy_joules=joules,
            ecc_errors=ecc_counts,
            pcie_replay_errors=count(field_of(field_of(pcie, "pcie_metric"), "pcie_replay_count")),
            vendor_metrics={ECC_DEFERRED.name: float(deferred)} if deferred is not None else {},
        )
        # NOT_SUPPORTED is the vendor saying "cannot tell" (no series), not a failure worth a note.
        unsupported = f": {int(getattr(getattr(lib, 'AmdSmiRetCode', None), 'ERR_NOT_SUPPORTED', 2))}"
        failed = [e for e in errors if not e.endswith(unsupported)]
        if failed:
            notes.add("failed: " + ", ".join(failed)[:160])
        return with_notes(sample, notes)


# ---------------------------------------------------------------------------------------------------
# Backend

AMD_SMI_METRIC = ("metric", "--json")
AMD_SMI_STATIC = ("static", "--json")
# The flags gpustack runs against rocm-smi 6.2.4 and DTK 24.04.3 (source of both JSON fixtures) ...
ROCM_SMI_BASE_ARGS = (
    "-i",
    "--showmeminfo",
    "vram",
    "--showpower",
    "--showserial",
    "--showuse",
    "--showtemp",
    "--showproductname",
    "--showuniqueid",
)
# ... plus power cap, bus id, memory busy %: tried first, dropped for good if the tool refuses them.
ROCM_SMI_EXTRA_ARGS = ("--showmaxpower", "--showbus", "--showmemuse")
ROCM_SMI_ARGS = (*ROCM_SMI_BASE_ARGS, *ROCM_SMI_EXTRA_ARGS, "--json")
ROCM_SMI_MINIMAL_ARGS = (*ROCM_SMI_BASE_ARGS, "--json")


class FlagFallback:
    """Runs a rocm-smi-family tool with the full flag set; if it exits non-zero, retries with the minimal
    set and keeps that one (an older build that rejects a flag would otherwise fail every poll). A replayed
    bundle that holds only the minimal call (``not_recorded``: captured with the minimal flags) falls back
    the same way."""

    def __init__(self, full: Sequence[str], minimal: Sequence[str]) -> None:
        self.candidates = [tuple(full)] if tuple(full) == tuple(minimal) else [tuple(full), tuple(minimal)]

    def run(self, runner: CommandRunner, tool: str, timeout: float) -> str:
        while True:
            try:
                return runner.run([tool, *self.candidates[0]], timeout).stdout
            except BackendError as exc:
                if exc.reason not in ("exit_status", "not_recorded") or len(self.candidates) == 1:
                    raise
                log.warning("%s refused %s (%s): retrying with fewer flags", tool, self.candidates[0], exc)
                self.candidates.pop(0)


SOURCES = ("auto", "amdsmi", "amd-smi", "rocm-smi")
KFD_PATH = "/dev/kfd"  # created by the amdgpu (ROCm) kernel driver


def _import_amdsmi() -> Any:
    # The package loads libamd_smi.so with ctypes at import: a missing or broken library is an OSError.
    try:
        return importlib.import_module("amdsmi")
    except OSError as exc:
        raise ImportError(f"amdsmi: cannot load libamd_smi: {exc}") from exc


class LostTracker:
    """Keeps every device seen so far: one that vanishes from a tool's output is reported lost, not dropped."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.known: dict[str, Device] = {}

    def merge(self, samples: Sequence[DeviceSample]) -> list[DeviceSample]:
        seen = {s.device.index for s in samples}
        for s in samples:
            self.known[s.device.index] = s.device
        lost = [
            DeviceSample.lost(dev, f"missing from {self.tool} output")
            for idx, dev in self.known.items()
            if idx not in seen
        ]
        return sorted([*samples, *lost], key=lambda s: (len(s.device.index), s.device.index))


class AmdBackend:
    """Backend ``amd``: amdsmi library where importable, else ``amd-smi``, else ``rocm-smi`` (see module doc).

    ``options``: ``source`` (auto|amdsmi|amd-smi|rocm-smi), ``timeout_seconds`` per tool call (10).
    ``amdsmi_module`` injects a module with the amdsmi API (tests); ``None`` imports ``amdsmi``.
    """

    name = "amd"

    def __init__(self, ctx: BackendContext, amdsmi_module: Any = None) -> None:
        self.ctx = ctx
        self.source = str(ctx.options.get("source", "auto"))
        if self.source not in SOURCES:
            raise BackendError(
                f"amd: unknown source {self.source!r} (one of {', '.join(SOURCES)})", reason="init"
            )
        self.timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        self._module = amdsmi_module
        self._lib: AmdSmiLibrary | None = None
        self._tool: str | None = None
        self._kind: str | None = None  # the source in use after open()
        self._static: dict[str, Identity] = {}
        self._polls = 0
        self._tracker = LostTracker("amd-smi")
        self._flags = FlagFallback(ROCM_SMI_ARGS, ROCM_SMI_MINIMAL_ARGS)

    @property
    def active_source(self) -> str | None:
        return self._kind

    def open(self) -> None:
        # In auto mode the library is only used live: a capture (RecordingRunner) must record tool output
        # and a replay (ReplayRunner) must not read this host's GPUs.
        live = isinstance(self.ctx.runner, SubprocessRunner)
        if self.source == "amdsmi" or (self.source == "auto" and live):
            try:
                module = self._module if self._module is not None else _import_amdsmi()
                lib = AmdSmiLibrary(module)
                lib.open()
                self._lib, self._kind = lib, "amdsmi"
                return
            except ImportError as exc:
                if self.source == "amdsmi":
                    raise BackendError(f"amdsmi not importable: {exc}", reason="init") from exc
            except BackendError:
                if self.source == "amdsmi":
                    raise
                log.warning("amdsmi unusable, falling back to the amd-smi/rocm-smi CLI", exc_info=True)
        for kind in ("amd-smi", "rocm-smi"):
            if self.source in ("auto", kind) and (path := self.ctx.runner.which(kind)):
                self._tool, self._kind = path, kind
                self._tracker = LostTracker(kind)
                return
        raise BackendError("amd: neither the amdsmi library nor amd-smi/rocm-smi is available", reason="init")

    def sample(self) -> Sequence[DeviceSample]:
        if self._kind is None:
            self.open()
        if self._lib is not None:
            try:
                return self._lib.sample()
            except Exception as exc:  # a library fault outside the per-call errors fails this poll only
                raise BackendError(f"amdsmi: {type(exc).__name__}: {exc}"[:200], reason="library") from exc
        assert self._tool is not None
        if self._kind == "amd-smi":
            # Not retried every poll when it fails: a hanging `static` would cost a timeout each time.
            if self._polls % STATIC_REFRESH_POLLS == 0:
                self._refresh_static()
            self._polls += 1
            out = self.ctx.runner.run([self._tool, *AMD_SMI_METRIC], self.timeout)
            return self._tracker.merge(parse_amd_smi_metric(out.stdout, self._static))
        return self._tracker.merge(
            parse_rocm_smi_json(self._flags.run(self.ctx.runner, self._tool, self.timeout))
        )

    def _refresh_static(self) -> None:
        # Identity is best-effort: a failing `static` leaves the last good one (or index-based ids).
        assert self._tool is not None
        try:
            out = self.ctx.runner.run([self._tool, *AMD_SMI_STATIC], self.timeout)
            self._static = parse_amd_smi_static(out.stdout)
        except BackendError as exc:
            log.warning("amd-smi static failed (%s): keeping the previous identity", exc)

    def close(self) -> None:
        if self._lib is not None:
            self._lib.close()
        self._lib, self._kind = None, None


def detect(ctx: BackendContext) -> Detection:
    """Found when ``amdsmi`` is importable and the amdgpu driver is loaded (``/dev/kfd``; the package is on
    PyPI and may sit on hosts without AMD GPUs), or ``amd-smi``/``rocm-smi`` is on PATH (Hygon's DTK
    ``rocm-smi`` is claimed first by the ``hygon`` backend, which supersedes this one)."""
    kfd = str(ctx.options.get("kfd_path", KFD_PATH))
    if importlib.util.find_spec("amdsmi") is not None and os.path.exists(kfd):
        return Detection(True, f"python package amdsmi is importable and {kfd} exists")
    for tool in ("amd-smi", "rocm-smi"):
        if path := ctx.runner.which(tool):
            return Detection(True, f"{tool} found at {path}")
    return Detection(False, "no amdsmi package, no amd-smi or rocm-smi on PATH")


FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("amd-smi-json", parse_amd_smi_metric, sniff_amd_smi_json),
    OutputFormat("amd-smi-monitor", parse_amd_smi_monitor, sniff_amd_smi_monitor),
    OutputFormat("rocm-smi-json", parse_rocm_smi_json, sniff_rocm_smi_json),
)


def _create(ctx: BackendContext) -> AmdBackend:
    return AmdBackend(ctx)


SPEC = register(
    BackendSpec(
        name="amd",
        vendor=VENDOR,
        create=_create,
        detect=detect,
        formats=FORMATS,
        metrics=(ECC_DEFERRED,),
        priority=50,
        options={"source": "string", "timeout_seconds": "seconds", "kfd_path": "string"},
    )
)

__all__ = [
    "ECC_DEFERRED",
    "FORMATS",
    "ROCM_SMI_ARGS",
    "ROCM_SMI_MINIMAL_ARGS",
    "SPEC",
    "AmdBackend",
    "AmdSmiLibrary",
    "FlagFallback",
    "Identity",
    "LostTracker",
    "device_uuid",
    "is_na",
    "load_json",
    "parse_amd_smi_metric",
    "parse_amd_smi_monitor",
    "parse_amd_smi_static",
    "parse_rocm_smi_json",
    "quantity",
    "rocm_smi_cards",
    "rocm_smi_driver",
    "rocm_smi_sample",
]
