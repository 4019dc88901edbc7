"""Cambricon MLU backend: the default ``cnmon`` table -> DeviceSample, one per MLU card (chip) row.

Columns are found by header name (``smi_table.table_rows``), 2 lines per card. Layouts read (fixtures in
``tests/fixtures/cambricon/``): v5.10.x (PaddlePaddle docs and guides)::

    | Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
    | Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |   (v5.10.22+: Mode)
    | 0     /   MLU370-X8    v1.1.6 |         0000:39:00.0 | 0%                N/A |
    |  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |

and v4.20 (``Inited  Driver`` instead of ``Bus-Id``, ``vMemory-Usage`` instead of the modes). Units as
printed: Util percent, Temp Celsius, power W, memory MiB. cnmon has no JSON/CSV mode (vendors.md 3.1).
A cell that cannot be read (a publisher's ``xxxxx MiB``) costs that reading only (``DeviceSample.unread``).
Identity: the table prints no UUID, so ``uuid`` is the PCI bus id (sysfs form); v4 prints no bus id
either, so there it is ``card<index>`` (cnmon's card number, stable while the cards stay in their slots).
"""

from __future__ import annotations

from collections.abc import Sequence

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors import smi_tool
from xpuwatch.vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "cambricon"
TOOLS = ("cnmon",)
HEADER = "Pwr:Usage/Cap"

ECC_ERRORS = VendorMetric(
    name="accelerator_cambricon_ecc_errors_total",
    type="counter",
    unit="",
    help="ECC errors of the MLU as cnmon's Ecc-Error column prints them (cnmon does not split corrected/uncorrected).",
    source="cnmon default table, column Ecc-Error (N/A on cards without ECC reporting)",
)


def sniff(text: str) -> bool:
    """A cnmon table: the CNMON title and cnmon's column header."""
    return "CNMON" in text and HEADER in text and "Ecc-Error" in text


def identify(driver: str | None, row: t.Row) -> Device:
    """Card, VF and Name (and Bus-Id when printed) -> Device. ParseError when the card is not a number."""
    card, vf, name = row.get("Card") or "", row.get("VF") or "/", row.get("Name") or ""
    if not t.is_index(card) or not (vf == "/" or t.is_index(vf)) or not name:
        raise ParseError(f"card line {row.line!r} is not 'Card VF Name Firmware'")
    bus_text = row.get("Bus-Id")
    bus = t.pci_bus_id(bus_text) if bus_text else None
    base = bus or f"card{card}"
    return Device(
        vendor=VENDOR,
        model=name,
        index=card if vf == "/" else f"{card}-{vf}",
        uuid=base if vf == "/" else f"{base}-vf{vf}",
        pci_bus_id=bus,
        driver_version=driver or (row.get("Driver") or "").lstrip("v") or None,
    )


def read(device: Device, row: t.Row) -> DeviceSample:
    """The readings of one card; unreadable cells go to ``unread``."""
    c = t.CellReader(row)
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr:Usage/Cap"], t.WATTS)
    used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES)
    ecc = c.number(f"vendor_metrics.{ECC_ERRORS.name}", ["Ecc-Error"], t.COUNT)
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["Util"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        power_watts=power,
        power_limit_watts=cap,
        vendor_metrics={} if ecc is None else {ECC_ERRORS.name: ecc},
        unread=c.unread,
    )


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``cnmon`` output -> one DeviceSample per card row. Raises ParseError on anything else."""
    if "CNMON" not in text:
        raise ParseError("not a cnmon table: no CNMON title")
    driver = t.header_value(text, r"Driver v?([0-9][\w.\-]*)")
    return t.samples_from_rows(t.table_rows(text, HEADER), lambda row: identify(driver, row), read)


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("cambricon", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="cambricon",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("cnmon-table", parse, sniff),),
        metrics=(ECC_ERRORS,),
        priority=70,
        options=smi_tool.OPTIONS,
    )
)
