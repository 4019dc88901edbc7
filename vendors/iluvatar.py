"""Iluvatar CoreX GPU backend: the default ``ixsmi`` table (nvidia-smi-like) -> DeviceSample, one per GPU.

Source of the layout: ``ixsmi`` 4.3.0 on 16 x BI-V150 (ERNIE ``docs/devices/README_ILUVATAR_GPU.md``;
fixture ``tests/fixtures/iluvatar/ixsmi_BI-V150_4.3.0.txt``)::

    |  IX-ML: 4.3.0       Driver Version: 4.3.0       CUDA Version: 10.2          |
    | GPU  Name                     | Bus-Id               | Clock-SM  Clock-Mem  |
    | Fan  Temp  Perf  Pwr:Usage/Cap|      Memory-Usage    | GPU-Util  Compute M. |
    | 0    Iluvatar BI-V150         | 00000000:13:00.0     | 1500MHz   1600MHz    |
    | N/A  35C   P0    N/A / N/A    | 64MiB / 32768MiB     | 0%        Default    |

Units as printed: percent, Celsius, W, MiB, MHz. Every second BI-V150 prints ``N/A / N/A`` power (one
reading per dual-die board, plausibly): those devices get no power series, never 0. ``ixsmi --query-gpu
... --format=csv`` exists (vendors.md 3.6) but no real capture of it was found; the table is what this
backend reads. Identity: no UUID in the table, so ``uuid`` is the PCI bus id (sysfs form).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vendors import smi_table as t
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

    def identify(block: t.Block) -> Device:
        head = t.cell(block, 0, 0).split()
        if len(head) < 2 or not head[0].isdigit():
            raise ParseError(f"GPU line {t.cell(block, 0, 0)!r} is not 'GPU Name'")
        bus = t.pci_bus_id(t.cell(block, 0, 1))
        return Device(
            vendor=VENDOR,
            model=" ".join(head[1:]),
            index=head[0],
            uuid=bus,
            pci_bus_id=bus,
            driver_version=driver,
        )

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


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("iluvatar", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="iluvatar",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("ixsmi-table", parse, sniff),),
        priority=78,
    )
)
