"""Huawei Ascend backend: `npu-smi` text tables (info, -m, -t usages/common/health) -> DeviceSample per chip.

Vendor key ``huawei``, backend ``ascend``. Everything above the backend class is a pure function of the
tool's text, so ``xpuwatch inspect`` and capture/replay run the same code as the live exporter. The optional
DCMI source (``vendors/_dcmi.py``, libdcmi.so through ctypes) is mapped into the same shapes first.

Sources (field names and layouts): the ``npu-smi`` outputs under ``tests/fixtures/ascend/`` (driver
generations 20.2.0, 21.0.4, 22.0.3.1, 23.0.3, 23.0.5, 24.1.RC2, 25.0.rc1.1; Atlas 300 (310), 300I Duo (310P),
800 9010 (910A), 910B2C) with their ``.source`` notes, and Huawei's npu-smi / DCMI documentation as summarised
in docs/vendors/ascend.md.

Units: npu-smi prints memory in "MB" that are binary mebibytes (2^20 bytes): HBM capacities are printed as
exactly 32768 and 65536 MB for the 32 GB (910A) and 64 GB (910B) HBM stacks, which are power-of-two GiB parts,
and DCMI's ``memory_size`` (the same number) is documented in MB of the driver's 1024-based accounting.
Percentages are converted to ratios 0..1, MHz to Hz, W and degrees Celsius pass through.

Identity: ``Device.index`` is ``"<NPU ID>-<Chip ID>"`` (card and chip as npu-smi's ``-i``/``-c`` take them).
``Device.uuid`` is ``"ascend-<pci bus id, lower case>-<chip id>"`` from the main table's Bus-Id column: stable
across restarts and driver upgrades as long as the card stays in its slot (npu-smi prints no chip serial in
the tables read here; both chips of a 310P card share one bus id, hence the chip suffix). A chip whose Bus-Id
is not printed gets ``"ascend-npu<N>-chip<C>"``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from vendors._dcmi import ChipReading, Dcmi
from vendors._dcmi import find_library as find_dcmi_library
from vendors.base import BackendError, Device, DeviceSample, ParseError, ProcessMemory, VendorMetric
from vendors.command import CommandRunner, SubprocessRunner
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

log = logging.getLogger(__name__)

VENDOR = "huawei"
BACKEND = "ascend"
TOOL = "npu-smi"
MIB = 1 << 20  # npu-smi "MB" (see the module docstring)
MHZ = 1e6
# Where the Ascend driver installs npu-smi when it is not on PATH (driver run-package defaults).
STANDARD_PATHS = ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
MAX_FAULT_CODES = 32  # distinct error codes kept per chip; more are counted under "other"
OVERFLOW_CODE = "other"
# A per-card query that has failed this many polls in a row without ever answering is taken as unsupported
# by this driver/product and no longer run (the chips stay up on the main table's readings).
UNSUPPORTED_AFTER = 3

# npu-smi Health column / `-t health` "Health Status" -> DCMI health level (0 OK, 1 minor, 2 major, 3 critical).
HEALTH_LEVELS: Mapping[str, int] = {"ok": 0, "warning": 1, "alarm": 2, "critical": 3}
_NA = frozenset({"", "na", "n/a", "-", "--"})
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_HEX_CODE = re.compile(r"^(?:0x)?[0-9A-Fa-f]{1,16}$")
_INT = re.compile(r"^\d{1,9}$")


def _metric(name: str, type_: str, unit: str, help_: str, source: str) -> VendorMetric:
    return VendorMetric(f"accelerator_huawei_{name}", type_, unit, help_, source)  # type: ignore[arg-type]


HEALTH_STATE = _metric(
    "health_state",
    "gauge",
    "",
    "Chip health level as npu-smi prints it: 0 OK, 1 Warning, 2 Alarm, 3 Critical (absent when unknown).",
    "npu-smi info: Health column; npu-smi info -t health -i N -c C: Health Status",
)
AICPU = _metric(
    "aicpu_utilization_ratio",
    "gauge",
    "ratio",
    "AI CPU usage of the chip (0..1).",
    "npu-smi info -t usages -i N: Aicpu Usage Rate(%)",
)
CTRLCPU = _metric(
    "ctrlcpu_utilization_ratio",
    "gauge",
    "ratio",
    "Control CPU usage of the chip (0..1).",
    "npu-smi info -t usages -i N: Ctrlcpu Usage Rate(%)",
)
VECTORCORE = _metric(
    "vectorcore_utilization_ratio",
    "gauge",
    "ratio",
    "Vector Core usage of the chip (0..1; 310P).",
    "npu-smi info -t usages -i N: Vectorcore Usage Rate(%)",
)
AICORE_FREQ = _metric(
    "aicore_frequency_hertz",
    "gauge",
    "hertz",
    "Current AI Core clock.",
    "npu-smi info -t common -i N: Aicore curFreq(MHZ)",
)
AICORE_RATED_FREQ = _metric(
    "aicore_rated_frequency_hertz",
    "gauge",
    "hertz",
    "Rated AI Core clock.",
    "npu-smi info -t common -i N: Aicore Freq(MHZ)",
)
DDR_USED = _metric(
    "ddr_memory_used_bytes",
    "gauge",
    "bytes",
    "DDR memory in use on the chip (on HBM chips this is the control-CPU memory, not the AI Core's).",
    "npu-smi info: Memory-Usage(MB) used (MiB)",
)
DDR_TOTAL = _metric(
    "ddr_memory_total_bytes",
    "gauge",
    "bytes",
    "DDR memory capacity of the chip.",
    "npu-smi info: Memory-Usage(MB) total (MiB)",
)
DDR_BANDWIDTH = _metric(
    "ddr_bandwidth_utilization_ratio",
    "gauge",
    "ratio",
    "DDR bandwidth usage of the chip (0..1).",
    "npu-smi info -t usages -i N: DDR Bandwidth Usage Rate(%)",
)
CARD_POWER = _metric(
    "card_power_watts",
    "gauge",
    "watts",
    "Power of the whole card as its MCU reports it, exported on the card's lowest chip only (so sums "
    "stay right) for cards whose chips report no power of their own (310P).",
    "npu-smi info -t common -i N: mcu block, NPU Real-time Power(W)",
)
PROCESSES = _metric(
    "processes",
    "gauge",
    "",
    "Processes holding the chip, from the npu-smi process table.",
    "npu-smi info: process table rows (or 'No running processes found in NPU n')",
)
PROCESS_MEMORY = _metric(
    "process_memory_bytes",
    "gauge",
    "bytes",
    "Device memory held by the processes on the chip (sum of their Process memory(MB)).",
    "npu-smi info: process table Process memory(MB) (MiB)",
)
ERROR_CODES_ACTIVE = _metric(
    "error_codes_active",
    "gauge",
    "",
    "Error codes the chip reports right now (0 when npu-smi reports Health OK).",
    "npu-smi info -t health -i N -c C: Error Code",
)
METRICS: tuple[VendorMetric, ...] = (
    HEALTH_STATE,
    AICPU,
    CTRLCPU,
    VECTORCORE,
    AICORE_FREQ,
    AICORE_RATED_FREQ,
    DDR_USED,
    DDR_TOTAL,
    DDR_BANDWIDTH,
    CARD_POWER,
    PROCESSES,
    PROCESS_MEMORY,
    ERROR_CODES_ACTIVE,
)


# --------------------------------------------------------------------------------------------------------
# Parsed shapes


@dataclass(frozen=True)
class ChipRow:
    """One chip of the ``npu-smi info`` main table (a pair of rows: NPU row, chip row). Memory in MiB."""

    npu_id: int
    chip_id: int
    device_id: int | None  # the "Device" (310/310P) or "Phy-ID" column where printed
    name: str  # "910B2C", "310P3", "910A" (the NPU row's Name)
    health: str  # as printed: OK, Warning, Alarm, Critical
    power_watts: float | None
    temperature_celsius: float | None
    bus_id: str | None  # lower-case "0000:5a:00.0"
    aicore_percent: float | None
    ddr_used_mib: float | None
    ddr_total_mib: float | None
    hbm_used_mib: float | None
    hbm_total_mib: float | None

    @property
    def index(self) -> str:
        return f"{self.npu_id}-{self.chip_id}"


@dataclass(frozen=True)
class Process:
    """One row of the ``npu-smi info`` process table."""

    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mib: float | None


@dataclass(frozen=True)
class InfoTable:
    """The whole ``npu-smi info`` output. ``processes`` is None when no process table was printed (20.x);
    ``idle_npus`` are the cards listed as "No running processes found in NPU n"."""

    version: str | None
    chips: tuple[ChipRow, ...]
    processes: tuple[Process, ...] | None = None
    idle_npus: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ChipMapEntry:
    """One row of ``npu-smi info -m`` (Mcu rows are dropped)."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    name: str  # "Ascend 910A", "Ascend 310P3", "MiniD"


