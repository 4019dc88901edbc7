"""Iluvatar CoreX GPU backend: the default ``ixsmi`` table (nvidia-smi-like) -> DeviceSample, one per GPU.

Columns are found by header name (``smi_table.table_rows``), 2 lines per GPU. Layouts read (fixtures in
``tests/fixtures/iluvatar/``): 4.1.0 and 4.3.0 on BI-V150 (PaddleNLP, ERNIE docs), 4.4.0 on MR-V100 DUO
(a wider first cell, so the power column moves)::

    |  IX-ML: 4.3.0       Driver Version: 4.3.0       CUDA Version: 10.2          |
    | GPU  Name                     | Bus-Id               | Clock-SM  Clock-Mem  |
    | Fan  Temp  Perf  Pwr:Usage/Cap|      Memory-Usage    | GPU-Util  Compute M. |
    | 0    Iluvatar BI-V150         | 00000000:13:00.0     | 1500MHz   1600MHz    |
    | N/A  35C   P0    N/A / N/A    | 64MiB / 32768MiB     | 0%        Default    |

Units as printed: percent, Celsius, W, MiB, MHz. Every second BI-V150 prints ``N/A / N/A`` power (one
reading per dual-die board, plausibly): those devices get no power series, never 0. Identity: no UUID in
the table, so ``uuid`` is the PCI bus id (sysfs form), in both modes. A cell that cannot be read costs
that reading only (``DeviceSample.unread``).

``ixsmi --query-gpu=... --format=csv`` (vendors.md 3.6: ixsmi mimics nvidia-smi; SWAN's ``iluvatar.py``
queries ``board.power.draw``) is read when the backend's option ``mode`` is ``csv``. No real capture of it
was found, so it is opt-in; its parser is header-driven in nvidia-smi's CSV conventions (``name [unit]``
headers, ``N/A`` / ``[Not Supported]`` cells) and adds memory-controller utilization.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors import smi_tool
from xpuwatch.vendors.base import Backend, Device, DeviceSample, ParseError
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "iluvatar"
TOOLS = ("ixsmi",)
HEADER = "Pwr:Usage/Cap"


def sniff(text: str) -> bool:
    """An ixsmi table: the IX-ML title and the nvidia-smi-like column header."""
    return "IX-ML" in text and HEADER in text


def identify(driver: str | None, row: t.Row) -> Device:
    """GPU, Name and Bus-Id -> Device (``smi_table.index_name_bus``)."""
    return t.index_name_bus(VENDOR, driver, row, index="GPU", bus="Bus-Id")


def read(device: Device, row: t.Row) -> DeviceSample:
    """The readings of one GPU; unreadable cells go to ``unread``."""
    c = t.CellReader(row)
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr:Usage/Cap"], t.WATTS)
    used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES)
    sm = c.number("clocks_hertz.sm", ["Clock-SM"], t.MHZ_AS_HERTZ)
    mem = c.number("clocks_hertz.memory", ["Clock-Mem"], t.MHZ_AS_HERTZ)
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["GPU-Util"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        power_watts=power,
        power_limit_watts=cap,
        clocks_hertz={k: v for k, v in (("sm", sm), ("memory", mem)) if v is not None},
        unread=c.unread,
    )


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``ixsmi`` output -> one DeviceSample per GPU. Raises ParseError on anything else."""
    if "IX-ML" not in text:
        raise ParseError("not an ixsmi table: no IX-ML title")
    driver = t.header_value(text, r"Driver Version:\s*([0-9][\w.\-]*)")
    return t.samples_from_rows(t.table_rows(text, HEADER), lambda row: identify(driver, row), read)


# Fields of the CSV mode: SWAN's query (which ixsmi answers) plus pci.bus_id for the same identity as the table.
CSV_FIELDS = (
    "index",
    "name",
    "pci.bus_id",
    "driver_version",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.total",
    "temperature.gpu",
    "board.power.draw",
)
CSV_ARGS = (f"--query-gpu={','.join(CSV_FIELDS)}", "--format=csv")
# Units a CSV cell may carry (SWAN's iluvatar.py strips "%", "MiB"/"GiB", "C", "W" from the cells); a bare
# number (``nounits``) takes the unit of its header.
_CSV_UNITS: Mapping[str, float] = {
    "%": 0.01,
    "MiB": t.MIB,
    "GiB": 1024 * t.MIB,
    "W": 1.0,
    "MHz": 1e6,
    "C": 1.0,
    "": 1.0,
}
_CSV_HEADER = re.compile(r"(?P<field>[a-z_.]+)(?: \[(?P<unit>[^\]]*)\])?")
_NA_CELLS = frozenset({"N/A", "[N/A]", "[NOT SUPPORTED]", "[UNKNOWN ERROR]", "[GPU IS LOST]"})


