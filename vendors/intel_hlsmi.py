"""Intel Gaudi `hl-smi` outputs -> DeviceSample (pure parsers; the backend in vendors/intel.py runs the tool).

Two outputs, both read by column name, never by position:

* the default table (nvidia-smi-like; captures under ``tests/fixtures/intel/``: Gaudi 2 HL-225 with
  hl-smi 1.12.1, 1.14.0 and 1.16.0, Gaudi 3 HL-325L with 1.21.0)::

      | AIP  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
      | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | AIP-Util  Compute M. |
      |   0  HL-225              N/A  | 0000:09:00.0     N/A |                   0  |
      | N/A   26C   N/A    87W / 600W |    768MiB / 98304MiB |     0%           N/A |

  Gaudi 3 prints ``Volatile Uncor-Events`` for the ECC column and ``P0`` / ``0%`` where Gaudi 2 prints
  N/A. The process table after the devices is not read.
* ``hl-smi -Q <fields> -f csv[,noheader][,nounits]`` (``--query-aip``; field names as the tool takes them:
  ``index, name, uuid, bus_id, temperature.aip, utilization.aip, memory.used, memory.total, power.draw,
  power.max``; capture: Gaudi HL-205 with hl-smi 1.18.0 ``-f csv,nounits``). The header carries units in
  brackets (``power.draw [W]``); without ``noheader`` the columns are found by name, with it the caller
  passes the field list it asked for.

Units as printed: C, W, MiB (binary; hl-smi 1.4 prints ``Mib``, read by ``smi_table.MEMORY_AS_BYTES``), %;
memory -> bytes, percent -> ratio. A cell the tool marks
unavailable (``N/A``) gives no reading. A cell that is printed but cannot be read (garbled, masked, a
wrong unit) costs that reading only: it is listed in ``DeviceSample.unread`` and the device stays up.
Identity: ``index`` is the AIP index (the CSV's row position when it has no ``index`` column); ``uuid`` is
the AIP UUID where printed (CSV ``uuid``; HLML), else ``hl-<bus id>`` (the table prints no UUID); the
HLML library path uses the AIP UUID, so the two sources label a device differently (docs/vendors/intel.md).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence

from xpuwatch.vendors import smi_query, smi_table
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

VENDOR = "intel"
NA = frozenset({"n/a", "na", "-", "[n/a]", "[not supported]", ""})
# The -Q fields the backend asks for (order = CSV columns with noheader).
CSV_FIELDS = (
    "index",
    "name",
    "uuid",
    "bus_id",
    "temperature.aip",
    "utilization.aip",
    "memory.used",
    "memory.total",
    "power.draw",
    "power.max",
)
# Header phrases of the table, per cell, and the readings their values give.
_PHRASES = (
    "Volatile Uncorr. ECC",
    "Volatile Uncor-Events",
    "Pwr:Usage/Cap",
    "Persistence-M",
    "Memory-Usage",
    "Compute M.",
    "AIP-Util",
    "Bus-Id",
    "Disp.A",
    "Name",
    "Temp",
    "Perf",
    "AIP",
    "Fan",
)
_PHRASE_RE = re.compile("|".join(re.escape(p) for p in _PHRASES) + r"|\S+")
# "228W /  900W" and "768MiB / 98304MiB" are one value; "N/A" is one token.
_VALUE_RE = re.compile(r"\S+\s+/\s*\S+|\S+\s*/\s+\S+|\S+")
# Columns read -> the readings they give (named in DeviceSample.unread when the cell cannot be split).
_COLUMN_READINGS: Mapping[str, tuple[str, ...]] = {
    "AIP": (),
    "Name": (),
    "Bus-Id": (),
    "Temp": ("temperatures_celsius.core",),
    "Pwr:Usage/Cap": ("power_watts", "power_limit_watts"),
    "Memory-Usage": ("memory_used_bytes", "memory_total_bytes"),
    "AIP-Util": ("utilization_ratio",),
    "Volatile Uncorr. ECC": ("ecc_errors.uncorrected",),
    "Volatile Uncor-Events": ("ecc_errors.uncorrected",),
}
_READ_COLUMNS = frozenset(_COLUMN_READINGS)
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")


class _Cells:
    """One device's readings under construction, collecting unreadable cells instead of failing."""

    def __init__(self) -> None:
        self.unread: dict[str, str] = {}

    def quantity(self, text: str | None, units: tuple[str, ...], reading: str) -> float | None:
        """``text`` as a number in one of ``units`` (or bare); None when absent or marked N/A; an unread
        entry when printed but not a finite number with that unit."""
        if text is None:
            return None
        t = text.strip()
        if t.lower() in NA:
            return None
        for unit in units:
            if unit and t.endswith(unit):
                t = t[: -len(unit)].strip()
                break
        if _NUMBER.match(t):
            v = float(t)
            if math.isfinite(v) and v >= 0:
                return v
        self.unread[reading] = f"{text.strip()[:40]!r} is not a number in {'/'.join(u for u in units if u)}"
        return None

    def memory(self, text: str | None, reading: str) -> float | None:
        """A memory amount in bytes, its unit read by ``smi_table.MEMORY_AS_BYTES`` (``MiB``; hl-smi 1.4's
        ``Mib``; a bare number, as ``-f csv,nounits`` prints, is MiB); None when absent or N/A; an unread
        entry when printed but not an amount."""
        if text is None or text.strip().lower() in NA:
            return None
        t = text.strip()
        if _NUMBER.match(t):
            t += "MiB"
        try:
            got = smi_table.quantity(t, smi_table.MEMORY_AS_BYTES, reading)
        except ParseError as exc:
            self.unread[reading] = str(exc)
            return None
        return got