@dataclass(frozen=True)
class CardReport:
    """``npu-smi info -t usages|common -i N``: key/value blocks per chip (keys as printed, values as text)."""

    npu_id: int | None
    chip_count: int | None
    chips: Mapping[int, Mapping[str, str]]
    mcu: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthReport:
    """``npu-smi info -t health -i N -c C``. ``codes`` are the Error Code tokens as printed (hex)."""

    status: str
    codes: tuple[str, ...]
    information: str
    npu_id: int | None = None
    chip_id: int | None = None


# --------------------------------------------------------------------------------------------------------
# Field parsing


def _number(text: str, what: str) -> float | None:
    t = text.strip()
    if t.lower() in _NA:
        return None
    try:
        v = float(t)
    except ValueError:
        raise ParseError(f"npu-smi: {what}: not a number: {t[:40]!r}") from None
    if not math.isfinite(v):
        raise ParseError(f"npu-smi: {what}: not a finite number: {t[:40]!r}")
    return v


def _int(text: str, what: str) -> int:
    t = text.strip()
    if not _INT.match(t):
        raise ParseError(f"npu-smi: {what}: not an id: {t[:40]!r}")
    return int(t)


def _pair(text: str, what: str) -> tuple[float | None, float | None]:
    parts = text.split("/")
    if len(parts) != 2:
        raise ParseError(f"npu-smi: {what}: expected 'used / total', got {text[:40]!r}")
    return _number(parts[0], what), _number(parts[1], what)


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _mib(value: float | None) -> float | None:
    return None if value is None else value * MIB


def model_name(name: str) -> str:
    """Marketing model from an npu-smi chip name: "910B2C" -> "Ascend910B2C", "Ascend 910A" -> "Ascend910A"."""
    compact = re.sub(r"\s+", "", name)
    return compact if compact.lower().startswith("ascend") else f"Ascend{compact}"


def _lines(text: str) -> list[str]:
    if "\x00" in text:
        raise ParseError("npu-smi: output contains NUL bytes")
    return [ln.strip() for ln in text.splitlines()]


def _reject_usage_text(text: str) -> None:
    low = text.lower()
    if "invalid card id" in low or "invalid chip id" in low or "error parameter" in low:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ParseError(f"npu-smi: rejected the query: {first[:80]}")


# --------------------------------------------------------------------------------------------------------
# npu-smi info (main table)

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_NO_PROCS = re.compile(r"^No running processes found in NPU\s+(\d+)$")
_HEADER_KEYS = {
    "power(w)": "power",
    "temp(c)": "temp",
    "hugepages-usage(page)": "hugepages",
    "aicore(%)": "aicore",
    "memory-usage(mb)": "memory",
    "hbm-usage(mb)": "hbm",
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line[1:-1].split("|")]


def _values(cell: str) -> list[str]:
    # "70.5   42   1232 / 1232" -> ["70.5", "42", "1232 / 1232"]; "19435/ 21527" is one value.
    return re.findall(r"[^\s/]+\s*/\s*[^\s/]+|\S+", cell)


def _header(cell: str) -> list[str]:
    return [_HEADER_KEYS.get(tok.lower(), tok.lower()) for tok in cell.split()]


def _columns(cell: str, header: list[str], where: str) -> dict[str, str]:
    vals = _values(cell)
    if len(vals) != len(header):
        raise ParseError(f"npu-smi info: {where}: {len(vals)} values under {len(header)} columns")
    return dict(zip(header, vals, strict=True))


def _process_columns(header: list[str], n: int) -> tuple[int, int, int, int]:
    """(cell count, pid, name, memory) positions from the process table header; newer drivers add columns
    such as "Process id in container"."""
    low = [h.lower() for h in header]
    try:
        name = low.index("process name")
        mem = next(i for i, h in enumerate(low) if h.startswith("process memory"))
    except (ValueError, StopIteration):
        raise ParseError(f"npu-smi info: line {n}: process table header without name/memory") from None
    return len(header), low.index("process id"), name, mem


def _process(cells: list[str], cols: tuple[int, int, int, int], n: int) -> Process:
    width, pid_at, name_at, mem_at = cols
    extra = len(cells) - width  # a process may put "|" in its own name: those cells belong to the name
    if extra < 0:
        raise ParseError(f"npu-smi info: line {n}: process row with {len(cells)} cells")
    ids = cells[0].split()
    if len(ids) != 2:
        raise ParseError(f"npu-smi info: line {n}: process row without NPU and chip id")

    def at(i: int) -> str:
        return cells[i + extra] if i > name_at else cells[i]

    return Process(
        npu_id=_int(ids[0], "process NPU"),
        chip_id=_int(ids[1], "process chip"),
        pid=_int(at(pid_at), "process id"),
        name="|".join(cells[name_at : name_at + extra + 1]).strip(),
        memory_mib=_number(at(mem_at), "process memory"),
    )


