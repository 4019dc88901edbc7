"""MetaX GPU backend: the default ``mx-smi`` table -> DeviceSample, one per GPU.

Source of the layout: ``mx-smi`` 2.2.4 on 8 x C550 (ERNIE ``docs/devices/README_METAX_GPU.md``; fixture
``tests/fixtures/metax/mx-smi_C550_2.2.4.txt``)::

    | MX-SMI 2.2.4                        Kernel Mode Driver Version: 2.15.9          |
    | GPU         NAME                   | Bus-id              | GPU-Util             |
    | Temp        Pwr:Usage/Cap          | Memory-Usage        | GPU-State            |
    | 0           MetaX C550             | 0000:0f:00.0        | 0%                   |
    | 29C         53W / 450W             | 858/65536 MiB       | Available            |

Units as printed: percent, Celsius, W, MiB (printed once after ``used/total``). No JSON mode exists
(vendors.md 3.5). MOFFETT's SPU tool is also called ``mx-smi`` (header "MOFFETT-SMI"): detection runs the
tool once and enables this backend only when the MetaX header is there; the parser rejects other headers.
Identity: no UUID is printed, so ``uuid`` is the PCI bus id (sysfs form). ``driver_version`` is the kernel
mode driver version.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from vendors import smi_table as t
from vendors import smi_tool
from vendors.base import Backend, BackendError, Device, DeviceSample, ParseError
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from vendors.smi_tool import DEFAULT_TIMEOUT_SECONDS, ToolBackend, locate

VENDOR = "metax"
TOOLS = ("mx-smi",)
HEADER = "Pwr:Usage/Cap"

_LINE2 = re.compile(r"(?P<temp>\S+)\s+" + t.POWER_PAIR)


def _is_moffett(text: str) -> bool:
    return "MOFFETT" in text.upper()


def sniff(text: str) -> bool:
    """A MetaX mx-smi table: the MX-SMI title with MetaX named in it, never MOFFETT's tool of the same name."""
    return "MX-SMI" in text and "MetaX" in text and "GPU-State" in text and not _is_moffett(text)


def parse(text: str) -> Sequence[DeviceSample]:
    """Default MetaX ``mx-smi`` output -> one DeviceSample per GPU. Raises ParseError on anything else,
    including MOFFETT's ``mx-smi``."""
    if _is_moffett(text):
        raise ParseError("this mx-smi is MOFFETT's SPU tool, not MetaX's")
    if "MX-SMI" not in text or "MetaX" not in text:
        raise ParseError("not a MetaX mx-smi table: no MX-SMI/MetaX title")
    driver = t.header_value(text, r"Kernel Mode Driver Version:\s*([0-9][\w.\-]*)")

    identify = t.index_name_device(VENDOR, driver, "GPU NAME")

    def read(device: Device, block: t.Block) -> DeviceSample:
        m = _LINE2.fullmatch(t.cell(block, 1, 0))
        if m is None:
            raise ParseError(f"Temp/Pwr cell {t.cell(block, 1, 0)!r}")
        used, total = t.used_total(t.cell(block, 1, 1), t.MIB_AS_BYTES, "Memory-Usage")
        temp = t.quantity(m["temp"], t.CELSIUS, "Temp")
        return DeviceSample(
            device=device,
            utilization_ratio=t.quantity(t.cell(block, 0, 2), t.PERCENT_AS_RATIO, "GPU-Util"),
            memory_used_bytes=used,
            memory_total_bytes=total,
            temperatures_celsius={} if temp is None else {"core": temp},
            power_watts=t.quantity(m["power"], t.WATTS, "Pwr:Usage"),
            power_limit_watts=t.quantity(m["cap"], t.WATTS, "Pwr:Cap"),
        )

    return t.samples_from_blocks(t.device_blocks(text, HEADER, rows=2), identify, read)


def create(ctx: BackendContext) -> Backend:
    return ToolBackend("metax", ctx, TOOLS, (), parse)


def detect(ctx: BackendContext) -> Detection:
    """Found when ``mx-smi`` is on PATH and prints the MetaX header (not MOFFETT's). When the tool fails
    here, the backend is still enabled so that its failures show in the backend error counter."""
    path = locate(ctx, TOOLS)
    if path is None:
        return Detection(False, "mx-smi not on PATH")
    timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
    try:
        out = ctx.runner.run([path], timeout).stdout
    except BackendError as exc:
        return Detection(True, f"found {path}; header not checked: {exc}")
    if _is_moffett(out):
        return Detection(False, f"{path} is MOFFETT's SPU mx-smi, not MetaX's")
    if not sniff(out):
        return Detection(False, f"{path} printed no MetaX mx-smi header")
    return Detection(True, f"found {path} (MetaX header)")


register(
    BackendSpec(
        name="metax",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(OutputFormat("mx-smi-table", parse, sniff),),
        priority=74,
        options=smi_tool.OPTIONS,
    )
)
