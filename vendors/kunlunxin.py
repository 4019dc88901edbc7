"""Kunlunxin XPU backend: both generations of the ``xpu-smi`` / ``xpu_smi`` default output -> DeviceSample.

Columns are found by header name in both (``smi_table.table_rows`` for the box; the DEVICES table is one
line per XPU with one column per cell); a cell that cannot be read costs that reading only
(``DeviceSample.unread``). The binary is spelled ``xpu_smi`` in the Paddle docs and ``xpu-smi`` elsewhere (vendors.md 3.3): both are
probed. Its default output has two generations, told apart by their header:

* driver 5.x (P800), an nvidia-smi-like box, 3 lines per XPU (ERNIE ``docs/devices/README_XPU.md``;
  fixture ``xpu-smi_P800_drv5.0.21.21.txt``)::

    | XPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
    | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | XPU-Util  Compute M. |
    |                               |             L3-Usage |            SR-IOV M. |

  memory and L3 in MiB (as labelled), power W, temperature C, ECC = volatile uncorrected count.
* driver 4.x (R300), a ``DEVICES`` row table (PaddlePaddle/docs ``docs/hardware_support/xpu/install_cn.md``;
  fixture ``xpu_smi_R300_rt4.31_drv4.0.txt``)::

    | DevID |   PCI Addr   | Model |   SN   |    INODE   | UseRate |    L3     |    Memory    |

  (the wide variant on R200/K100/K200 adds ``State``, ``Power(W)``, ``Temp``, ``Freq(MHz)``, firmware and
  CPLD versions; fixtures ``xpu_smi_R200-K100_drv4.0_wide-power-temp.txt``, ``xpu_smi_K200x4_...``),
  with no temperature or power in the narrow one. Memory is labelled ``MB`` but is binary: an R300 card has 32 GiB and
  prints ``32768 MB`` (= 32 x 1024), so ``MB`` is read as MiB; L3 likewise.

Identity: no UUID is printed, so ``uuid`` is the PCI bus id (sysfs form); the 4.x SN column goes to
``serial``. L3 (on-chip SRAM) usage is a vendor metric.

``xpu-smi -q`` (format ``xpu-smi-query``; driver 5.x) prints each XPU as indented ``key : value`` sections
under ``XPU <PCI id>``, like ``nvidia-smi -q``; keys read in ``parse_query`` (fixture
``xpu-smi_-q_P800-PCIe_drv5.0.21.26_1of2.txt``, zstack-utility's Kunlunxin module docstring).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from xpuwatch.vendors import smi_query, smi_tool
from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "kunlunxin"
TOOLS = ("xpu-smi", "xpu_smi")
HEADER_V5 = "Pwr:Usage/Cap"
# xpu_smi 4.x labels binary sizes "MB" (see module docstring).
MB_AS_MIB_BYTES = {"MB": t.MIB}

L3_USED = VendorMetric(
    name="accelerator_kunlunxin_l3_used_bytes",
    type="gauge",
    unit="bytes",
    help="On-chip L3 SRAM of the XPU in use.",
    source="xpu-smi 5.x L3-Usage (MiB); xpu_smi 4.x DEVICES column L3 (printed MB, binary)",
)
L3_TOTAL = VendorMetric(
    name="accelerator_kunlunxin_l3_total_bytes",
    type="gauge",
    unit="bytes",
    help="On-chip L3 SRAM capacity of the XPU.",
    source="xpu-smi 5.x L3-Usage (MiB); xpu_smi 4.x DEVICES column L3 (printed MB, binary)",
)

_DRIVER = r"Driver Version:\s*([0-9][\w.\-]*)"
_V4_COLUMNS = ("DevID", "PCI Addr", "Model", "UseRate", "Memory")


def sniff_v5(text: str) -> bool:
    """The driver-5.x box: XPU-SMI title and the XPU-Util column."""
    return "XPU-SMI" in text and "XPU-Util" in text and HEADER_V5 in text


def sniff_v4(text: str) -> bool:
    """The driver-4.x DEVICES table: DevID and UseRate columns."""
    return "DEVICES" in text and "DevID" in text and "UseRate" in text


def _l3(used: float | None, total: float | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if used is not None:
        out[L3_USED.name] = used
    if total is not None:
        out[L3_TOTAL.name] = total
    return out


def _identify_v5(driver: str | None, row: t.Row) -> Device:
    index, name = row.get("XPU") or "", row.get("Name") or ""
    if not t.is_index(index) or not name:
        raise ParseError(f"XPU line {row.line!r} is not 'XPU Name Persistence-M'")
    bus = t.pci_bus_id(row.get("Bus-Id") or "")
    return Device(vendor=VENDOR, model=name, index=index, uuid=bus, pci_bus_id=bus, driver_version=driver)


def _read_v5(device: Device, row: t.Row) -> DeviceSample:
    c = t.CellReader(row)
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr:Usage/Cap"], t.WATTS)
    used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES)
    l3_used, l3_total = c.pair(
        (f"vendor_metrics.{L3_USED.name}", f"vendor_metrics.{L3_TOTAL.name}"), ["L3-Usage"], t.MEMORY_AS_BYTES
    )
    ecc = c.number("ecc_errors.uncorrected", ["Volatile Uncorr. ECC"], t.COUNT)
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["XPU-Util"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        power_watts=power,
        power_limit_watts=cap,
        ecc_errors={} if ecc is None else {"uncorrected": int(ecc)},
        vendor_metrics=_l3(l3_used, l3_total),
        unread=c.unread,
    )


def parse_v5(text: str) -> Sequence[DeviceSample]:
    """Driver 5.x ``xpu-smi`` box -> one DeviceSample per XPU. Raises ParseError on anything else."""
    if "XPU-SMI" not in text:
        raise ParseError("not an xpu-smi 5.x table: no XPU-SMI title")
    driver = t.header_value(text, _DRIVER)
    return t.samples_from_rows(t.table_rows(text, HEADER_V5), lambda row: _identify_v5(driver, row), _read_v5)


def _v4_rows(text: str) -> list[t.Row]:
    """The DEVICES table as Rows (column name -> cell), one per XPU; ParseError when it is not there."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if "DevID" in line and "UseRate" in line), None)
    if at is None:
        raise ParseError("no DEVICES table: DevID/UseRate header not found")
    names = t.cells(lines[at])
    missing = [c for c in _V4_COLUMNS if c not in names]
    if missing:
        raise ParseError(f"DEVICES header lacks columns {missing}")
    rows: list[t.Cells] = []
    closed = False
    for line in lines[at + 1 :]:
        if t.is_rule(line):
            if rows:
                closed = True
                break
            continue
        if "|" not in line:
            break
        rows.append(t.cells(line))
    if not closed and rows:
        rows.pop()  # a table not closed by a rule was cut off: its last row may be half a line
    if not rows:
        raise ParseError("DEVICES table holds no complete device row")
    out: list[t.Row] = []
    for row in rows:
        if len(row) != len(names):
            raise ParseError(f"DEVICES row has {len(row)} cells, header has {len(names)}")
        out.append(t.Row({n.lower(): v for n, v in zip(names, row, strict=True)}, "|".join(row)))
    return out