def parse_info_table(text: str) -> InfoTable:
    """Parse ``npu-smi info``: every chip's NPU/chip row pair and the process table.

    Accepts the 20.x (no Hugepages), 21.x (Chip + Device, no HBM), 22-25.x (HBM column on 910; 310P with
    two chips per card and power ``NA``) layouts, TAB-indented dumps included. Raises ParseError on usage
    text, a truncated table (a row pair cut short, a line cut mid-row, no closing border) or garbage.
    """
    _reject_usage_text(text)
    lines = _lines(text)
    version: str | None = None
    head1: list[str] | None = None
    head2: list[str] | None = None
    chips: list[ChipRow] = []
    processes: list[Process] | None = None
    idle: set[int] = set()
    started = False
    in_procs = False
    npu_row: tuple[int, str, str, dict[str, str]] | None = None  # (npu id, name, health, values)
    proc_cols: tuple[int, int, int, int] = (0, 0, 0, 0)
    open_pair = False  # an NPU row waits for its chip row
    last_border = True
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        if line.startswith("+"):
            if not (line.endswith("+") and len(line) >= 2 and set(line) <= set("+-=")):
                raise ParseError(f"npu-smi info: line {n}: broken border: {line[:60]!r}")
            started = True
            if open_pair:
                raise ParseError(f"npu-smi info: line {n}: NPU row without its chip row")
            npu_row = None
            last_border = True
            continue
        if not line.startswith("|"):
            if started and not last_border:
                raise ParseError(f"npu-smi info: line {n}: not a table line: {line[:60]!r}")
            continue  # text outside the table (a warning before it, a note after a border)
        if not (line.endswith("|") and len(line) >= 2):
            raise ParseError(f"npu-smi info: line {n}: row cut short: {line[:60]!r}")
        started = True
        last_border = False
        cells = _cells(line)
        m = _VERSION.search(line)
        if m and head1 is None:
            version = m.group(2)
            continue
        if len(cells) >= 3 and cells[1] == "Health":
            head1 = _header(cells[2])
            continue
        if len(cells) >= 3 and cells[1] == "Bus-Id":
            head2 = _header(cells[2])
            continue
        if len(cells) >= 3 and cells[1].lower() == "process id":
            proc_cols = _process_columns(cells, n)
            in_procs = True
            processes = []
            continue
        if in_procs:
            assert processes is not None
            mp = _NO_PROCS.match(cells[0]) if len(cells) == 1 else None
            if mp:
                idle.add(int(mp.group(1)))
                continue
            processes.append(_process(cells, proc_cols, n))
            continue
        if head1 is None or head2 is None:
            raise ParseError(f"npu-smi info: line {n}: device row before the column headers")
        if len(cells) != 3:
            raise ParseError(f"npu-smi info: line {n}: device row with {len(cells)} cells")
        if not open_pair and npu_row is None:
            m1 = re.match(r"^(\d{1,9})(?:\s+(\S.*))?$", cells[0])
            if not m1 or not cells[1]:
                raise ParseError(f"npu-smi info: line {n}: expected an NPU row, got {line[:60]!r}")
            npu_row = (
                int(m1.group(1)),
                (m1.group(2) or "").strip(),  # a chip in trouble may print no name
                cells[1],
                _columns(cells[2], head1, f"line {n}"),
            )
            open_pair = True
            continue
        # A chip row: "<chip> [<device>] | <bus id> | <aicore> <memory> [<hbm>]"
        assert npu_row is not None
        ids = cells[0].split()
        if not 1 <= len(ids) <= 2 or not (_BUS_ID.match(cells[1]) or cells[1].lower() in _NA):
            raise ParseError(f"npu-smi info: line {n}: expected a chip row, got {line[:60]!r}")
        vals = _columns(cells[2], head2, f"line {n}")
        npu_id, name, health, vals1 = npu_row
        ddr = _pair(vals["memory"], "Memory-Usage") if "memory" in vals else (None, None)
        hbm = _pair(vals["hbm"], "HBM-Usage") if "hbm" in vals else (None, None)
        if not health or not re.match(r"^[A-Za-z][A-Za-z ]{0,30}$", health):
            raise ParseError(f"npu-smi info: line {n}: bad Health {health[:40]!r}")
        chips.append(
            ChipRow(
                npu_id=npu_id,
                chip_id=_int(ids[0], "Chip"),
                device_id=_int(ids[1], "Device") if len(ids) == 2 else None,
                name=name,
                health=health,
                power_watts=_number(vals1["power"], "Power(W)") if "power" in vals1 else None,
                temperature_celsius=_number(vals1["temp"], "Temp(C)") if "temp" in vals1 else None,
                bus_id=cells[1].lower() if _BUS_ID.match(cells[1]) else None,
                aicore_percent=_number(vals["aicore"], "AICore(%)") if "aicore" in vals else None,
                ddr_used_mib=ddr[0],
                ddr_total_mib=ddr[1],
                hbm_used_mib=hbm[0],
                hbm_total_mib=hbm[1],
            )
        )
        open_pair = False
    if head1 is None or head2 is None:
        raise ParseError("npu-smi info: no device table (column headers missing)")
    if open_pair:
        raise ParseError("npu-smi info: table truncated (NPU row without its chip row)")
    if not last_border:
        raise ParseError("npu-smi info: table truncated (no closing border)")
    seen: set[str] = set()
    for c in chips:
        if c.index in seen:
            raise ParseError(f"npu-smi info: chip {c.index} listed twice")
        seen.add(c.index)
    return InfoTable(
        version=version,
        chips=tuple(chips),
        processes=None if processes is None else tuple(processes),
        idle_npus=frozenset(idle),
    )


# --------------------------------------------------------------------------------------------------------
# npu-smi info -m


def parse_chip_map(text: str) -> tuple[ChipMapEntry, ...]:
    """Parse ``npu-smi info -m`` (NPU ID, Chip ID, Chip Logic ID, Chip Name; columns found by header name,
    so extra columns such as Chip Phy-ID are tolerated). ``Mcu`` pseudo-chips are dropped."""
    _reject_usage_text(text)
    lines = [ln for ln in _lines(text) if ln]
    head_at = next((i for i, ln in enumerate(lines) if ln.startswith("NPU ID") and "Chip ID" in ln), None)
    if head_at is None:
        raise ParseError("npu-smi info -m: header 'NPU ID  Chip ID ...' not found")
    names = re.split(r"\s{2,}|\t+", lines[head_at])
    for required in ("NPU ID", "Chip ID", "Chip Name"):
        if required not in names:
            raise ParseError(f"npu-smi info -m: column {required!r} missing")
    out: list[ChipMapEntry] = []
    seen: set[tuple[int, int]] = set()
    for n, line in enumerate(lines[head_at + 1 :], head_at + 2):
        vals = re.split(r"\s{2,}|\t+", line, maxsplit=len(names) - 1)
        if len(vals) != len(names):
            raise ParseError(f"npu-smi info -m: row {n}: {len(vals)} values under {len(names)} columns")
        row = dict(zip(names, vals, strict=True))
        npu = _int(row["NPU ID"], "NPU ID")
        chip = _int(row["Chip ID"], "Chip ID")
        name = row["Chip Name"].strip()
        if (npu, chip) in seen:
            raise ParseError(f"npu-smi info -m: chip {npu}-{chip} listed twice")
        seen.add((npu, chip))
        if name.lower() == "mcu":
            continue
        logic = row.get("Chip Logic ID", "-").strip()
        out.append(
            ChipMapEntry(npu, chip, None if logic in ("-", "NA") else _int(logic, "Chip Logic ID"), name)
        )
    return tuple(out)


