"""MetaX GPU backend: the default ``mx-smi`` table, or ``ht-smi`` (MetaX HPCC stack) -> DeviceSample.

Both tools print the same family of boxed tables, 2 lines per GPU; columns are found by header name
(``smi_table.table_rows``). Layouts read (fixtures in ``tests/fixtures/metax/``):

* mx-smi 2.1.6: ``GPU NAME | Bus-id | GPU-Util`` / ``Temp Power | Memory-Usage |`` (power without cap);
* mx-smi 2.1.12 and 2.2.4 (and ht-smi 2.2.4): ``Temp Pwr:Usage/Cap | Memory-Usage | GPU-State``;
* mx-smi 2.2.8 (N260): ``GPU NAME Persistence-M | Bus-id | GPU-Util sGPU-M`` /
  ``Temp Pwr:Usage/Cap Perf | Memory-Usage | GPU-State``;
* ht-smi 2.2.9+ (Mars X201) and mx-smi 2.3.1 (C500), four cells::

    | Board       Name | GPU   Persist-M | Bus-id              | GPU-Util      sGPU-M |
    | Pwr:Usage/Cap    | Temp       Perf | Memory-Usage        | GPU-State            |
    | 0      Mars X201 | 0           Off | 0000:4b:00.0        | 0%          Disabled |
    | 38W / 350W       | 34C          P0 | 858/65536 MiB       | Available            |

Units as printed: percent, Celsius, W, MiB (printed once after ``used/total``). ``mx-smi -j`` exists on
newer releases (a third-party detector reads its driver/MACA versions) but no real capture of its device
readings was found, so the table is read. MOFFETT's SPU tool is also called ``mx-smi`` (header
"MOFFETT-SMI"): detection runs the tool once and enables this backend only when a MetaX header is there.
Identity: no UUID is printed, so ``uuid`` is the PCI bus id (sysfs form); ``index`` is the GPU column.
``driver_version`` is the kernel mode driver version. ``GPU-State`` (``Available`` in every capture) is not
mapped: MetaX documents no list of its values.

Per-topic text (format ``mx-smi-query``: ``mx-smi --show-temperature --show-usage --show-memory``, real
captures of mx-smi 2.2.12 and 2.3.4 on MXN260 in hawkli-1994/gpu_tools ``pkg/gpu/mx/testdata/``): one
``GPU#<n>  <name>  <bus id>`` line per GPU, then indented sections (``smi_query``)::

    Chip Temperature / hotspot(sensor1)  :  38.00 C   -> temperature{sensor="hotspot"} (the tool names it)
    Memory / vram total, vram used       : 67108864 KB -> memory bytes (KB = KiB: 67108864 KB is 64 GiB)
    Utilization / GPU                    : 0 %          -> utilization

``Board Temperature`` sensors (DrMOS, tdiode, air inlet/outlet) are the board's, not the GPU's: not read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xpuwatch.vendors import smi_query, smi_tool
from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import Backend, BackendError, Device, DeviceSample, ParseError
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import DEFAULT_TIMEOUT_SECONDS, ToolBackend, locate

VENDOR = "metax"
TOOLS = ("mx-smi", "ht-smi")
HEADER = "Memory-Usage"
_DRIVER = r"Kernel Mode Driver Version:\s*([0-9][\w.\-]*)"


def _is_moffett(text: str) -> bool:
    return "MOFFETT" in text.upper()


def sniff(text: str) -> bool:
    """A MetaX mx-smi table: the MX-SMI title with MetaX named in it, never MOFFETT's tool of the same name."""
    return (
        "MX-SMI" in text and "MetaX" in text and HEADER in text and "Bus-id" in text and not _is_moffett(text)
    )


def sniff_ht(text: str) -> bool:
    """A MetaX ht-smi table: the HT-SMI title and the HPCC version line."""
    return "HT-SMI" in text and "HPCC Version" in text and HEADER in text and "Bus-id" in text


def identify(driver: str | None, row: t.Row) -> Device:
    """GPU, NAME and Bus-id -> Device (``smi_table.index_name_bus``)."""
    return t.index_name_bus(VENDOR, driver, row, index="GPU", bus="Bus-id")


def read(device: Device, row: t.Row) -> DeviceSample:
    """The readings of one GPU; unreadable cells go to ``unread``."""
    c = t.CellReader(row)
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr:Usage/Cap", "Power"], t.WATTS)
    used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES)
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["GPU-Util"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        power_watts=power,
        power_limit_watts=cap,
        unread=c.unread,
    )


def _parse(text: str) -> list[DeviceSample]:
    driver = t.header_value(text, _DRIVER)
    return t.samples_from_rows(t.table_rows(text, HEADER), lambda row: identify(driver, row), read)


