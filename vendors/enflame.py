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
error counts: exported as a vendor metric. Identity: ``uuid`` is the PCI bus id (sysfs form; the printed
``00:01:00.0`` is domain:bus:device.function); the SN goes to ``serial``.

``efsmi -q`` (format ``efsmi-query``; also ``-q -d TEMP,MEMORY,USAGE,...``) prints each GCU as indented
``key : value`` sections under ``DEV ID <n>`` (``smi_query``), and gives what the table lacks: memory used.
Keys (real captures: hawkli-1994/gpu_tools ``pkg/gpu/enflame/testdata/efs-15.txt``, ``efs17.txt``; the
zstack-utility Enflame docstring)::

    PCIe Info / Domain, Bus, Dev, Func        -> uuid (the table's PCI id, so both forms name one device)
    Device Info / Dev Name, Dev SN, Health    -> model, serial, accelerator_health{subsystem="device"}
    Driver Info / Ver                         -> driver_version
    Device Mem Info / Total Size, Used Size   -> memory (1.4+; 1.2 prints Mem Size, Mem Usage)
    Temperature Info / GCU Temp, Memory Temp  -> temperature core, memory (named sensors; Board Temp is not
                                                 the chip's and is not read)
    Power Info / Cur Power, Power Capa        -> power, power limit
    Device Usage Info / GCU Usage             -> utilization
    ECC Mode / Current                        -> accelerator_enflame_ecc_enabled

``Used Size`` excludes the driver's ``Reserved Size`` (1129 MiB on an S60); 1.2's ``Mem Usage`` printed
1129 MiB on an idle card, i.e. includes it: each is exported as printed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from xpuwatch.vendors import smi_query, smi_tool
from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import Backend, Device, DeviceSample, ParseError, VendorMetric
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

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


_DEV_ID = re.compile(r"DEV ID\s+(\d{1,6})")
_HEALTH = {"true": True, "false": False, "ok": True, "normal": True}


def parse_query(text: str) -> Sequence[DeviceSample]:
    """``efsmi -q`` text -> one DeviceSample per ``DEV ID`` section (keys in the module docstring). Raises
    ParseError when there is no section or no section's PCI id can be read."""

    def identify(rec: smi_query.Record) -> Device:
        row = rec.row
        bus = t.pci_bus_id(
            f"{row.get('pcie info/domain') or ''}:{row.get('pcie info/bus') or ''}:"
            f"{row.get('pcie info/dev') or ''}.{row.get('pcie info/func') or ''}"
        )
        c = t.CellReader(row)
        sn = c.text("device info/dev sn")
        return Device(
            vendor=VENDOR,
            model=c.text("device info/dev name") or "unknown",
            index=str(int(rec.header[0])),
            uuid=bus,
            pci_bus_id=bus,
            driver_version=c.text("driver info/ver"),
            serial=None if sn is None or t.is_masked(sn) else sn,
        )

    out: list[DeviceSample] = []
    for rec, device in smi_query.identified(text, _DEV_ID, "efsmi -q", identify):
        c = t.CellReader(rec.row)
        health_text = (c.text("device info/health") or "").lower()
        health = _HEALTH.get(health_text)
        if health_text and health is None:
            c.unread["health.device"] = f"Health: {health_text!r} is not True/False"
        ecc_text = (c.text("ecc mode/current") or "").lower()
        ecc = _ECC_MODE.get(ecc_text)
        if ecc_text and ecc is None:
            c.unread[f"vendor_metrics.{ECC_ENABLED.name}"] = f"ECC Mode: {ecc_text!r} is not Enable/Disable"
        temps: dict[str, float] = {}
        for sensor, key in (
            ("core", "temperature info/gcu temp"),
            ("memory", "temperature info/memory temp"),
        ):
            got = c.number(f"temperatures_celsius.{sensor}", [key], t.CELSIUS, default_unit="C")
            if got is not None:
                temps[sensor] = got
        out.append(
            DeviceSample(
                device=device,
                utilization_ratio=c.number(
                    "utilization_ratio", ["device usage info/gcu usage"], t.PERCENT_AS_RATIO
                ),
                memory_used_bytes=c.number(
                    "memory_used_bytes",
                    ["device mem info/used size", "device mem info/mem usage"],
                    t.MEMORY_AS_BYTES,
                ),
                memory_total_bytes=c.number(
                    "memory_total_bytes",
                    ["device mem info/total size", "device mem info/mem size"],
                    t.MEMORY_AS_BYTES,
                ),
                temperatures_celsius=temps,
                power_watts=c.number("power_watts", ["power info/cur power"], t.WATTS),
                power_limit_watts=c.number("power_limit_watts", ["power info/power capa"], t.WATTS),
                health={} if health is None else {"device": health},
                vendor_metrics={} if ecc is None else {ECC_ENABLED.name: ecc},
                unread=c.unread,
            )
        )
    return out


_QUERY_KEYS_READ = (
    "pcie info/domain",
    "pcie info/bus",
    "pcie info/dev",
    "pcie info/func",
    "device info/dev name",
    "device info/dev sn",
    "device info/health",
    "driver info/ver",
    "device mem info/total size",
    "device mem info/used size",
    "device mem info/mem size",
    "device mem info/mem usage",
    "temperature info/gcu temp",
    "temperature info/memory temp",
    "power info/cur power",
    "power info/power capa",
    "device usage info/gcu usage",
    "ecc mode/current",
)


def explain_query(text: str) -> list[str]:
    """The section/key paths of the output the reader does not use, once each."""
    return smi_query.unused(text, _DEV_ID, _QUERY_KEYS_READ, "efsmi -q")


def sniff_query(text: str) -> bool:
    """``efsmi -q``: a ``DEV ID <n>`` line and Enflame's section names."""
    head = text[:20000]
    return _DEV_ID.search(head) is not None and ("Device Mem Info" in head or "Device Usage Info" in head)


# --- the monitor view: one row per GCU --------------------------------------------------------------------

# Column name -> (reading, units of the reading, the unit efsmi prints in its unit row).
_MONITOR_COLUMNS: dict[str, tuple[str, Mapping[str, float], str]] = {
    "Pwr": ("power_watts", t.WATTS, "W"),
    "DTemp": ("temperatures_celsius.core", t.CELSIUS, "C"),
    "DUsed": ("utilization_ratio", t.PERCENT_AS_RATIO, "%"),
    "MUsed": ("memory_used_ratio", t.PERCENT_AS_RATIO, "%"),
    "Mem": ("memory_total_bytes", t.MEMORY_AS_BYTES, "MiB"),
    "Mclk": ("clocks_hertz.memory", t.MHZ_AS_HERTZ, "MHz"),
}
_MONITOR_UNUSED = {
    "Sip": "SIP (compute core) utilization: the device's utilization is DUsed",
    "Dpm": "DPM power level (Sleep, ...): no reading of the shared schema",
    "TxPci": "PCIe transmit rate: no reading of the shared schema",
    "RxPci": "PCIe receive rate: no reading of the shared schema",
}


def _monitor_header(lines: Sequence[str]) -> tuple[int, list[str], list[str]]:
    """(index of the first row, column names, their units) of the ``*Dev ...`` / ``*Idx ...`` header."""
    for i, line in enumerate(lines):
        names = line.strip().lstrip("*").split()
        if line.strip().startswith("*") and names[:1] == ["Dev"]:
            below = lines[i + 1].strip() if i + 1 < len(lines) else ""
            units = below.lstrip("*").split() if below.startswith("*") else []
            if units[:1] != ["Idx"]:
                units = []
            return i + (2 if units else 1), names, units
    raise ParseError("efsmi monitor: no '*Dev Pwr ...' header")


def sniff_monitor(text: str) -> bool:
    """efsmi's monitor view: a ``*Dev`` header line and its ``*Idx`` unit line."""
    lines = [ln.strip() for ln in text[:20000].splitlines()]
    return any(a.startswith("*Dev") and b.startswith("*Idx") for a, b in itertools.pairwise(lines))


def parse_monitor(text: str) -> Sequence[DeviceSample]:
    """efsmi's monitor view (one row per GCU under ``*Dev Pwr DTemp Sip DUsed Dpm MUsed Mem Mclk TxPci
    RxPci`` and a ``*Idx W C % % L % MiB MHz MiB/s MiB/s`` unit row) -> one DeviceSample per GCU.

    Columns by header name, each value in the unit its unit row prints: Pwr -> power, DTemp -> temperature
    ``core``, DUsed -> utilization (the same column as the table's DUsed), MUsed -> ``memory_used_ratio``
    (the view prints memory in use only as a share of Mem), Mem -> memory total, Mclk -> memory clock. A
    ``-`` (a sleeping GCU) is no reading. The view names a GCU only by its index: ``uuid`` is
    ``efsmi-dev<n>`` and the model ``unknown``, so its series do not join the table's (bus id) ones. A
    monitor that repeats its header prints a GCU again: the last row of each GCU is kept. A row whose
    value count differs from the header's cannot be aligned: its GCU stays up with every reading unread.
    Raises ParseError when there is no header or no row."""
    lines = text.splitlines()
    start, names, units = _monitor_header(lines)
    rows: dict[str, list[str]] = {}
    for line in lines[start:]:
        tokens = line.split()
        if not tokens or line.strip().startswith("*"):
            continue
        if not t.is_index(tokens[0]):
            if rows:
                break
            continue
        rows[str(int(tokens[0]))] = tokens
    if not rows:
        raise ParseError("efsmi monitor: no GCU row under the header")
    out: list[DeviceSample] = []
    for index, tokens in rows.items():
        device = Device(vendor=VENDOR, model="unknown", index=index, uuid=f"efsmi-dev{index}")
        c = t.CellReader(t.Row(dict(zip((n.lower() for n in names), tokens, strict=False)), " ".join(tokens)))
        if len(tokens) != len(names):
            why = f"{len(tokens)} values under {len(names)} columns"
            c.unread.update({reading: why for n, (reading, _, _) in _MONITOR_COLUMNS.items() if n in names})
            out.append(DeviceSample(device=device, unread=c.unread))
            continue
        got: dict[str, float] = {}
        for name, (reading, table, unit) in _MONITOR_COLUMNS.items():
            if name not in names:
                continue
            printed = units[names.index(name)] if len(units) == len(names) else unit
            value = c.number(reading, [name], table, default_unit=printed)
            if value is not None:
                got[reading] = value
        out.append(
            DeviceSample(
                device=device,
                utilization_ratio=got.get("utilization_ratio"),
                memory_total_bytes=got.get("memory_total_bytes"),
                memory_used_ratio=got.get("memory_used_ratio"),
                temperatures_celsius=t.temperatures(got.get("temperatures_celsius.core")),
                power_watts=got.get("power_watts"),
                clocks_hertz={}
                if "clocks_hertz.memory" not in got
                else {"memory": got["clocks_hertz.memory"]},
                unread=c.unread,
            )
        )
    return out


def explain_monitor(text: str) -> list[str]:
    """The monitor columns the reader does not use."""
    _, names, _ = _monitor_header(text.splitlines())
    known = {"Dev", *_MONITOR_COLUMNS}
    return [
        f"{n}: {_MONITOR_UNUSED.get(n, 'no reading of the shared schema')}" for n in names if n not in known
    ]


def monitor_sections(text: str) -> list[str]:
    """The header with its unit row, and how many GCU rows were read."""
    lines = text.splitlines()
    start, names, units = _monitor_header(lines)
    gcus = {tok.split()[0] for tok in lines[start:] if tok.split() and t.is_index(tok.split()[0])}
    unit_row = "with its unit row" if units else "without a unit row (units assumed: W, C, %, MiB, MHz)"
    return [f"monitor header: {len(names)} columns {unit_row}", f"GCU rows: {len(gcus)} GCU(s)"]


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
        formats=(
            OutputFormat("efsmi-table", parse, sniff),
            OutputFormat("efsmi-query", parse_query, sniff_query, explain_query),
            OutputFormat(
                "efsmi-monitor",
                parse_monitor,
                sniff_monitor,
                explain=explain_monitor,
                sections=monitor_sections,
            ),
        ),
        metrics=(ECC_ENABLED,),
        priority=80,
        options=smi_tool.OPTIONS,
    )
)
