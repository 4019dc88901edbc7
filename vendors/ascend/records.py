"""Ascend npu-smi reading, step 1: constants, vendor metrics, the parsed shapes and the cell readers every npu-smi parser shares."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from xpuwatch.vendors.base import ParseError, VendorMetric

VENDOR = "huawei"
BACKEND = "ascend"
TOOL = "npu-smi"
MIB = 1 << 20  # npu-smi "MB" (see the module docstring)
MHZ = 1e6
# Where the driver installs npu-smi when it is not on PATH (a systemd service's PATH lacks driver/tools), in the
# order Huawei's and HAMi's Ascend device plugins look: driver/tools, /usr/local/sbin, /usr/local/bin.
STANDARD_PATHS = (
    "/usr/local/Ascend/driver/tools/npu-smi",
    "/usr/local/sbin/npu-smi",
    "/usr/local/bin/npu-smi",
)
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
    hbm_column: bool = False  # the table has an HBM-Usage column (then HBM, not DDR, is the chip's memory)
    unread: Mapping[str, str] = field(default_factory=dict)
    """Cells printed but unreadable (reading name -> reason); each costs that reading, never the chip."""

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