# --------------------------------------------------------------------------------------------------------
# npu-smi info -t usages | common | health  ("Key  : value" blocks)


def _paragraphs(text: str, what: str) -> list[list[tuple[str, str]]]:
    """Blank-line separated blocks of (key, value). A line ``: more`` continues the previous key (Error
    Information); a non-blank line without a colon is garbage."""
    _reject_usage_text(text)
    paras: list[list[tuple[str, str]]] = [[]]
    last: list[tuple[str, str]] | None = None
    for n, line in enumerate(_lines(text), 1):
        if not line:
            if paras[-1]:
                paras.append([])
            continue
        if ":" not in line:
            raise ParseError(f"{what}: line {n}: not 'key : value': {line[:60]!r}")
        key, value = (s.strip() for s in line.split(":", 1))
        if not key:
            if last is None or not last:
                raise ParseError(f"{what}: line {n}: continuation without a key")
            k, v = last[-1]
            last[-1] = (k, f"{v} {value}".strip())
            continue
        paras[-1].append((key, value))
        last = paras[-1]
    return [p for p in paras if p]


def parse_card_report(text: str, what: str = "npu-smi info -t usages|common") -> CardReport:
    """Parse ``npu-smi info -t usages -i N`` or ``-t common -i N``: one block per chip (``Chip ID`` after
    its block in usages, before it in common), an optional ``Chip Name : mcu`` block (310P/910B card
    power), and the ``NPU ID`` / ``Chip Count`` header. Raises ParseError on usage text, garbage, a key
    repeated inside one block, or no chip block at all."""
    npu_id: int | None = None
    count: int | None = None
    chips: dict[int, dict[str, str]] = {}
    mcu: dict[str, str] = {}
    loose: list[dict[str, str]] = []
    for para in _paragraphs(text, what):
        block: dict[str, str] = {}
        for k, v in para:
            if k in block:
                raise ParseError(f"{what}: {k!r} twice in one block")
            block[k] = v
        if "NPU ID" in block:
            npu_id = _int(block.pop("NPU ID"), "NPU ID")
        if "Chip Count" in block:
            count = _int(block.pop("Chip Count"), "Chip Count")
        if block.get("Chip Name", "").lower() == "mcu":
            mcu = block
        elif "Chip ID" in block:
            cid = _int(block.pop("Chip ID"), "Chip ID")
            if cid in chips:
                raise ParseError(f"{what}: chip {cid} twice")
            chips[cid] = block
        elif block:
            loose.append(block)
    if loose and not chips and count == 1 and len(loose) == 1:
        chips[0] = loose[0]  # a one-chip card printed without its Chip ID line
    elif loose:
        raise ParseError(f"{what}: a block without 'Chip ID'")
    if not chips:
        raise ParseError(f"{what}: no chip block")
    if count is not None and len(chips) > count:
        raise ParseError(f"{what}: {len(chips)} chip blocks but Chip Count {count}")
    return CardReport(npu_id=npu_id, chip_count=count, chips=chips, mcu=mcu)


def parse_health(text: str) -> HealthReport:
    """Parse ``npu-smi info -t health -i N -c C``: Health Status, Error Code (``NA`` or hex codes separated
    by spaces, kept as printed, at most MAX_FAULT_CODES), Error Information (continuation lines joined)."""
    what = "npu-smi info -t health"
    kv: dict[str, str] = {}
    for para in _paragraphs(text, what):
        for k, v in para:
            if k in kv:
                raise ParseError(f"{what}: {k!r} twice")
            kv[k] = v
    status = kv.get("Health Status")
    if status is None:
        raise ParseError(f"{what}: no 'Health Status'")
    if not re.match(r"^[A-Za-z][A-Za-z ]{0,30}$", status):
        raise ParseError(f"{what}: bad Health Status {status[:40]!r}")
    raw = kv.get("Error Code", "NA").strip()
    codes: tuple[str, ...] = ()
    if raw.lower() not in _NA:
        toks = [t for t in raw.replace(",", " ").split() if t.strip(".")]  # "..." when the list goes on
        for t in toks:
            if not _HEX_CODE.match(t):
                raise ParseError(f"{what}: bad Error Code {t[:20]!r}")
        codes = tuple(dict.fromkeys(toks))[:MAX_FAULT_CODES]
    info = kv.get("Error Information", "NA")
    return HealthReport(
        status=status,
        codes=codes,
        information="" if info.strip().lower() in _NA else info,
        npu_id=_int(kv["NPU ID"], "NPU ID") if "NPU ID" in kv else None,
        chip_id=_int(kv["Chip ID"], "Chip ID") if "Chip ID" in kv else None,
    )


# --------------------------------------------------------------------------------------------------------
# Mapping into the shared schema


def device_of(row: ChipRow, driver_version: str | None = None) -> Device:
    """The Device for a main-table chip (index, uuid as in the module docstring)."""
    uuid = f"ascend-{row.bus_id}-{row.chip_id}" if row.bus_id else f"ascend-npu{row.npu_id}-chip{row.chip_id}"
    return Device(
        vendor=VENDOR,
        model=model_name(row.name),
        index=row.index,
        uuid=uuid,
        pci_bus_id=row.bus_id,
        driver_version=driver_version,
        aliases=(f"phy-{row.device_id}",) if row.device_id is not None else (),
    )


def health_level(status: str) -> int | None:
    """DCMI health level of an npu-smi health word (None when the word is not one we know)."""
    return HEALTH_LEVELS.get(status.strip().lower())


def _rate(block: Mapping[str, str], key: str) -> float | None:
    return _ratio(_number(block[key], key)) if key in block else None


