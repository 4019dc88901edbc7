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

Units as printed: percent, Celsius, memory ``used(total)`` in MiB. This view has no power column.
Identity: no UUID in the table, so ``uuid`` is the PCI bus id (sysfs form). Used above total
(``44302MiB(32768MiB)``, an S4000 on a host with IOMMU off) is exported as printed and flagged by
``exporter.plausibility``.

``mthreads-gmi -q --json`` (format ``mthreads-gmi-json``; known from one real excerpt of 2 of 8 S5000, see
``tests/fixtures/mthreads/mthreads-gmi_-q_json_S5000_*_excerpt.json.source``): top-level ``Driver Version``
and ``GPU[]`` with ``Index``, ``Product Name``, ``GPU UUID`` (the device's ``uuid`` here), ``Serial Number``,
``PCI.Bus ID``, ``FB Memory Usage.Total|Used`` (``"81920MiB"``), ``Utilization.Gpu`` (``"0%"``),
``Temperature.GPU Current Temp`` (``"27C"``), ``Power Readings.Power Draw `` (with a trailing space in the
key: keys are compared stripped) and ``Current Power Limit``. ``inspect`` reads it; the backend keeps the
table, of which several real captures exist, until a complete ``-q --json`` capture confirms the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors import smi_tool
from xpuwatch.vendors.base import Backend, Device, DeviceSample, ParseError
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

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


def _flat(doc: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested JSON objects -> {"fb memory usage/total": "81920MiB"}: keys stripped and lower-case."""
    out: dict[str, str] = {}
    for key, value in doc.items():
        name = f"{prefix}{str(key).strip().lower()}"
        if isinstance(value, Mapping):
            out.update(_flat(value, name + "/"))
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            out.setdefault(name, str(value))
    return out


def parse_json(text: str) -> Sequence[DeviceSample]:
    """``mthreads-gmi -q --json`` -> one DeviceSample per ``GPU[]`` entry (module docstring). Raises
    ParseError on invalid JSON, no ``GPU`` list, or no entry with an index."""
    try:
        doc = json.loads(text[text.index("{") :] if "{" in text else text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"mthreads-gmi -q --json: invalid JSON: {str(exc)[:120]}") from exc
    gpus = doc.get("GPU") if isinstance(doc, dict) else None
    if not isinstance(gpus, list):
        raise ParseError("mthreads-gmi -q --json: no GPU list")
    driver = doc.get("Driver Version")
    driver = driver.strip() if isinstance(driver, str) and driver.strip() else None
    out: list[DeviceSample] = []
    for gpu in gpus:
        if not isinstance(gpu, Mapping):
            continue
        c = t.CellReader(t.Row(_flat(gpu), str(gpu.get("Index", ""))[:40]))
        idx = c.text("index") or ""
        if not t.is_index(idx):
            continue
        bus_text = c.text("pci/bus id")
        try:
            bus = t.pci_bus_id(bus_text) if bus_text else None
        except ParseError:
            c.unread["pci_bus_id"] = f"PCI Bus ID: {bus_text!r} is not a PCI address"
            bus = None
        uuid = c.text("gpu uuid") or bus or f"{VENDOR}-index-{int(idx)}"
        serial = c.text("serial number")
        if any(s.device.uuid == uuid for s in out):
            raise ParseError(f"mthreads-gmi -q --json: two GPUs with uuid {uuid!r}")
        out.append(
            DeviceSample(
                device=Device(
                    VENDOR, c.text("product name") or "unknown", str(int(idx)), uuid, bus, driver, serial
                ),
                utilization_ratio=c.number("utilization_ratio", ["utilization/gpu"], t.PERCENT_AS_RATIO),
                memory_used_bytes=c.number("memory_used_bytes", ["fb memory usage/used"], t.MEMORY_AS_BYTES),
                memory_total_bytes=c.number(
                    "memory_total_bytes", ["fb memory usage/total"], t.MEMORY_AS_BYTES
                ),
                temperatures_celsius=t.temperatures(
                    c.number("temperatures_celsius.core", ["temperature/gpu current temp"], t.CELSIUS)
                ),
                power_watts=c.number("power_watts", ["power readings/power draw"], t.WATTS),
                power_limit_watts=c.number(
                    "power_limit_watts", ["power readings/current power limit"], t.WATTS
                ),
                unread=c.unread,
            )
        )
    if not out:
        raise ParseError("mthreads-gmi -q --json: no GPU entry with an Index")
    return out


def sniff_json(text: str) -> bool:
    head = text[:4000]
    return head.lstrip()[:1] == "{" and '"GPU"' in head and ('"MTBios Version"' in head or "MTT " in head)


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
        formats=(
            OutputFormat("mthreads-gmi-table", parse, sniff),
            OutputFormat("mthreads-gmi-json", parse_json, sniff_json),
        ),
        priority=76,
        options=smi_tool.OPTIONS,
    )
)
