"""Enflame GCU backend: the default ``efsmi`` table -> DeviceSample, one per GCU.

Source of the layout: ``efsmi`` V1.2.0.301 on 2 x S60 (PaddlePaddle/docs
``docs/hardware_support/gcu/install_cn.md``; fixture ``tests/fixtures/enflame/efsmi_S60_1.2.0.301.txt``)::

    |EFSMI    V1.2.0.301       Driver Ver: 1.2.0.301                           |
    | DEV    NAME                | FW VER          | BUS-ID      ECC           |
    | TEMP   Dpm   Pwr(Usage/Cap)| Mem     GCU Virt| DUsed       SN            |
    | 0      S60                 | 33.6.2          | 00:01:00.0  Disable       |
    | 39 C   Sleep    105W  300W | 49120MiB Disable|   0.0%      SN00000000000 |

Units as printed: Celsius (``39 C``), W, MiB, percent. ``Mem`` is the memory capacity (vendors.md 3.7: the
column shows total only), so memory used is not known from this view. ``DUsed`` is read as the device (DTU,
Enflame's compute unit) utilization percentage. ``ECC`` shows the ECC mode (Enable/Disable), not error
counts: exported as a vendor metric. No machine-readable mode is documented. Identity: ``uuid`` is the PCI
bus id (sysfs form, the printed ``00:01:00.0`` is domain:bus:device.function); the SN goes to ``serial``.
"""

from __future__ import annotations

import re
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

_LINE2 = re.compile(
    r"(?P<temp>N/A|[0-9.]+\s?C)\s+(?P<dpm>\S+)\s+(?P<power>N/A|[0-9.]+\s?W)\s+(?P<cap>N/A|[0-9.]+\s?W)"
)
_ECC_MODE = {"enable": 1.0, "enabled": 1.0, "disable": 0.0, "disabled": 0.0}


def sniff(text: str) -> bool:
    """An efsmi table: the EFSMI title and its Pwr(Usage/Cap) column."""
    return "EFSMI" in text and HEADER in text


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``efsmi`` output -> one DeviceSample per GCU. Raises ParseError on anything else."""
    if "EFSMI" not in text:
        raise ParseError("not an efsmi table: no EFSMI title")
    driver = t.header_value(text, r"Driver Ver:\s*([0-9][\w.\-]*)")

    def identify(block: t.Block) -> Device:
        head = t.cell(block, 0, 0).split()
        bus_ecc = t.cell(block, 0, 2).split()
        dused_sn = t.cell(block, 1, 2).split()
        if len(head) < 2 or not t.is_index(head[0]) or not bus_ecc:
            raise ParseError(f"GCU line {t.cell(block, 0, 0)!r} is not 'DEV NAME'")
        bus = t.pci_bus_id(bus_ecc[0])
        sn = dused_sn[1] if len(dused_sn) > 1 else None
        return Device(
            vendor=VENDOR,
            model=" ".join(head[1:]),
            index=head[0],
            uuid=bus,
            pci_bus_id=bus,
            driver_version=driver,
            serial=None if sn is None or t.is_not_available(sn) else sn,
        )

    def read(device: Device, block: t.Block) -> DeviceSample:
        m = _LINE2.fullmatch(t.cell(block, 1, 0))
        mem = t.cell(block, 1, 1).split()
        dused = t.cell(block, 1, 2).split()
        if m is None or not mem or not dused:
            raise ParseError(f"device block {block!r} does not match the efsmi layout")
        bus_ecc = t.cell(block, 0, 2).split()
        ecc = _ECC_MODE.get(bus_ecc[1].lower()) if len(bus_ecc) > 1 else None
        temp = t.quantity(m["temp"], t.CELSIUS, "TEMP")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(dused[0], t.PERCENT_AS_RATIO, "DUsed"),
            memory_total_bytes=t.quantity(mem[0], t.MIB_AS_BYTES, "Mem"),
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=t.quantity(m["power"], t.WATTS, "Pwr Usage"),
            power_limit_watts=t.quantity(m["cap"], t.WATTS, "Pwr Cap"),
            vendor_metrics={} if ecc is None else {ECC_ENABLED.name: ecc},
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER, rows=2), identify, read)


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