def _usage_fields(block: Mapping[str, str], hbm_main: bool) -> dict[str, float]:
    """Vendor metrics and bandwidth from one chip's ``-t usages`` block (key: VendorMetric name, or the
    pseudo key "bandwidth" for the shared memory-bandwidth ratio)."""
    out: dict[str, float] = {}
    for metric, key in (
        (AICPU, "Aicpu Usage Rate(%)"),
        (CTRLCPU, "Ctrlcpu Usage Rate(%)"),
        (VECTORCORE, "Vectorcore Usage Rate(%)"),
        (DDR_BANDWIDTH, "DDR Bandwidth Usage Rate(%)"),
    ):
        v = _rate(block, key)
        if v is not None:
            out[metric.name] = v
    bw = _rate(block, "HBM Bandwidth Usage Rate(%)" if hbm_main else "DDR Bandwidth Usage Rate(%)")
    if bw is not None:
        out["bandwidth"] = bw
    return out


def _common_fields(block: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric, key in ((AICORE_FREQ, "Aicore curFreq(MHZ)"), (AICORE_RATED_FREQ, "Aicore Freq(MHZ)")):
        v = _number(block[key], key) if key in block else None
        if v is not None:
            out[metric.name] = v * MHZ
    return out


def _process_fields(table: InfoTable, row: ChipRow) -> dict[str, float]:
    if table.processes is None:
        return {}
    mine = [p for p in table.processes if p.npu_id == row.npu_id and p.chip_id == row.chip_id]
    mem = sum((p.memory_mib or 0.0 for p in mine), 0.0)
    return {PROCESSES.name: float(len(mine)), PROCESS_MEMORY.name: mem * MIB}


def _processes(table: InfoTable, row: ChipRow) -> tuple[ProcessMemory, ...] | None:
    """The chip's rows of the process table (host PIDs, Process memory(MB) -> bytes); None without a table."""
    if table.processes is None:
        return None
    return tuple(
        ProcessMemory(p.pid, None if p.memory_mib is None else p.memory_mib * MIB)
        for p in table.processes
        if p.npu_id == row.npu_id and p.chip_id == row.chip_id
    )


def sample_chip(
    row: ChipRow,
    table: InfoTable,
    usages: Mapping[str, str] | None = None,
    common: Mapping[str, str] | None = None,
    card_power_watts: float | None = None,
    health: HealthReport | None = None,
    fault_counts: Mapping[str, int] | None = None,
    card_chips: int = 1,
    memory_temperature_celsius: float | None = None,
) -> DeviceSample:
    """One chip's DeviceSample from its main-table rows and, where read, its usages/common blocks, the
    card's MCU power (pass it only for the card's lowest chip; ``card_chips`` chips share it) and its
    health report.

    utilization = AICore(%); memory = HBM-Usage when the chip has HBM (total > 0) else Memory-Usage (DDR),
    MiB -> bytes; temperature core = Temp(C); power = Power(W), else the common block's NPU Real-time Power;
    health{chip} = Health is OK; fault_events = ``fault_counts`` (backend's running counts) or, when not
    given, 1 per error code in ``health``; temperature memory = ``memory_temperature_celsius`` (HBM, DCMI
    only). Raises ParseError on a malformed number in a block.
    """
    hbm_main = bool(row.hbm_total_mib)
    used, total = (row.hbm_used_mib, row.hbm_total_mib) if hbm_main else (row.ddr_used_mib, row.ddr_total_mib)
    vendor: dict[str, float] = {}
    if row.ddr_total_mib:
        vendor[DDR_TOTAL.name] = row.ddr_total_mib * MIB
        if row.ddr_used_mib is not None:
            vendor[DDR_USED.name] = row.ddr_used_mib * MIB
    vendor.update(_process_fields(table, row))
    bandwidth = None
    if usages is not None:
        u = _usage_fields(usages, hbm_main)
        bandwidth = u.pop("bandwidth", None)
        vendor.update(u)
    power = row.power_watts
    temp = row.temperature_celsius
    if common is not None:
        vendor.update(_common_fields(common))
        if power is None and "NPU Real-time Power(W)" in common:
            power = _number(common["NPU Real-time Power(W)"], "NPU Real-time Power(W)")
        if temp is None and "Temperature(C)" in common:
            temp = _number(common["Temperature(C)"], "Temperature(C)")
    if card_power_watts is not None and power is None:
        if card_chips == 1:
            power = card_power_watts
        else:
            vendor[CARD_POWER.name] = card_power_watts
    status = health.status if health is not None else row.health
    level = health_level(status)
    if level is not None:
        vendor[HEALTH_STATE.name] = float(level)
    codes: tuple[str, ...] = health.codes if health is not None else ()
    if health is not None or level == 0:
        vendor[ERROR_CODES_ACTIVE.name] = float(len(codes))
    faults = dict(fault_counts) if fault_counts is not None else dict.fromkeys(codes, 1)
    util = _ratio(row.aicore_percent)
    return DeviceSample(
        device=device_of(row, table.version),
        utilization_ratio=util,
        memory_bandwidth_utilization_ratio=bandwidth,
        memory_used_bytes=_mib(used),
        memory_total_bytes=_mib(total),
        temperatures_celsius={
            k: v for k, v in (("core", temp), ("memory", memory_temperature_celsius)) if v is not None
        },
        power_watts=power,
        fault_events=faults,
        health={"chip": level == 0},
        vendor_metrics=vendor,
        processes=_processes(table, row),
    )


def card_power(report: CardReport) -> float | None:
    """The MCU block's power of a ``-t common`` report (card level), if printed."""
    key = "NPU Real-time Power(W)"
    return _number(report.mcu[key], key) if key in report.mcu else None


def samples_from_info(text: str) -> list[DeviceSample]:
    """``npu-smi info`` alone -> one sample per chip (no usages/common/health detail)."""
    table = parse_info_table(text)
    return [sample_chip(row, table) for row in table.chips]


def _bare_device(npu: int | None, chip: int | None, model: str = "Ascend") -> Device:
    # Outputs without a bus id get the card/chip fallback uuid (unique per chip, so inspect keeps them apart;
    # not the uuid the live backend derives from the bus id). A health report names no chip at all.
    if npu is None or chip is None:
        return Device(vendor=VENDOR, model=model, index="", uuid="")
    return Device(vendor=VENDOR, model=model, index=f"{npu}-{chip}", uuid=f"ascend-npu{npu}-chip{chip}")


def samples_from_chip_map(text: str) -> list[DeviceSample]:
    """``npu-smi info -m`` -> identity-only samples (index, model from Chip Name, fallback uuid; no readings)."""
    return [
        DeviceSample(device=_bare_device(e.npu_id, e.chip_id, model_name(e.name)))
        for e in parse_chip_map(text)
    ]


def samples_from_usages(text: str) -> list[DeviceSample]:
    """``npu-smi info -t usages -i N`` alone -> per chip: utilization = Aicore Usage Rate; memory total =
    HBM Capacity (else DDR Capacity) MiB -> bytes; memory used = capacity x usage rate (npu-smi rounds the
    rate to 1 %, so this is approximate: the backend reads exact bytes from ``npu-smi info``)."""
    rep = parse_card_report(text, "npu-smi info -t usages")
    out = []
    for cid, block in sorted(rep.chips.items()):
        hbm_cap = _number(block["HBM Capacity(MB)"], "HBM Capacity") if "HBM Capacity(MB)" in block else None
        hbm_main = bool(hbm_cap)
        prefix = "HBM" if hbm_main else "DDR"
        cap = hbm_cap if hbm_main else (_number(block[k], k) if (k := "DDR Capacity(MB)") in block else None)
        rate = _rate(block, f"{prefix} Usage Rate(%)")
        u = _usage_fields(block, hbm_main)
        bw = u.pop("bandwidth", None)
        out.append(
            DeviceSample(
                device=_bare_device(rep.npu_id, cid),
                utilization_ratio=_rate(block, "Aicore Usage Rate(%)"),
                memory_bandwidth_utilization_ratio=bw,
                memory_total_bytes=_mib(cap),
                memory_used_bytes=None if cap is None or rate is None else float(round(cap * rate * MIB)),
                vendor_metrics=u,
            )
        )
    return out


def samples_from_common(text: str) -> list[DeviceSample]:
    """``npu-smi info -t common -i N`` alone -> per chip: utilization = Aicore Usage Rate, temperature,
    power (the chip's own, else the MCU's card power when the card has a single chip), AI Core clocks."""
    rep = parse_card_report(text, "npu-smi info -t common")
    mcu_power = card_power(rep)
    out = []
    for cid, block in sorted(rep.chips.items()):
        key = "NPU Real-time Power(W)"
        power = _number(block[key], key) if key in block else None
        vendor = _common_fields(block)
        if power is None and mcu_power is not None:
            if len(rep.chips) == 1:
                power = mcu_power
            elif cid == min(rep.chips):
                vendor[CARD_POWER.name] = mcu_power
        temp = _number(block["Temperature(C)"], "Temperature(C)") if "Temperature(C)" in block else None
        out.append(
            DeviceSample(
                device=_bare_device(rep.npu_id, cid),
                utilization_ratio=_rate(block, "Aicore Usage Rate(%)"),
                temperatures_celsius={} if temp is None else {"core": temp},
                power_watts=power,
                vendor_metrics=vendor,
            )
        )
    return out


def samples_from_health(text: str) -> list[DeviceSample]:
    """``npu-smi info -t health -i N -c C`` alone -> one sample: health{chip}, error codes (1 each), level."""
    rep = parse_health(text)
    level = health_level(rep.status)
    vendor = {ERROR_CODES_ACTIVE.name: float(len(rep.codes))}
    if level is not None:
        vendor[HEALTH_STATE.name] = float(level)
    return [
        DeviceSample(
            device=_bare_device(rep.npu_id, rep.chip_id),
            health={"chip": level == 0},
            fault_events=dict.fromkeys(rep.codes, 1),
            vendor_metrics=vendor,
        )
    ]


# --------------------------------------------------------------------------------------------------------
# Sniffers (never raise)


def _sniff(pred: Callable[[str], bool]) -> Callable[[str], bool]:
    def sniff(text: str) -> bool:
        try:
            return bool(pred(text))
        except Exception:
            return False

    return sniff


sniff_info = _sniff(
    lambda t: (
        bool(re.search(r"\|\s*npu-smi\s+\S+\s+Version:", t))
        or ("| NPU" in t and "| Health" in t and "Bus-Id" in t)
    )
)
sniff_chip_map = _sniff(lambda t: bool(re.search(r"^\s*NPU ID\s+Chip ID\s+Chip Logic ID", t, re.M)))
sniff_usages = _sniff(
    lambda t: (
        "Aicore Usage Rate(%)" in t and "Capacity(MB)" in t and not sniff_info(t) and "Health Status" not in t
    )
)
sniff_common = _sniff(
    lambda t: (
        ("Aicore Freq(MHZ)" in t or "Aicore curFreq(MHZ)" in t or "NPU Real-time Power(W)" in t)
        and "Chip ID" in t
        and "Capacity(MB)" not in t
        and "Health Status" not in t
    )
)
sniff_health = _sniff(
    lambda t: (
        bool(re.search(r"^\s*Health Status\s*:", t, re.M))
        and bool(re.search(r"^\s*Error Code\s*:", t, re.M))
        and "Capacity(MB)" not in t
    )
)

FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("npu-smi-info", samples_from_info, sniff_info),
    OutputFormat("npu-smi-info-m", samples_from_chip_map, sniff_chip_map),
    OutputFormat("npu-smi-usages", samples_from_usages, sniff_usages),
    OutputFormat("npu-smi-common", samples_from_common, sniff_common),
    OutputFormat("npu-smi-health", samples_from_health, sniff_health),
)