def _sample(
    cells: _Cells,
    device: Device,
    *,
    temp: float | None,
    util_percent: float | None,
    used_bytes: float | None,
    total_bytes: float | None,
    power: float | None,
    cap: float | None,
    ecc: float | None,
) -> DeviceSample:
    return DeviceSample(
        device=device,
        utilization_ratio=None if util_percent is None else util_percent / 100.0,
        memory_used_bytes=used_bytes,
        memory_total_bytes=total_bytes,
        temperatures_celsius={} if temp is None else {"core": temp},
        power_watts=power,
        power_limit_watts=cap,
        ecc_errors={} if ecc is None else {"uncorrected": int(ecc)},
        unread=cells.unread,
    )


# --------------------------------------------------------------------------------------------------------
# Default table


def sniff_table(text: str) -> bool:
    """The hl-smi table: its version line ("| HL-SMI Version:  hl-..."; ``-L`` prints "HL-SMI Version   :"),
    or its AIP column headers."""
    return "HL-SMI Version:" in text or ("AIP-Util" in text and "Pwr:Usage/Cap" in text)


def _cells_of(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _columns(names: list[str], values: str) -> tuple[dict[str, str], str | None]:
    """Values of one table cell by its header phrases. When the count does not match (a garbled cell),
    returns what could be paired and a reason."""
    if len(names) == 1:  # the whole cell is that column's value, however garbled
        return {names[0]: values.strip()}, None
    vals = _VALUE_RE.findall(values)
    if "Name" in names and len(vals) > len(names):  # a model name with spaces
        at = names.index("Name")
        extra = len(vals) - len(names)
        vals = [*vals[:at], " ".join(vals[at : at + extra + 1]), *vals[at + extra + 1 :]]
    if len(vals) != len(names):
        return {}, f"{len(vals)} values under {len(names)} columns ({' / '.join(names)})"
    return dict(zip(names, vals, strict=True)), None


def _table_header(lines: list[str]) -> tuple[list[str], list[str], int]:
    """(first-row header cells, second-row header cells, index of the '====' rule) of the device table."""
    for i, line in enumerate(lines):
        if "Bus-Id" in line and "AIP" in line and i + 2 < len(lines):
            h1, h2 = _cells_of(line), _cells_of(lines[i + 1])
            if not lines[i + 2].startswith("|=") or len(h1) != 3 or len(h2) != 3:
                break
            return h1, h2, i + 2
    raise ParseError("hl-smi: no device table header ('AIP  Name ... Bus-Id ... AIP-Util')")


def parse_table(text: str) -> list[DeviceSample]:
    """Default ``hl-smi`` output -> one sample per AIP. Raises ParseError when there is no device table, a
    row pair is cut short, or an AIP index/bus id is unreadable (a device cannot be named); a garbled
    reading cell costs only that reading (``unread``)."""
    if "\x00" in text:
        raise ParseError("hl-smi: output contains NUL bytes")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    driver_m = re.search(r"Driver Version:\s*([0-9][\w.\-]*)", text)
    driver = driver_m.group(1) if driver_m else None
    h1, h2, start = _table_header(lines)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("| Compute Processes") or line.startswith("+="):
            break
        if line.startswith("|-") or line.startswith("+-"):
            continue
        if not (line.startswith("|") and line.endswith("|")):
            raise ParseError(f"hl-smi: device row cut short: {line[:60]!r}")
        row = _cells_of(line)
        if len(row) != 3:
            raise ParseError(f"hl-smi: device row with {len(row)} cells: {line[:60]!r}")
        rows.append(row)
    if not rows:
        raise ParseError("hl-smi: device table without devices")
    if len(rows) % 2:
        raise ParseError("hl-smi: device table truncated (a device's second row is missing)")
    out: list[DeviceSample] = []
    seen: set[str] = set()
    names1 = [_PHRASE_RE.findall(c) for c in h1]
    names2 = [_PHRASE_RE.findall(c) for c in h2]
    for r1, r2 in zip(rows[0::2], rows[1::2], strict=True):
        cells = _Cells()
        first: dict[str, str] = {}
        second: dict[str, str] = {}
        for h, v, into in ((names1, r1, first), (names2, r2, second)):
            for hc, vc in zip(h, v, strict=True):
                got, why = _columns(hc, vc)
                into.update(got)
                if why:
                    for name in hc:
                        for reading in _COLUMN_READINGS.get(name, ()):
                            cells.unread[reading] = why
        index = first.get("AIP", "")
        bus = first.get("Bus-Id", "")
        if not index.isdigit() or len(index) > 4:
            raise ParseError(f"hl-smi: AIP index {index[:20]!r} is not a number")
        if not _BUS_ID.match(bus):
            raise ParseError(f"hl-smi: AIP {index}: bus id {bus[:20]!r} is not a PCI address")
        if index in seen:
            raise ParseError(f"hl-smi: AIP {index} listed twice")
        seen.add(index)
        bus_id = bus.lower()
        device = Device(
            VENDOR,
            first.get("Name") or "Gaudi",
            index,
            f"hl-{bus_id}",
            pci_bus_id=bus_id,
            driver_version=driver,
        )
        power, cap = _pair(cells, second.get("Pwr:Usage/Cap"), ("W",), "power_watts", "power_limit_watts")
        used, total = _memory_pair(cells, second.get("Memory-Usage"))
        ecc_cell = first.get("Volatile Uncorr. ECC", first.get("Volatile Uncor-Events"))
        out.append(
            _sample(
                cells,
                device,
                temp=cells.quantity(second.get("Temp"), ("C", "°C"), "temperatures_celsius.core"),
                util_percent=cells.quantity(second.get("AIP-Util"), ("%",), "utilization_ratio"),
                used_bytes=used,
                total_bytes=total,
                power=power,
                cap=cap,
                ecc=cells.quantity(ecc_cell, ("",), "ecc_errors.uncorrected"),
            )
        )
    return out


def _pair(
    cells: _Cells, text: str | None, units: tuple[str, ...], first: str, second: str
) -> tuple[float | None, float | None]:
    if text is None:
        return None, None
    if text.strip().lower() in NA:
        return None, None
    parts = re.split(r"\s+/\s*|\s*/\s+", text.strip())  # "N/A / N/A": the spaced slash splits
    if len(parts) != 2:
        parts = text.split("/")
    if len(parts) != 2:
        cells.unread[first] = f"{text[:40]!r} is not 'used / total'"
        return None, None
    return cells.quantity(parts[0], units, first), cells.quantity(parts[1], units, second)


def _memory_pair(cells: _Cells, text: str | None) -> tuple[float | None, float | None]:
    """``768MiB / 98304MiB`` (hl-smi 1.4: ``512Mib / 32768Mib``) -> (used, total) bytes, each on its own."""
    if text is None or text.strip().lower() in NA:
        return None, None
    parts = re.split(r"\s+/\s*|\s*/\s+", text.strip())  # "N/A / N/A": the spaced slash splits
    if len(parts) != 2:
        parts = text.split("/")
    if len(parts) != 2:
        cells.unread["memory_used_bytes"] = f"{text[:40]!r} is not 'used / total'"
        return None, None
    return cells.memory(parts[0], "memory_used_bytes"), cells.memory(parts[1], "memory_total_bytes")


def explain_table(text: str) -> list[str]:
    """Table columns that map to no reading (``xpuwatch inspect --explain``)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    h1, h2, _ = _table_header(lines)
    out = [p for cell in (*h1, *h2) for p in _PHRASE_RE.findall(cell) if p not in _READ_COLUMNS]
    return [f"{p}: no reading of the shared schema maps it" for p in out] + [
        "Compute Processes table: not read (per-process memory is not in the schema)"
    ]


# --------------------------------------------------------------------------------------------------------
# -Q ... -f csv


def sniff_csv(text: str) -> bool:
    """A ``--query-aip`` CSV with its header (an AIP-only field name in the first line)."""
    first = text.lstrip().split("\n", 1)[0]
    if "," not in first:
        return False
    fields = {re.sub(r"\s*\[[^\]]*\]$", "", f.strip()) for f in first.split(",")}
    return any(f.endswith(".aip") for f in fields) or {"bus_id", "memory.used"} <= fields


def parse_csv(text: str, fields: Sequence[str] | None = None) -> list[DeviceSample]:
    """``hl-smi -Q ... -f csv`` -> one sample per row. ``fields``: the queried field names when the output
    has no header (``noheader``); else the header is read (units in brackets dropped). Raises ParseError on
    empty output, a row whose cell count differs from the header, or no way to name a device (no index,
    uuid or bus_id column)."""
    if "\x00" in text:
        raise ParseError("hl-smi CSV: output contains NUL bytes")
    try:
        rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise ParseError(f"hl-smi CSV: {exc}") from None
    if fields is None:
        if not rows:
            raise ParseError("hl-smi CSV: empty output")
        header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
        rows = rows[1:]
    else:
        header = list(fields)
    if not {"index", "uuid", "bus_id"} & set(header):
        raise ParseError(f"hl-smi CSV: no index, uuid or bus_id column (header: {', '.join(header)[:80]})")
    if not rows:
        raise ParseError("hl-smi CSV: no device rows")
    out: list[DeviceSample] = []
    seen: set[str] = set()
    for n, row in enumerate(rows):
        if len(row) != len(header):
            raise ParseError(f"hl-smi CSV: row {n + 1} has {len(row)} cells, header has {len(header)}")
        r: Mapping[str, str] = {h: v.strip() for h, v in zip(header, row, strict=True)}
        out.append(_csv_sample(r, n))
        if out[-1].device.uuid in seen:
            raise ParseError(f"hl-smi CSV: device {out[-1].device.uuid} listed twice")
        seen.add(out[-1].device.uuid)
    return out


def _text(r: Mapping[str, str], key: str) -> str | None:
    v = r.get(key)
    return None if v is None or v.strip().lower() in NA else v.strip()


def _csv_sample(r: Mapping[str, str], position: int) -> DeviceSample:
    index = _text(r, "index") or str(position)
    if not index.isdigit():
        raise ParseError(f"hl-smi CSV: index {index[:20]!r} is not a number")
    bus = _text(r, "bus_id")
    bus_id = bus.lower() if bus and _BUS_ID.match(bus) else None
    uuid = _text(r, "uuid") or (f"hl-{bus_id}" if bus_id else f"hl-aip{index}")
    device = Device(
        VENDOR,
        _text(r, "name") or "Gaudi",
        index,
        uuid,
        pci_bus_id=bus_id,
        driver_version=_text(r, "driver_version"),
        serial=_text(r, "serial"),
    )
    cells = _Cells()
    return _sample(
        cells,
        device,
        temp=cells.quantity(r.get("temperature.aip"), ("C",), "temperatures_celsius.core"),
        util_percent=cells.quantity(r.get("utilization.aip"), ("%",), "utilization_ratio"),
        used_bytes=cells.memory(r.get("memory.used"), "memory_used_bytes"),
        total_bytes=cells.memory(r.get("memory.total"), "memory_total_bytes"),
        power=cells.quantity(r.get("power.draw"), ("W",), "power_watts"),
        cap=cells.quantity(r.get("power.max"), ("W",), "power_limit_watts"),
        ecc=None,
    )


_CSV_READ = frozenset({*CSV_FIELDS, "driver_version", "serial"})


def explain_csv(text: str) -> list[str]:
    """CSV columns that map to no reading (``xpuwatch inspect --explain``)."""
    parse_csv(text)
    first = next(csv.reader(io.StringIO(text.lstrip().split("\n", 1)[0]), skipinitialspace=True))
    names = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in first]
    return [f"{n}: no reading maps it" for n in names if n not in _CSV_READ]


# --------------------------------------------------------------------------------------------------------
# -L (the per-AIP key-value listing)

_LISTING_AIP = re.compile(
    r"\[(\d{1,4})\]\s+AIP\s+\(([^)]*)\)\s+((?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$"
)
_ON_CHIP = re.compile(r"temperature/\[\s*\d+\]\s+on chip (\d+)")
_HBM = re.compile(r"temperature/\[\s*\d+\]\s+hbm (\d+) temp")
_LISTING_KEYS_READ = frozenset(
    {
        "product name",
        "serial number",
        "aip uuid",
        "pci/bus id",
        "memory usage/total",
        "memory usage/used",
        "replaced rows/single bit ecc",
        "replaced rows/double bit ecc",
        "replaced rows/pending",
    }
)
_RAIL_KEY = re.compile(r"power readings[^/]*/(power draw|power limit)")


def _listing_reads(key: str) -> bool:
    return (
        key in _LISTING_KEYS_READ
        or _ON_CHIP.fullmatch(key) is not None
        or _HBM.fullmatch(key) is not None
        or _RAIL_KEY.fullmatch(key) is not None
    )


def sniff_listing(text: str) -> bool:
    """``hl-smi -L``: the HL-SMI LOG banner, or an ``[n] AIP (accelN) <PCI id>`` line."""
    head = text[:20000]
    return "HL-SMI LOG" in head or any(_LISTING_AIP.fullmatch(ln.strip()) for ln in head.splitlines())


def _hottest(c: smi_table.CellReader, keys: Sequence[str], reading: str) -> float | None:
    """The highest of several sensors (one reading): None when none is printed; when one is printed but
    cannot be read the reading is unread (the hottest might be the one lost)."""
    values = [c.number(reading, [k], smi_table.CELSIUS) for k in keys]
    if reading in c.unread:
        return None
    got = [v for v in values if v is not None]
    return max(got) if got else None


def _rails(c: smi_table.CellReader, rails: Sequence[str], key: str, reading: str) -> float | None:
    """The sum of ``key`` (``power draw``, ``power limit``) over the power rails (``Power Readings (54V
    PSU)``, ``(12V PSU)``): None unless every rail prints it, unread when one cannot be read."""
    values = [c.number(reading, [f"{rail}/{key}"], smi_table.WATTS) for rail in rails]
    if reading in c.unread or not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def parse_listing(text: str) -> list[DeviceSample]:
    """``hl-smi -L`` (optionally ``-i <bus id>``) -> one sample per ``[n] AIP (accelN) <PCI id>`` section
    (``vendors.smi_query``; real capture: Gaudi 2 HL-225, hl-smi 1.12.1, in ``tests/fixtures/intel/``).

    Keys: ``Product Name``, ``Serial Number``, ``AIP UUID`` (the uuid, as HLML and ``-Q`` name the AIP; else
    ``hl-<bus id>``), ``PCI / Bus Id``, ``Memory Usage / Total, Used`` (printed ``MB``, binary: the table of
    the same host prints 98304MiB); ``Temperature``: the hottest ``On Chip N`` sensor is ``core`` (the
    table's Temp on the same host sits within a degree of it) and the hottest ``HBM N Temp`` is
    ``memory``, board, VRM and CPLD sensors are not read; ``Power Readings (54V PSU)`` and ``(12V PSU)``:
    power and its limit are the sums over the rails (the table prints the sum: 600 W = 550 W + 50 W on
    Gaudi 2); ``Replaced Rows / Single Bit ECC, Double Bit ECC, Pending`` -> remapped rows correctable,
    uncorrectable and pending. Raises ParseError when no section's PCI id can be read."""
    driver_m = re.search(r"Driver Version\s*:\s*([0-9][\w.\-]*)", text)
    driver = driver_m.group(1) if driver_m else None

    def identify(rec: smi_query.Record) -> Device:
        bus = smi_table.pci_bus_id(rec.row.get("pci/bus id") or rec.header[2])
        c = smi_table.CellReader(rec.row)
        aip_uuid, sn = c.text("aip uuid"), c.text("serial number")
        return Device(
            VENDOR,
            c.text("product name") or "Gaudi",
            str(int(rec.header[0])),
            aip_uuid if aip_uuid and not smi_table.is_masked(aip_uuid) else f"hl-{bus}",
            pci_bus_id=bus,
            driver_version=driver,
            serial=None if sn is None or smi_table.is_masked(sn) else sn,
        )

    out: list[DeviceSample] = []
    for rec, device in smi_query.identified(text, _LISTING_AIP, "hl-smi -L", identify):
        row = rec.row
        c = smi_table.CellReader(row)
        on_chip = [k for k in row.values if _ON_CHIP.fullmatch(k)]
        hbm = [k for k in row.values if _HBM.fullmatch(k)]
        temps = {
            sensor: v
            for sensor, v in (
                ("core", _hottest(c, on_chip, "temperatures_celsius.core")),
                ("memory", _hottest(c, hbm, "temperatures_celsius.memory")),
            )
            if v is not None
        }
        rails = sorted({k.split("/", 1)[0] for k in row.values if k.startswith("power readings")})
        remapped: dict[str, int] = {}
        for kind, key in (("correctable", "single bit ecc"), ("uncorrectable", "double bit ecc")):
            got = c.number(f"remapped_rows.{kind}", [f"replaced rows/{key}"], smi_table.COUNT)
            if got is not None:
                remapped[kind] = int(got)
        pending_text = (c.text("replaced rows/pending") or "").lower()
        pending = {"yes": True, "no": False}.get(pending_text)
        if pending_text and pending is None:
            c.unread["remap_pending"] = f"Pending: {pending_text[:20]!r} is not Yes/No"
        out.append(
            DeviceSample(
                device=device,
                memory_used_bytes=c.number(
                    "memory_used_bytes", ["memory usage/used"], smi_table.MEMORY_AS_BYTES
                ),
                memory_total_bytes=c.number(
                    "memory_total_bytes", ["memory usage/total"], smi_table.MEMORY_AS_BYTES
                ),
                temperatures_celsius=temps,
                power_watts=_rails(c, rails, "power draw", "power_watts"),
                power_limit_watts=_rails(c, rails, "power limit", "power_limit_watts"),
                remapped_rows=remapped,
                remap_pending=pending if remapped else None,
                unread=c.unread,
            )
        )
    return out


def _listing_keys_read(text: str) -> list[str]:
    """The keys of this output that ``parse_listing`` reads (sensor and rail keys vary per board)."""
    records = smi_query.records(text, _LISTING_AIP, "hl-smi -L")
    return sorted({k for rec in records for k in rec.row.values if _listing_reads(k)})


def explain_listing(text: str) -> list[str]:
    """The section/key paths of an ``hl-smi -L`` output the reader does not use, once each."""
    return smi_query.unused(text, _LISTING_AIP, _listing_keys_read(text), "hl-smi -L")


def listing_sections(text: str) -> list[str]:
    """Per AIP section, the sections read and not read."""
    return smi_query.sections_read(text, _LISTING_AIP, _listing_keys_read(text), "hl-smi -L")