def parse(text: str) -> Sequence[DeviceSample]:
    """Default MetaX ``mx-smi`` output -> one DeviceSample per GPU. Raises ParseError on anything else,
    including MOFFETT's ``mx-smi``."""
    if _is_moffett(text):
        raise ParseError("this mx-smi is MOFFETT's SPU tool, not MetaX's")
    if "MX-SMI" not in text or "MetaX" not in text:
        raise ParseError("not a MetaX mx-smi table: no MX-SMI/MetaX title")
    return _parse(text)


def parse_ht(text: str) -> Sequence[DeviceSample]:
    """MetaX ``ht-smi`` output -> one DeviceSample per GPU. Raises ParseError on anything else."""
    if "HT-SMI" not in text:
        raise ParseError("not an ht-smi table: no HT-SMI title")
    return _parse(text)


def parse_any(text: str) -> Sequence[DeviceSample]:
    """Either tool's table, chosen by its title (the backend runs whichever tool is installed)."""
    return parse_ht(text) if "HT-SMI" in text else parse(text)


_GPU_LINE = re.compile(
    r"GPU#(\d{1,6})\s+(\S.*?)\s+((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
)
# "KB" in mx-smi's memory section is binary: 67108864 KB on a 64 GiB MXN260.
KIB_AS_BYTES = {"KB": 1024.0, "KiB": 1024.0, "MiB": t.MIB, "MB": t.MIB}


def parse_query(text: str) -> Sequence[DeviceSample]:
    """``mx-smi --show-temperature --show-usage --show-memory`` text -> one DeviceSample per ``GPU#n``
    section (module docstring). Raises ParseError when there is none."""
    if _is_moffett(text):
        raise ParseError("this mx-smi is MOFFETT's SPU tool, not MetaX's")
    out: list[DeviceSample] = []
    for rec in smi_query.records(text, _GPU_LINE, "mx-smi query"):
        idx, name, bus_text = rec.header
        bus = t.pci_bus_id(bus_text)  # the header pattern admits only PCI ids
        if any(s.device.uuid == bus for s in out):
            raise ParseError(f"mx-smi query: two GPUs with bus id {bus!r}")
        c = t.CellReader(rec.row)
        hot = c.number("temperatures_celsius.hotspot", ["chip temperature/hotspot(sensor1)"], t.CELSIUS)
        out.append(
            DeviceSample(
                device=Device(VENDOR, name, str(int(idx)), bus, pci_bus_id=bus),
                utilization_ratio=c.number("utilization_ratio", ["utilization/gpu"], t.PERCENT_AS_RATIO),
                memory_used_bytes=c.number("memory_used_bytes", ["memory/vram used"], KIB_AS_BYTES),
                memory_total_bytes=c.number("memory_total_bytes", ["memory/vram total"], KIB_AS_BYTES),
                temperatures_celsius={} if hot is None else {"hotspot": hot},
                unread=c.unread,
            )
        )
    return out


_QUERY_KEYS_READ = (
    "chip temperature/hotspot(sensor1)",
    "memory/vram used",
    "memory/vram total",
    "utilization/gpu",
)


def explain_query(text: str) -> list[str]:
    """The section/key paths of the output the reader does not use, once each."""
    return smi_query.unused(text, _GPU_LINE, _QUERY_KEYS_READ, "mx-smi query")


def sniff_query(text: str) -> bool:
    """MetaX's log title and a ``GPU#n`` section line."""
    head = text[:20000]
    return "MetaX System Management Interface Log" in head and _GPU_LINE.search(head) is not None


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("metax", ctx, TOOLS, (), parse_any)


def detect(ctx: BackendContext) -> Detection:
    """Found when ``mx-smi`` or ``ht-smi`` is on PATH and prints a MetaX header (not MOFFETT's). When the
    tool fails here, the backend is still enabled so that its failures show in the backend error counter."""
    path = locate(ctx, TOOLS)
    if path is None:
        return Detection(False, "mx-smi / ht-smi not on PATH")
    timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
    try:
        out = ctx.runner.run([path], timeout).stdout
    except BackendError as exc:
        return Detection(True, f"found {path}; header not checked: {exc}")
    if _is_moffett(out):
        return Detection(False, f"{path} is MOFFETT's SPU mx-smi, not MetaX's")
    if not (sniff(out) or sniff_ht(out)):
        return Detection(False, f"{path} printed no MetaX mx-smi/ht-smi header")
    return Detection(True, f"found {path} (MetaX header)")


register(
    BackendSpec(
        name="metax",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(
            OutputFormat("mx-smi-table", parse, sniff),
            OutputFormat("ht-smi-table", parse_ht, sniff_ht),
            OutputFormat("mx-smi-query", parse_query, sniff_query, explain_query),
        ),
        priority=74,
        options=smi_tool.OPTIONS,
    )
)