# --------------------------------------------------------------------------------------------------------
# DCMI readings in npu-smi's shapes (one mapping serves both sources)

HEALTH_WORDS: Mapping[int, str] = {v: k.capitalize() if k != "ok" else "OK" for k, v in HEALTH_LEVELS.items()}


def row_from_reading(r: ChipReading, bus_id: str | None = None) -> ChipRow:
    """A DCMI chip reading as the main-table ChipRow npu-smi would print: power 0.1 W -> W, DDR used =
    memory_size - memory_available (MiB), health level -> word (a level outside 0..3 -> "Unknown")."""
    ddr_used = None
    if r.ddr_total_mib is not None and r.ddr_available_mib is not None:
        ddr_used = float(max(0, r.ddr_total_mib - r.ddr_available_mib))
    return ChipRow(
        npu_id=r.card,
        chip_id=r.device,
        device_id=None,
        name=r.chip_name or "",
        health=HEALTH_WORDS.get(r.health, "Unknown") if r.health is not None else "Unknown",
        power_watts=None if r.power_deciwatts is None else r.power_deciwatts / 10.0,
        temperature_celsius=None if r.temperature_celsius is None else float(r.temperature_celsius),
        bus_id=r.bus_id or bus_id,
        aicore_percent=None if r.aicore_percent is None else float(r.aicore_percent),
        ddr_used_mib=ddr_used,
        ddr_total_mib=None if r.ddr_total_mib is None else float(r.ddr_total_mib),
        hbm_used_mib=None if r.hbm_used_mib is None else float(r.hbm_used_mib),
        hbm_total_mib=None if r.hbm_total_mib is None else float(r.hbm_total_mib),
    )


def blocks_from_reading(r: ChipReading) -> tuple[dict[str, str], dict[str, str]]:
    """The ``-t usages`` and ``-t common`` blocks npu-smi would print for these DCMI readings."""
    usages = {
        key: str(v)
        for key, v in (
            ("Aicpu Usage Rate(%)", r.aicpu_percent),
            ("Ctrlcpu Usage Rate(%)", r.ctrlcpu_percent),
            ("HBM Bandwidth Usage Rate(%)", r.hbm_bandwidth_percent),
            ("DDR Bandwidth Usage Rate(%)", r.ddr_bandwidth_percent),
        )
        if v is not None
    }
    common = {
        key: str(v)
        for key, v in (
            ("Aicore curFreq(MHZ)", r.aicore_freq_mhz),
            ("Aicore Freq(MHZ)", r.aicore_max_freq_mhz),
        )
        if v is not None
    }
    return usages, common


