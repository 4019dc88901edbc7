"""Moore Threads GPU backend: the default ``mthreads-gmi`` table -> DeviceSample, one per GPU.

Source of the layout: ``mthreads-gmi`` 2.3.2 on MTT S5000 (vllm-project/vllm-omni PR 2337; fixture
``tests/fixtures/mthreads/mthreads-gmi_S5000_2.3.2_excerpt.txt``), 3 lines per GPU::

    ID   Name                 |PCIe                |%GPU  Mem
         Device Type   Perf   |Pcie Lane Width     |Temp  MPC Capable
                                                   |      ECC Mode
    0    MTT S5000            |00000000:2a:00.0    |0%    66641MiB(81920MiB)
         Physical      P0     |16x(16x)            |52C   YES
                                                   |      On-die, EDC

Units as printed: percent, Celsius, memory ``used(total)`` in MiB. This view has no power column. The
``-q --json`` mode (vendors.md 3.4) is known only from a third-party parser, with no real capture to test
against, so the table (a real capture) is what this backend reads. Identity: no UUID in the table, so
``uuid`` is the PCI bus id (sysfs form).
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

_UTIL_MEM = re.compile(r"(?P<util>\S+)\s+(?P<used>[^\s(]+)\((?P<total>[^)]+)\)")


def sniff(text: str) -> bool:
    """An mthreads-gmi table: the tool's title and its %GPU / MPC Capable columns."""
    return "mthreads-gmi" in text and "%GPU" in text and HEADER in text


def parse(text: str) -> Sequence[DeviceSample]:
    """Default ``mthreads-gmi`` output -> one DeviceSample per GPU. Raises ParseError on anything else."""
    if "mthreads-gmi" not in text:
        raise ParseError("not an mthreads-gmi table: no mthreads-gmi title")
    driver = t.header_value(text, r"Driver Version:\s*([0-9][\w.\-]*)")

    identify = t.index_name_device(VENDOR, driver, "ID Name")

    def read(device: Device, block: t.Block) -> DeviceSample:
        m = _UTIL_MEM.fullmatch(t.cell(block, 0, 2))
        if m is None:
            raise ParseError(f"%GPU/Mem cell {t.cell(block, 0, 2)!r}")
        temp_mpc = t.cell(block, 1, 2).split()
        if not temp_mpc:
            raise ParseError("empty Temp cell")
        temp = t.quantity(temp_mpc[0], t.CELSIUS, "Temp")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(m["util"], t.PERCENT_AS_RATIO, "%GPU"),
            memory_used_bytes=t.quantity(m["used"], t.MIB_AS_BYTES, "Mem used"),
            memory_total_bytes=t.quantity(m["total"], t.MIB_AS_BYTES, "Mem total"),
            temperatures_celsius={} if temp is None else {"core": temp},
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER, rows=3), identify, read)


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
