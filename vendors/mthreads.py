"""Moore Threads GPU backend: the default ``mthreads-gmi`` table -> DeviceSample, one per GPU.

Columns are found by header name (``smi_table.table_rows``), 3 lines per GPU. Layouts read (fixtures in
``tests/fixtures/mthreads/``): 1.14.0 and 2.0.0 on MTT S80 (no ``Perf`` column), 2.3.2 and 2.4.1 on MTT
S5000::

    ID   Name                 |PCIe                |%GPU  Mem
         Device Type   Perf   |Pcie Lane Width     |Temp  MPC Capable
                                                   |      ECC Mode
    0    MTT S5000            |00000000:2a:00.0    |0%    66641MiB(81920MiB)
         Physical      P0     |16x(16x)            |52C   YES
                                                   |      On-die, EDC

Units as printed: percent, Celsius, memory ``used(total)`` in MiB. This view has no power column. The
``-q --json`` mode (vendors.md 3.4) would be preferred, but it is known only from a third-party parser,
with no real capture to test against, so the table (several real captures) is what this backend reads.
Identity: no UUID in the table, so ``uuid`` is the PCI bus id (sysfs form).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, Device, DeviceSample, ParseError
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import ToolBackend, detect_tool

VENDOR = "mthreads"
TOOLS = ("mthreads-gmi",)
HEADER = "MPC Capable"

_USED_TOTAL = re.compile(r"(?P<used>[^\s(]+)\((?P<total>[^)]+)\)")


def sniff(text: str) -> bool:
    """An mthreads-gmi table: the tool's title and its %GPU / MPC Capable columns."""
    return "mthreads-gmi" in text and "%GPU" in text and HEADER in text


def identify(driver: str | None, row: t.Row) -> Device:
    """ID, Name and PCIe -> Device (``smi_table.index_name_bus``)."""
    return t.index_name_bus(VENDOR, driver, row, index="ID", bus="PCIe")


def read(device: Device, row: t.Row) -> DeviceSample:
    """The readings of one GPU; unreadable cells go to ``unread``."""
    c = t.CellReader(row)
    used = total = None
    mem = c.text("Mem")
    if mem is not None:
        m = _USED_TOTAL.fullmatch(mem)
        if m is None:
            c.unread["memory_used_bytes"] = f"Mem: {mem!r} is not 'used(total)'"
        else:
            used = c.value("memory_used_bytes", m["used"], t.MEMORY_AS_BYTES)
            total = c.value("memory_total_bytes", m["total"], t.MEMORY_AS_BYTES)
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["%GPU"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        unread=c.unread,
    )


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``mthreads-gmi`` output -> one DeviceSample per GPU. Raises ParseError on anything else."""
    if "mthreads-gmi" not in text:
        raise ParseError("not an mthreads-gmi table: no mthreads-gmi title")
    driver = t.header_value(text, r"Driver Version:\s*([0-9][\w.\-]*)")
    return t.samples_from_rows(t.table_rows(text, HEADER), lambda row: identify(driver, row), read)


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("mthreads", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    return detect_tool(ctx, TOOLS)


register(
    BackendSpec(
        name="mthreads",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("mthreads-gmi-table", parse, sniff),),
        priority=76,
        options=smi_tool.OPTIONS,
    )
)