def health_from_reading(r: ChipReading) -> HealthReport:
    """DCMI health and error codes as ``-t health`` prints them (codes as 8 upper-case hex digits)."""
    word = HEALTH_WORDS.get(r.health, "Unknown") if r.health is not None else "Unknown"
    codes = tuple(dict.fromkeys(f"{c:08X}" for c in r.error_codes))[:MAX_FAULT_CODES]
    return HealthReport(status=word, codes=codes, information="", npu_id=r.card, chip_id=r.device)


# --------------------------------------------------------------------------------------------------------
# The backend (I/O edge)

SOURCES = ("cli", "dcmi", "auto")


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class AscendOptions:
    """The ``ascend`` section of the config file.

    ``source``: ``cli`` (npu-smi, default), ``dcmi`` (libdcmi.so through ctypes; fails to open without it)
    or ``auto`` (DCMI when the library loads, else npu-smi). ``dcmi_library``: path of libdcmi.so (default:
    the driver's install paths, then the loader's search). ``npu_smi``: path or name of the tool.
    ``timeout_seconds``: per npu-smi call. ``poll_budget_seconds``: all calls of one poll together; cards not
    reached in time are reported lost; keep it below the poller's timeout for this backend (default 2 x the
    10 s interval) so that a slow card costs that card, not the poll. ``card_queries``: also run ``-t usages`` and ``-t common`` per card
    (bandwidth, AI CPU/ctrl CPU, clocks, 310P card power); False reads only ``npu-smi info`` (plus
    ``-t health`` for chips that are not OK).
    """

    source: str = "cli"
    dcmi_library: str | None = None
    npu_smi: str = TOOL
    timeout_seconds: float = 8.0
    poll_budget_seconds: float = 15.0
    card_queries: bool = True

    @classmethod
    def from_mapping(cls, opts: Mapping[str, object]) -> AscendOptions:
        """Raises BackendError(reason="config") on a bad value."""
        o = cls()
        try:
            out = replace(
                o,
                source=str(opts.get("source", o.source)).strip().lower(),
                dcmi_library=str(opts["dcmi_library"]) if opts.get("dcmi_library") else None,
                npu_smi=str(opts.get("npu_smi", o.npu_smi)),
                timeout_seconds=float(opts.get("timeout_seconds", o.timeout_seconds)),  # type: ignore[arg-type]
                poll_budget_seconds=float(opts.get("poll_budget_seconds", o.poll_budget_seconds)),  # type: ignore[arg-type]
                card_queries=_flag(opts.get("card_queries", o.card_queries)),
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"ascend options: {exc}", reason="config") from exc
        if out.source not in SOURCES:
            raise BackendError(f"ascend options: source must be one of {', '.join(SOURCES)}", reason="config")
        if not (out.timeout_seconds > 0 and out.poll_budget_seconds > 0):
            raise BackendError("ascend options: timeouts must be > 0", reason="config")
        return out


def _runner_fallback_path(runner: CommandRunner) -> str | None:
    # Only a live runner (or a recorder around one) may look at this machine's driver install paths.
    inner = getattr(runner, "inner", runner)
    if isinstance(inner, SubprocessRunner):
        return next((p for p in STANDARD_PATHS if os.access(p, os.X_OK)), None)
    return None


