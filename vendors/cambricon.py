"""Cambricon MLU backend: the default ``cnmon`` table -> DeviceSample, one per MLU card (chip) row.

Source of the layout: ``cnmon`` v5.10 as shown in PaddlePaddle/docs ``docs/hardware_support/mlu/install_cn.md``
(fixture ``tests/fixtures/cambricon/cnmon_MLU370-X8_v5.10.13.txt``)::

    | Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
    | Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |
    | 0     /   MLU370-X8    v1.1.6 |         0000:39:00.0 | 0%                N/A |
    |  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |

Units as printed: Util percent, Temp Celsius, power W, memory MiB (the column says ``MiB``; Cambricon's own
mlu-exporter reports the same CNDev numbers in bytes). cnmon has no JSON/CSV mode (vendors.md 3.1).
Identity: the table prints no UUID, so ``uuid`` is the PCI bus id (sysfs form), stable across restarts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import ToolBackend, detect_tool

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

_LINE2 = re.compile(r"(?P<fan>\S+)\s+(?P<temp>\S+)\s+" + t.POWER_PAIR)


def sniff(text: str) -> bool:
    """A cnmon table: the CNMON title and cnmon's column header."""
    return "CNMON" in text and HEADER in text and "Ecc-Error" in text


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``cnmon`` output -> one DeviceSample per card row. Raises ParseError on anything else."""
    if "CNMON" not in text:
        raise ParseError("not a cnmon table: no CNMON title")
    driver = t.header_value(text, r"Driver v?([0-9][\w.\-]*)")

    def identify(block: t.Block) -> Device:
        head = t.cell(block, 0, 0).split()
        if len(head) < 4 or not t.is_index(head[0]) or not (head[1] == "/" or t.is_index(head[1])):
            raise ParseError(f"card line {t.cell(block, 0, 0)!r} is not 'Card VF Name Firmware'")
        card, vf = head[0], head[1]
        bus = t.pci_bus_id(t.cell(block, 0, 1))
        return Device(
            vendor=VENDOR,
            model=" ".join(head[2:-1]),
            index=card if vf == "/" else f"{card}-{vf}",
            uuid=bus if vf == "/" else f"{bus}-vf{vf}",
            pci_bus_id=bus,
            driver_version=driver,
        )

    def read(device: Device, block: t.Block) -> DeviceSample:
        util_ecc = t.cell(block, 0, 2).split()
        if len(util_ecc) != 2:
            raise ParseError(f"Util/Ecc-Error cell {t.cell(block, 0, 2)!r}")
        m = _LINE2.fullmatch(t.cell(block, 1, 0))
        if m is None:
            raise ParseError(f"Fan/Temp/Pwr cell {t.cell(block, 1, 0)!r}")
        used, total = t.used_total(t.cell(block, 1, 1), t.MIB_AS_BYTES, "Memory-Usage")
        temp = t.quantity(m["temp"], t.CELSIUS, "Temp")
        ecc = t.quantity(util_ecc[1], t.COUNT, "Ecc-Error")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(util_ecc[0], t.PERCENT_AS_RATIO, "Util"),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=t.quantity(m["power"], t.WATTS, "Pwr:Usage"),
            power_limit_watts=t.quantity(m["cap"], t.WATTS, "Pwr:Cap"),
            vendor_metrics={} if ecc is None else {ECC_ERRORS.name: ecc},
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER, rows=2), identify, read)


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