def parse_v4(text: str) -> Sequence[DeviceSample]:
    """Driver 4.x ``xpu_smi`` DEVICES table -> one DeviceSample per XPU. Raises ParseError on anything else.

    The wide variant adds ``Power(W)`` and ``Temp`` (bare numbers, units in the header: W and Celsius).
    Kunlun 1 K200 boards hold two XPUs behind one PCI address; such XPUs get ``<bus>-xpu<DevID>`` as uuid.
    """
    rows = _v4_rows(text)
    driver = t.header_value(text, _DRIVER)
    buses = [row.get("PCI Addr") for row in rows]

    def identify(row: t.Row) -> Device:
        index = row.get("DevID") or ""
        if not t.is_index(index):
            raise ParseError(f"DevID {index!r} is not a number")
        bus_text = row.get("PCI Addr") or ""
        bus_id = t.pci_bus_id(bus_text)
        sn = (row.get("SN") or "").strip()
        return Device(
            vendor=VENDOR,
            model=row.get("Model") or "",
            index=index,
            uuid=bus_id if buses.count(bus_text) == 1 else f"{bus_id}-xpu{index}",
            pci_bus_id=bus_id,
            driver_version=driver,
            serial=None if not sn or t.is_not_available(sn) else sn,
        )

    def read(device: Device, row: t.Row) -> DeviceSample:
        c = t.CellReader(row)
        used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory"], MB_AS_MIB_BYTES)
        l3_used, l3_total = c.pair(
            (f"vendor_metrics.{L3_USED.name}", f"vendor_metrics.{L3_TOTAL.name}"), ["L3"], MB_AS_MIB_BYTES
        )
        temp = c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS, default_unit="C")
        return DeviceSample(
            device=device,
            utilization_ratio=c.number("utilization_ratio", ["UseRate"], t.PERCENT_AS_RATIO),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperatures_celsius=t.temperatures(temp),
            power_watts=c.number("power_watts", ["Power(W)"], t.WATTS, default_unit="W"),
            vendor_metrics=_l3(l3_used, l3_total),
            unread=c.unread,
        )

    return t.samples_from_rows(rows, identify, read)


def parse(text: str) -> Sequence[DeviceSample]:
    """Either generation, chosen by its header; ParseError when neither matches."""
    if sniff_v5(text):
        return parse_v5(text)
    if sniff_v4(text):
        return parse_v4(text)
    raise ParseError("neither an xpu-smi 5.x table nor an xpu_smi 4.x DEVICES table")


# --- xpu-smi -q ------------------------------------------------------------------------------------------

_QUERY_DEVICE = re.compile(r"XPU\s+((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])$")
_QUERY_DRIVER = r"Driver Version\s*:\s*([0-9][\w.\-]*)"
_QUERY_KEYS_READ = (
    "product name",
    "serial number",
    "minor number",
    "pci/bus id",
    "memory usage/total",
    "memory usage/used",
    "l3 usage/total",
    "l3 usage/used",
    "utilization/xpu",
    "ecc errors/volatile/dram correctable",
    "ecc errors/volatile/dram uncorrectable",
    "temperature/xpu current temp",
    "power readings/power draw",
    "power readings/enforced power limit",
    "processes",
)


