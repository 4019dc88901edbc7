"""Enflame GCU backend: the default ``efsmi`` table -> DeviceSample, one per GCU.

Columns are found by header name (``smi_table.table_rows``), 2 lines per GCU. Layouts read (fixtures in
``tests/fixtures/enflame/``: PaddlePaddle docs 1.2.0, vllm-gcu 1.4.0, FlagTree 1.6.3 and 1.7.2)::

    | DEV    NAME                 | FW VER            | BUS-ID      ECC           |
    | TEMP   Lpm   Pwr(Usage/Cap) | Mem      GCU Virt | DUsed       SN            |
    | 0      Enflame L300         | 40.2.8.3          | 00:2d:00.0  Enable        |
    | 35     LP1      68W / 300W  | 147456MiB Disable | 0%          A000000000002 |

Version differences the reader absorbs: ``Dpm`` (1.2-1.4) or ``Lpm`` (1.6+); TEMP as ``39 C``, ``34℃``
or a bare ``35`` (Celsius, the only unit efsmi uses); power as ``105W  300W``, ``68W / 300W``, ``N/A``
or ``-`` (a sleeping card prints ``-`` for TEMP and power: no reading, the card stays up). ``Mem`` is
the memory capacity (vendors.md 3.7: total only), so memory used is not known from this view.
``DUsed`` is the device (GCU) utilization percentage. ``ECC`` is the ECC mode (Enable/Disable), not
error counts: exported as a vendor metric. ``efsmi -q`` prints more (used memory, GCU Usage) as
``key : value`` text; it is not read yet for want of a complete real capture. Identity: ``uuid`` is the
PCI bus id (sysfs form; the printed ``00:01:00.0`` is domain:bus:device.function); the SN goes to
``serial``.
"""

from __future__ import annotations

from collections.abc import Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "enflame"
TOOLS = ("efsmi",)
HEADER = "Pwr(Usage/Cap)"

ECC_ENABLED = VendorMetric(
    name="accelerator_enflame_ecc_enabled",
    type="gauge",
    unit="",
    help="1 when ECC is enabled on the GCU's memory, 0 when disabled.",
    source="efsmi default table, column ECC (Enable/Disable)",
)

_ECC_MODE = {"enable": 1.0, "enabled": 1.0, "disable": 0.0, "disabled": 0.0}


def sniff(text: str) -> bool:
    """An efsmi table: the EFSMI title and its Pwr(Usage/Cap) column."""
    return "EFSMI" in text and HEADER in text


def identify(driver: str | None, row: t.Row) -> Device:
    """DEV, NAME, BUS-ID and SN -> Device. ParseError when DEV is not a number or BUS-ID not a PCI id."""
    dev, name = row.get("DEV") or "", row.get("NAME") or ""
    if not t.is_index(dev) or not name:
        raise ParseError(f"GCU line {row.line!r} is not 'DEV NAME'")
    bus = t.pci_bus_id(row.get("BUS-ID") or "")
    sn = (row.get("SN") or "").strip()
    return Device(
        vendor=VENDOR,
        model=name,
        index=dev,
        uuid=bus,
        pci_bus_id=bus,
        driver_version=driver,
        serial=None if not sn or t.is_not_available(sn) or t.is_masked(sn) else sn,
    )


def read(device: Device, row: t.Row) -> DeviceSample:
    """The readings of one GCU; unreadable cells go to ``unread``."""
    c = t.CellReader(row)
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr(Usage/Cap)"], t.WATTS)
    ecc_text = (c.text("ECC") or "").lower()
    ecc = _ECC_MODE.get(ecc_text)
    if ecc_text and ecc is None:
        c.unread[f"vendor_metrics.{ECC_ENABLED.name}"] = f"ECC: {ecc_text!r} is not Enable/Disable"
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["DUsed"], t.PERCENT_AS_RATIO),
        memory_total_bytes=c.number("memory_total_bytes", ["Mem"], t.MEMORY_AS_BYTES),
        temperatures_celsius=t.temperatures(
            c.number("temperatures_celsius.core", ["TEMP"], t.CELSIUS, default_unit="C")
        ),
        power_watts=power,
        power_limit_watts=cap,
        vendor_metrics={} if ecc is None else {ECC_ENABLED.name: ecc},
        unread=c.unread,
    )


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``efsmi`` output -> one DeviceSample per GCU. Raises ParseError on anything else."""
    if "EFSMI" not in text:
        raise ParseError("not an efsmi table: no EFSMI title")
    driver = t.header_value(text, r"Driver Ver:\s*([0-9][\w.\-]*)")
    return t.samples_from_rows(t.table_rows(text, HEADER), lambda row: identify(driver, row), read)


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("enflame", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="enflame",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("efsmi-table", parse, sniff),),
        metrics=(ECC_ENABLED,),
        priority=80,
        options=smi_tool.OPTIONS,
    )
)