def sniff_csv(text: str) -> bool:
    """``ixsmi --query-gpu --format=csv`` output with a header: index and pci.bus_id columns. nvidia-smi
    prints the same shape, so the name column must say Iluvatar."""
    head, _, body = text.partition("\n")
    return head.startswith("index,") and "pci.bus_id" in head and "Iluvatar" in body


def parse_csv(text: str) -> Sequence[DeviceSample]:
    """``ixsmi --query-gpu=<fields> --format=csv`` (with header) -> one DeviceSample per GPU.

    Columns are found by header name (``memory.used [MiB]``); units come from the header. Needs ``index``,
    ``name`` and ``pci.bus_id``; other fields are optional. Raises ParseError on anything else.
    """
    try:
        rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    except csv.Error as exc:
        raise ParseError(f"not CSV: {exc}") from exc
    if not rows:
        raise ParseError("empty CSV output")
    fields: dict[str, tuple[int, str]] = {}
    for i, head in enumerate(rows[0]):
        m = _CSV_HEADER.fullmatch(head.strip())
        if m is None:
            raise ParseError(f"CSV header cell {head!r} is not 'field [unit]'")
        fields[m["field"]] = (i, m["unit"] or "")
    missing = [f for f in ("index", "name", "pci.bus_id") if f not in fields]
    if missing:
        raise ParseError(f"CSV header lacks {missing}")

    width = len(rows[0])
    body = [row for row in rows[1:] if any(c.strip() for c in row)]
    if not body:
        raise ParseError("CSV output has no device rows")
    if any(len(row) != width for row in body):
        raise ParseError(f"a CSV row has not the header's {width} cells")
    table = [t.Row({f: row[i].strip() for f, (i, _) in fields.items()}, ",".join(row)) for row in body]

    def raw(row: t.Row, field: str) -> str | None:
        value = row.get(field)
        return None if value is None or value.upper() in _NA_CELLS or t.is_not_available(value) else value

    def identify(row: t.Row) -> Device:
        index, name, bus = raw(row, "index"), raw(row, "name"), raw(row, "pci.bus_id")
        if index is None or not t.is_index(index) or not name or bus is None:
            raise ParseError(f"CSV row {row.line!r} lacks index/name/pci.bus_id")
        bus_id = t.pci_bus_id(bus)
        return Device(
            VENDOR, name, index, bus_id, pci_bus_id=bus_id, driver_version=raw(row, "driver_version")
        )

    def read(device: Device, row: t.Row) -> DeviceSample:
        c = t.CellReader(row)

        def number(reading: str, *names: str) -> float | None:
            name = next((n for n in names if raw(row, n) is not None), None)
            return None if name is None else c.number(reading, [name], _CSV_UNITS, fields[name][1])

        clocks = {
            "sm": number("clocks_hertz.sm", "clocks.current.sm", "clocks.sm"),
            "memory": number("clocks_hertz.memory", "clocks.current.memory", "clocks.mem"),
        }
        return DeviceSample(
            device=device,
            utilization_ratio=number("utilization_ratio", "utilization.gpu"),
            memory_bandwidth_utilization_ratio=number(
                "memory_bandwidth_utilization_ratio", "utilization.memory"
            ),
            memory_used_bytes=number("memory_used_bytes", "memory.used"),
            memory_total_bytes=number("memory_total_bytes", "memory.total"),
            temperatures_celsius=t.temperatures(number("temperatures_celsius.core", "temperature.gpu")),
            power_watts=number("power_watts", "board.power.draw", "power.draw"),
            power_limit_watts=number("power_limit_watts", "power.limit", "enforced.power.limit"),
            clocks_hertz={k: v for k, v in clocks.items() if v is not None},
            unread=c.unread,
        )

    return t.samples_from_rows(table, identify, read)


def create(ctx: BackendContext) -> Backend:
    """The table by default; ``mode: csv`` in the backend's options reads the CSV query instead."""
    if ctx.options.get("mode") == "csv":
        return ToolBackend("iluvatar", ctx, TOOLS, CSV_ARGS, parse_csv)
    return ToolBackend("iluvatar", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="iluvatar",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("ixsmi-table", parse, sniff), OutputFormat("ixsmi-csv", parse_csv, sniff_csv)),
        priority=78,
        options={**smi_tool.OPTIONS, "mode": "string"},
    )
)