class AscendBackend:
    """Polls the chips through npu-smi (the injected CommandRunner) or libdcmi.so.

    npu-smi, per poll: ``npu-smi info`` (failure -> BackendError: nothing could be read); per card
    ``-t usages -i N`` and ``-t common -i N`` (a timeout, "Invalid card id." or a failure of a query that
    answered before -> that card's chips are lost; a query that never answered is taken as unsupported:
    the chips stay up with a note, and after UNSUPPORTED_AFTER polls it is no longer run); per chip whose
    Health is not OK ``-t health -i N -c C`` (failure -> that chip is lost). DCMI, per poll: the card list
    (failure -> BackendError), then every chip's readings (health unreadable -> that chip is lost).
    Chips seen before but missing now are lost. Error codes are counted per chip: +1 each time a code
    appears that was not active at the previous read (both sources list active codes, not events).
    """

    name = BACKEND

    def __init__(
        self,
        runner: CommandRunner,
        options: AscendOptions,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._opts = options
        self._monotonic = monotonic
        self._tool = options.npu_smi
        self._dcmi: Dcmi | None = None
        self._known: dict[str, Device] = {}
        self._bus_ids: dict[tuple[int, int], str] = {}
        self._active_codes: dict[str, frozenset[str]] = {}
        self._answered: set[tuple[int, str]] = set()  # (card, usages|common) that answered at least once
        self._unsupported: dict[tuple[int, str], int] = {}  # failures before any answer
        self._fault_counts: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """ "dcmi" or "cli": what ``open`` settled on."""
        return "dcmi" if self._dcmi is not None else "cli"

    def open(self) -> None:
        if self._opts.source in ("dcmi", "auto"):
            path = find_dcmi_library(self._opts.dcmi_library)
            if path is not None:
                try:
                    self._dcmi = Dcmi(path)
                    return
                except BackendError as exc:
                    if self._opts.source == "dcmi":
                        raise
                    log.warning("ascend: %s; using %s instead", exc, self._opts.npu_smi)
            elif self._opts.source == "dcmi":
                raise BackendError("libdcmi.so not found", reason="not_found")
        found = self._runner.which(self._opts.npu_smi) or _runner_fallback_path(self._runner)
        if found is None:
            raise BackendError(f"{self._opts.npu_smi}: not found", reason="not_found")
        self._tool = found

    def close(self) -> None:
        return None  # DCMI has no documented teardown; npu-smi calls hold nothing between polls

    def sample(self) -> Sequence[DeviceSample]:
        with self._lock:
            out = self._sample_dcmi() if self._dcmi is not None else self._sample_cli()
            seen = {s.device.index for s in out}
            for s in out:
                self._known[s.device.index] = s.device
            for index, dev in sorted(self._known.items()):
                if index not in seen:
                    where = "the DCMI card list" if self._dcmi is not None else "npu-smi info"
                    out.append(DeviceSample.lost(dev, f"missing from {where}"))
            return out

    def _count_faults(self, uuid: str, active: frozenset[str]) -> dict[str, int]:
        counts = self._fault_counts.setdefault(uuid, {})
        for code in sorted(active - self._active_codes.get(uuid, frozenset())):
            key = code if code in counts or len(counts) < MAX_FAULT_CODES else OVERFLOW_CODE
            counts[key] = counts.get(key, 0) + 1
        self._active_codes[uuid] = active
        return counts

    # ---- npu-smi

    def _run(self, args: Sequence[str], deadline: float) -> str:
        left = deadline - self._monotonic()
        if left <= 0:
            raise BackendError("npu-smi: poll budget exhausted", reason="timeout")
        return self._runner.run([self._tool, *args], min(self._opts.timeout_seconds, left)).stdout

    def _sample_cli(self) -> list[DeviceSample]:
        deadline = self._monotonic() + self._opts.poll_budget_seconds
        table = parse_info_table(self._run(["info"], deadline))
        card_fail: dict[int, str] = {}
        usages: dict[int, CardReport] = {}
        common: dict[int, CardReport] = {}
        per_card: dict[int, list[int]] = {}
        for c in table.chips:
            per_card.setdefault(c.npu_id, []).append(c.chip_id)
        card_note: dict[int, str] = {}
        if self._opts.card_queries:
            for npu in sorted(per_card):
                for kind, into in (("usages", usages), ("common", common)):
                    if self._unsupported.get((npu, kind), 0) >= UNSUPPORTED_AFTER:
                        continue
                    try:
                        into[npu] = self._card_report(npu, kind, deadline)
                        self._answered.add((npu, kind))
                        self._unsupported.pop((npu, kind), None)
                    except BackendError as exc:
                        why = f"{exc.reason}: {exc}"
                        if self._card_gone(npu, kind, exc):
                            card_fail[npu] = why
                            break
                        self._unsupported[(npu, kind)] = self._unsupported.get((npu, kind), 0) + 1
                        card_note[npu] = f"-t {kind} not answered (never has been): {why}"
        out: list[DeviceSample] = []
        for row in table.chips:
            dev = device_of(row, table.version)
            if row.npu_id in card_fail:
                out.append(DeviceSample.lost(dev, card_fail[row.npu_id]))
                continue
            try:
                sample = self._sample_row(row, table, usages, common, per_card[row.npu_id], deadline)
            except BackendError as exc:
                out.append(DeviceSample.lost(dev, f"{exc.reason}: {exc}"))
                continue
            if row.npu_id in card_note and sample.error is None:
                sample = replace(sample, error=card_note[row.npu_id])
            out.append(sample)
        return out

    def _card_gone(self, npu: int, kind: str, exc: BackendError) -> bool:
        """Whether a failed per-card query means the card is in trouble (its chips are lost), rather than a
        query this driver does not answer: a timeout, "Invalid card id.", or a query that worked before."""
        return (
            exc.reason == "timeout" or "invalid card id" in str(exc).lower() or (npu, kind) in self._answered
        )

    def _card_report(self, npu: int, kind: str, deadline: float) -> CardReport:
        what = f"npu-smi info -t {kind} -i {npu}"
        rep = parse_card_report(self._run(["info", "-t", kind, "-i", str(npu)], deadline), what)
        if rep.npu_id is not None and rep.npu_id != npu:
            raise ParseError(f"{what}: answered for NPU {rep.npu_id}")
        return rep

    def _sample_row(
        self,
        row: ChipRow,
        table: InfoTable,
        usages: Mapping[int, CardReport],
        common: Mapping[int, CardReport],
        card_chips: Sequence[int],
        deadline: float,
    ) -> DeviceSample:
        health: HealthReport | None = None
        if health_level(row.health) != 0:
            text = self._run(
                ["info", "-t", "health", "-i", str(row.npu_id), "-c", str(row.chip_id)], deadline
            )
            health = parse_health(text)
        counts = self._count_faults(device_of(row).uuid, frozenset(health.codes if health else ()))
        u = usages.get(row.npu_id)
        c = common.get(row.npu_id)
        power = card_power(c) if c is not None and row.chip_id == min(card_chips) else None
        missing = [
            k for k, rep in (("usages", u), ("common", c)) if rep is not None and row.chip_id not in rep.chips
        ]
        sample = sample_chip(
            row,
            table,
            usages=u.chips.get(row.chip_id) if u is not None else None,
            common=c.chips.get(row.chip_id) if c is not None else None,
            card_power_watts=power,
            health=health,
            fault_counts=counts,
            card_chips=len(card_chips),
        )
        if missing:
            sample = replace(sample, error=f"no chip {row.chip_id} block in -t {'/'.join(missing)}")
        return sample

    # ---- DCMI

    def _sample_dcmi(self) -> list[DeviceSample]:
        assert self._dcmi is not None
        chips = self._dcmi.chips()
        per_card: dict[int, int] = {}
        for card, _ in chips:
            per_card[card] = per_card.get(card, 0) + 1
        out: list[DeviceSample] = []
        for card, dev_id in chips:
            r = self._dcmi.read(card, dev_id)
            if r.bus_id:
                self._bus_ids[(card, dev_id)] = r.bus_id
            row = row_from_reading(r, self._bus_ids.get((card, dev_id)))
            table = InfoTable(version=None, chips=(row,))
            dev = device_of(row)
            if r.health is None:
                out.append(DeviceSample.lost(dev, "library: dcmi_get_device_health failed"))
                continue
            health = health_from_reading(r)
            usages, common = blocks_from_reading(r)
            sample = sample_chip(
                row,
                table,
                usages=usages,
                common=common,
                health=health,
                fault_counts=self._count_faults(dev.uuid, frozenset(health.codes)),
                card_chips=per_card[card],
                memory_temperature_celsius=(
                    None if r.hbm_temperature_celsius is None else float(r.hbm_temperature_celsius)
                ),
            )
            out.append(sample)
        return out


def detect(ctx: BackendContext) -> Detection:
    """Found when npu-smi is on PATH (or at the driver's standard install paths, live only), or, with
    ``source: dcmi|auto``, when libdcmi.so is found."""
    opts = AscendOptions.from_mapping(ctx.options)
    if opts.source in ("dcmi", "auto"):
        lib = find_dcmi_library(opts.dcmi_library)
        if lib is not None:
            return Detection(True, f"libdcmi at {lib}")
        if opts.source == "dcmi":
            return Detection(False, "libdcmi.so not found (source: dcmi)")
    path = ctx.runner.which(opts.npu_smi) or _runner_fallback_path(ctx.runner)
    if path is None:
        return Detection(False, f"{opts.npu_smi} not found on PATH or in {', '.join(STANDARD_PATHS)}")
    return Detection(True, f"{opts.npu_smi} at {path}")


def create(ctx: BackendContext) -> AscendBackend:
    return AscendBackend(ctx.runner, AscendOptions.from_mapping(ctx.options))


SPEC = register(
    BackendSpec(
        name=BACKEND,
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=FORMATS,
        metrics=METRICS,
        priority=60,
        default_interval_seconds=10.0,
        options={
            "source": "string",
            "dcmi_library": "string",
            "npu_smi": "string",
            "timeout_seconds": "seconds",
            "poll_budget_seconds": "seconds",
            "card_queries": "any",
        },
    )
)
