"""Kunlunxin XPU backend: both generations of the ``xpu-smi`` / ``xpu_smi`` default output -> DeviceSample.

The binary is spelled ``xpu_smi`` in the Paddle docs and ``xpu-smi`` elsewhere (vendors.md 3.3): both are
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

  with no temperature or power. Memory is labelled ``MB`` but is binary: an R300 card has 32 GiB and
  prints ``32768 MB`` (= 32 x 1024), so ``MB`` is read as MiB; L3 likewise.

Identity: no UUID is printed, so ``uuid`` is the PCI bus id (sysfs form); the 4.x SN column goes to
``serial``. L3 (on-chip SRAM) usage is a vendor metric.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import ToolBackend, detect_tool

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

_LINE2_V5 = re.compile(r"(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+" + t.POWER_PAIR)
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


def parse_v5(text: str) -> Sequence[DeviceSample]:
    """Driver 5.x ``xpu-smi`` box -> one DeviceSample per XPU. Raises ParseError on anything else."""
    if "XPU-SMI" not in text:
        raise ParseError("not an xpu-smi 5.x table: no XPU-SMI title")
    driver = t.header_value(text, _DRIVER)

    def identify(block: t.Block) -> Device:
        head = t.cell(block, 0, 0).split()
        bus = t.cell(block, 0, 1).split()
        if len(head) < 3 or not t.is_index(head[0]) or not bus:
            raise ParseError(f"XPU line {t.cell(block, 0, 0)!r} is not 'XPU Name Persistence-M'")
        bus_id = t.pci_bus_id(bus[0])
        return Device(
            vendor=VENDOR,
            model=" ".join(head[1:-1]),
            index=head[0],
            uuid=bus_id,
            pci_bus_id=bus_id,
            driver_version=driver,
        )

    def read(device: Device, block: t.Block) -> DeviceSample:
        ecc = t.quantity(t.cell(block, 0, 2), t.COUNT, "Volatile Uncorr. ECC")
        m = _LINE2_V5.fullmatch(t.cell(block, 1, 0))
        if m is None:
            raise ParseError(f"Fan/Temp/Perf/Pwr cell {t.cell(block, 1, 0)!r}")
        used, total = t.used_total(t.cell(block, 1, 1), t.MIB_AS_BYTES, "Memory-Usage")
        util = t.cell(block, 1, 2).split()
        if not util:
            raise ParseError("empty XPU-Util cell")
        l3_used, l3_total = t.used_total(t.cell(block, 2, 1), t.MIB_AS_BYTES, "L3-Usage")
        temp = t.quantity(m["temp"], t.CELSIUS, "Temp")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(util[0], t.PERCENT_AS_RATIO, "XPU-Util"),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=t.quantity(m["power"], t.WATTS, "Pwr:Usage"),
            power_limit_watts=t.quantity(m["cap"], t.WATTS, "Pwr:Cap"),
            ecc_errors={} if ecc is None else {"uncorrected": int(ecc)},
            vendor_metrics=_l3(l3_used, l3_total),
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER_V5, rows=3), identify, read)


def _v4_rows(text: str) -> tuple[t.Cells, list[t.Cells]]:
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
    return names, rows


def parse_v4(text: str) -> Sequence[DeviceSample]:
    """Driver 4.x ``xpu_smi`` DEVICES table -> one DeviceSample per XPU. Raises ParseError on anything else."""
    names, rows = _v4_rows(text)
    driver = t.header_value(text, _DRIVER)

    def col(block: t.Block, name: str) -> str:
        row = block[0]
        if len(row) != len(names):
            raise ParseError(f"DEVICES row has {len(row)} cells, header has {len(names)}")
        return row[names.index(name)]

    def identify(block: t.Block) -> Device:
        index = col(block, "DevID")
        if not t.is_index(index):
            raise ParseError(f"DevID {index!r} is not a number")
        bus_id = t.pci_bus_id(col(block, "PCI Addr"))
        sn = col(block, "SN") if "SN" in names else ""
        return Device(
            vendor=VENDOR,
            model=col(block, "Model"),
            index=index,
            uuid=bus_id,
            pci_bus_id=bus_id,
            driver_version=driver,
            serial=None if not sn or t.is_not_available(sn) else sn,
        )

    def read(device: Device, block: t.Block) -> DeviceSample:
        used, total = t.used_total(col(block, "Memory"), MB_AS_MIB_BYTES, "Memory")
        l3: dict[str, float] = {}
        if "L3" in names:
            l3 = _l3(*t.used_total(col(block, "L3"), MB_AS_MIB_BYTES, "L3"))
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(col(block, "UseRate"), t.PERCENT_AS_RATIO, "UseRate"),
            memory_used_bytes=used,
            memory_total_bytes=total,
            vendor_metrics=l3,
        )

    return t.samples_from_blocks([(row,) for row in rows], identify, read)


def parse(text: str) -> Sequence[DeviceSample]:
    """Either generation, chosen by its header; ParseError when neither matches."""
    if sniff_v5(text):
        return parse_v5(text)
    if sniff_v4(text):
        return parse_v4(text)
    raise ParseError("neither an xpu-smi 5.x table nor an xpu_smi 4.x DEVICES table")


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
        ),
        metrics=(L3_USED, L3_TOTAL),
        priority=72,
        options=smi_tool.OPTIONS,
    )
)