def sniff_query(text: str) -> bool:
    """``xpu-smi -q``: the XPUSMI LOG banner, or an ``XPU <PCI id>`` line with xpu-smi's section names."""
    head = text[:20000]
    if "XPUSMI LOG" in head:
        return True
    return any(_QUERY_DEVICE.fullmatch(ln.strip()) for ln in head.splitlines()) and "XPU Current Temp" in head


def parse_query(text: str) -> Sequence[DeviceSample]:
    """``xpu-smi -q`` (driver 5.x, P800; also ``-q --id=<bus>`` for one XPU) -> one DeviceSample per ``XPU
    <PCI id>`` section (``smi_query``), keys by section path:

    ``Product Name``, ``Serial Number``, ``Minor Number`` (the index ``xpu-smi`` prints in its table),
    ``PCI / Bus Id`` (the uuid, as the table's: the ``XPU UUID`` is not used so that both outputs name one
    device), ``Memory Usage / Total, Used`` and ``L3 Usage / Total, Used`` (MiB), ``Utilization / Xpu``,
    ``ECC Errors / Volatile / DRAM Correctable, Uncorrectable``, ``Temperature / XPU Current Temp``,
    ``Power Readings / Power Draw, Enforced Power Limit``, ``Processes`` (``None``: no process). Raises
    ParseError when no section's PCI id can be read."""
    driver = t.header_value(text, _QUERY_DRIVER)
    positions = itertools.count()

    def identify(rec: smi_query.Record) -> Device:
        position = next(positions)
        bus = t.pci_bus_id(rec.row.get("pci/bus id") or rec.header[0])
        minor, sn = rec.row.get("minor number"), (rec.row.get("serial number") or "").strip()
        return Device(
            vendor=VENDOR,
            model=(rec.row.get("product name") or "").strip() or "unknown",
            index=minor.strip() if minor is not None and t.is_index(minor.strip()) else str(position),
            uuid=bus,
            pci_bus_id=bus,
            driver_version=driver,
            serial=None if not sn or t.is_not_available(sn) or t.is_masked(sn) else sn,
        )

    out: list[DeviceSample] = []
    for rec, device in smi_query.identified(text, _QUERY_DEVICE, "xpu-smi -q", identify):
        c = t.CellReader(rec.row)
        ecc: dict[str, int] = {}
        for kind, key in (
            ("corrected", "ecc errors/volatile/dram correctable"),
            ("uncorrected", "ecc errors/volatile/dram uncorrectable"),
        ):
            got = c.number(f"ecc_errors.{kind}", [key], t.COUNT)
            if got is not None:
                ecc[kind] = int(got)
        procs = c.text("processes")
        out.append(
            DeviceSample(
                device=device,
                utilization_ratio=c.number("utilization_ratio", ["utilization/xpu"], t.PERCENT_AS_RATIO),
                memory_used_bytes=c.number("memory_used_bytes", ["memory usage/used"], t.MEMORY_AS_BYTES),
                memory_total_bytes=c.number("memory_total_bytes", ["memory usage/total"], t.MEMORY_AS_BYTES),
                temperatures_celsius=t.temperatures(
                    c.number("temperatures_celsius.core", ["temperature/xpu current temp"], t.CELSIUS)
                ),
                power_watts=c.number("power_watts", ["power readings/power draw"], t.WATTS),
                power_limit_watts=c.number(
                    "power_limit_watts", ["power readings/enforced power limit"], t.WATTS
                ),
                ecc_errors=ecc,
                vendor_metrics=_l3(
                    c.number(f"vendor_metrics.{L3_USED.name}", ["l3 usage/used"], t.MEMORY_AS_BYTES),
                    c.number(f"vendor_metrics.{L3_TOTAL.name}", ["l3 usage/total"], t.MEMORY_AS_BYTES),
                ),
                processes=() if procs is not None and procs.lower() == "none" else None,
                unread=c.unread,
            )
        )
    return out


def explain_query(text: str) -> list[str]:
    """The section/key paths of an ``xpu-smi -q`` output the reader does not use, once each."""
    return smi_query.unused(text, _QUERY_DEVICE, _QUERY_KEYS_READ, "xpu-smi -q")


def query_sections(text: str) -> list[str]:
    """Per XPU section, the sections read and not read."""
    return smi_query.sections_read(text, _QUERY_DEVICE, _QUERY_KEYS_READ, "xpu-smi -q")


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("kunlunxin", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="kunlunxin",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(
            OutputFormat("xpu-smi-table", parse_v5, sniff_v5),
            OutputFormat("xpu-smi-devices", parse_v4, sniff_v4),
            OutputFormat(
                "xpu-smi-query", parse_query, sniff_query, explain=explain_query, sections=query_sections
            ),
        ),
        metrics=(L3_USED, L3_TOTAL),
        priority=72,
        options=smi_tool.OPTIONS,
    )
)
