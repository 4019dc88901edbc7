"""Iluvatar CoreX GPU backend: the default ``ixsmi`` table (nvidia-smi-like) -> DeviceSample, one per GPU.

Source of the layout: ``ixsmi`` 4.3.0 on 16 x BI-V150 (ERNIE ``docs/devices/README_ILUVATAR_GPU.md``;
fixture ``tests/fixtures/iluvatar/ixsmi_BI-V150_4.3.0.txt``)::

    |  IX-ML: 4.3.0       Driver Version: 4.3.0       CUDA Version: 10.2          |
    | GPU  Name                     | Bus-Id               | Clock-SM  Clock-Mem  |
    | Fan  Temp  Perf  Pwr:Usage/Cap|      Memory-Usage    | GPU-Util  Compute M. |
    | 0    Iluvatar BI-V150         | 00000000:13:00.0     | 1500MHz   1600MHz    |
    | N/A  35C   P0    N/A / N/A    | 64MiB / 32768MiB     | 0%        Default    |

Units as printed: percent, Celsius, W, MiB, MHz. Every second BI-V150 prints ``N/A / N/A`` power (one
reading per dual-die board, plausibly): those devices get no power series, never 0. Identity: no UUID in
the table, so ``uuid`` is the PCI bus id (sysfs form), in both modes.

``ixsmi --query-gpu=... --format=csv`` (vendors.md 3.6: ixsmi mimics nvidia-smi; SWAN's ``iluvatar.py``
queries ``board.power.draw``) is read when the backend's option ``mode`` is ``csv``. No real capture of it
was found, so it is opt-in; its parser is header-driven in nvidia-smi's CSV conventions (``name [unit]``
headers, ``N/A`` / ``[Not Supported]`` cells) and adds memory-controller utilization.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, Device, DeviceSample, ParseError
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "iluvatar"
TOOLS = ("ixsmi",)
HEADER = "Pwr:Usage/Cap"

_LINE2 = re.compile(r"(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+" + t.POWER_PAIR)


def sniff(text: str) -> bool:
    """An ixsmi table: the IX-ML title and the nvidia-smi-like column header."""
    return "IX-ML" in text and HEADER in text


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``ixsmi`` output -> one DeviceSample per GPU. Raises ParseError on anything else."""
    if "IX-ML" not in text:
        raise ParseError("not an ixsmi table: no IX-ML title")
    driver = t.header_value(text, r"Driver Version:\s*([0-9][\w.\-]*)")

    identify = t.index_name_device(VENDOR, driver, "GPU Name")

    def read(device: Device, block: t.Block) -> DeviceSample:
        clocks = t.cell(block, 0, 2).split()
        m = _LINE2.fullmatch(t.cell(block, 1, 0))
        util = t.cell(block, 1, 2).split()
        if len(clocks) != 2 or m is None or not util:
            raise ParseError(f"device block {block!r} does not match the ixsmi layout")
        used, total = t.used_total(t.cell(block, 1, 1), t.MIB_AS_BYTES, "Memory-Usage")
        temp = t.quantity(m["temp"], t.CELSIUS, "Temp")
        sm = t.quantity(clocks[0], t.MHZ_AS_HERTZ, "Clock-SM")
        mem = t.quantity(clocks[1], t.MHZ_AS_HERTZ, "Clock-Mem")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(util[0], t.PERCENT_AS_RATIO, "GPU-Util"),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=t.quantity(m["power"], t.WATTS, "Pwr:Usage"),
            power_limit_watts=t.quantity(m["cap"], t.WATTS, "Pwr:Cap"),
            clocks_hertz={k: v for k, v in (("sm", sm), ("memory", mem)) if v is not None},
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER, rows=2), identify, read)


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

    def raw(block: t.Block, field: str) -> str | None:
        if field not in fields:
            return None
        row = block[0]
        if len(row) != len(rows[0]):
            raise ParseError(f"CSV row has {len(row)} cells, header has {len(rows[0])}")
        value = row[fields[field][0]].strip()
        return None if value.upper() in _NA_CELLS or t.is_not_available(value) else value

    def number(block: t.Block, *names: str) -> float | None:
        for name in names:
            value = raw(block, name)
            if value is not None:
                token = value if value[-1:].isalpha() or value.endswith("%") else f"{value} {fields[name][1]}"
                return t.quantity(token, _CSV_UNITS, name)
        return None

    def identify(block: t.Block) -> Device:
        index, name, bus = raw(block, "index"), raw(block, "name"), raw(block, "pci.bus_id")
        if index is None or not t.is_index(index) or not name or bus is None:
            raise ParseError(f"CSV row {block[0]!r} lacks index/name/pci.bus_id")
        bus_id = t.pci_bus_id(bus)
        return Device(
            VENDOR, name, index, bus_id, pci_bus_id=bus_id, driver_version=raw(block, "driver_version")
        )

    def read(device: Device, block: t.Block) -> DeviceSample:
        temp = number(block, "temperature.gpu")
        clocks = {
            "sm": number(block, "clocks.current.sm", "clocks.sm"),
            "memory": number(block, "clocks.current.memory", "clocks.mem"),
        }
        return DeviceSample(
            device=device,
            utilization_ratio=number(block, "utilization.gpu"),
            memory_bandwidth_utilization_ratio=number(block, "utilization.memory"),
            memory_used_bytes=number(block, "memory.used"),
            memory_total_bytes=number(block, "memory.total"),
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=number(block, "board.power.draw", "power.draw"),
            power_limit_watts=number(block, "power.limit", "enforced.power.limit"),
            clocks_hertz={k: v for k, v in clocks.items() if v is not None},
        )

    body = [(tuple(row),) for row in rows[1:] if any(c.strip() for c in row)]
    if not body:
        raise ParseError("CSV output has no device rows")
    return t.samples_from_blocks(body, identify, read)


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
