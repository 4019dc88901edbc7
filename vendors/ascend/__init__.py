"""Huawei Ascend backend: `npu-smi` text tables (info, -m, -t usages/common/health) -> DeviceSample per chip.

Vendor key ``huawei``, backend ``ascend``. Everything but ``backend`` is a pure function of the tool's
text, so ``xpuwatch inspect`` and capture/replay run the same code as the live exporter. The optional
DCMI source (``vendors/ascend/libdcmi.py``, libdcmi.so through ctypes) is mapped into the same shapes first.

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

Package layout (one module per tool output or library; a new npu-smi layout is a new small module):
``records`` (constants, vendor metrics, parsed shapes, cell readers), ``info_table`` (``npu-smi info``),
``chip_map`` (``npu-smi info -m``), ``card_report`` (``-t usages|common|health``), ``vnpu`` (``-t info-vnpu``: vNPU slices), ``samples`` (shapes ->
DeviceSample, the ``inspect`` formats), ``libdcmi`` (libdcmi.so through ctypes), ``dcmi`` (DCMI readings in
npu-smi's shapes), ``backend`` (the poller-facing backend and the one registration). This module re-exports
their public names, so ``from vendors import ascend; ascend.parse_info_table(...)`` keeps working.
"""

from __future__ import annotations

from xpuwatch.vendors.ascend.backend import SOURCES, SPEC, AscendBackend, AscendOptions, create, detect
from xpuwatch.vendors.ascend.card_report import parse_card_report, parse_health
from xpuwatch.vendors.ascend.chip_map import parse_chip_map
from xpuwatch.vendors.ascend.dcmi import (
    HEALTH_WORDS,
    blocks_from_reading,
    health_from_reading,
    row_from_reading,
)
from xpuwatch.vendors.ascend.info_table import parse_info_table
from xpuwatch.vendors.ascend.libdcmi import ChipReading
from xpuwatch.vendors.ascend.records import (
    AICORE_FREQ,
    AICORE_RATED_FREQ,
    AICPU,
    BACKEND,
    CARD_POWER,
    CTRLCPU,
    DDR_BANDWIDTH,
    DDR_TOTAL,
    DDR_USED,
    ERROR_CODES_ACTIVE,
    HEALTH_LEVELS,
    HEALTH_STATE,
    MAX_FAULT_CODES,
    METRICS,
    MHZ,
    MIB,
    OVERFLOW_CODE,
    PROCESS_MEMORY,
    PROCESSES,
    STANDARD_PATHS,
    TOOL,
    UNSUPPORTED_AFTER,
    VECTORCORE,
    VENDOR,
    CardReport,
    ChipMapEntry,
    ChipRow,
    HealthReport,
    InfoTable,
    Process,
    model_name,
)
from xpuwatch.vendors.ascend.samples import (
    FORMATS,
    card_power,
    device_of,
    health_level,
    sample_chip,
    samples_from_chip_map,
    samples_from_common,
    samples_from_health,
    samples_from_info,
    samples_from_usages,
    sniff_chip_map,
    sniff_common,
    sniff_health,
    sniff_info,
    sniff_usages,
)
from xpuwatch.vendors.ascend.vnpu import Vnpu, VnpuReport, parse_vnpu_info, template_size, vnpu_slices

__all__ = [
    "AICORE_FREQ",
    "AICORE_RATED_FREQ",
    "AICPU",
    "BACKEND",
    "CARD_POWER",
    "CTRLCPU",
    "DDR_BANDWIDTH",
    "DDR_TOTAL",
    "DDR_USED",
    "ERROR_CODES_ACTIVE",
    "FORMATS",
    "HEALTH_LEVELS",
    "HEALTH_STATE",
    "HEALTH_WORDS",
    "MAX_FAULT_CODES",
    "METRICS",
    "MHZ",
    "MIB",
    "OVERFLOW_CODE",
    "PROCESSES",
    "PROCESS_MEMORY",
    "SOURCES",
    "SPEC",
    "STANDARD_PATHS",
    "TOOL",
    "UNSUPPORTED_AFTER",
    "VECTORCORE",
    "VENDOR",
    "AscendBackend",
    "AscendOptions",
    "CardReport",
    "ChipMapEntry",
    "ChipReading",
    "ChipRow",
    "HealthReport",
    "InfoTable",
    "Process",
    "Vnpu",
    "VnpuReport",
    "blocks_from_reading",
    "card_power",
    "create",
    "detect",
    "device_of",
    "health_from_reading",
    "health_level",
    "model_name",
    "parse_card_report",
    "parse_chip_map",
    "parse_health",
    "parse_info_table",
    "parse_vnpu_info",
    "row_from_reading",
    "sample_chip",
    "samples_from_chip_map",
    "samples_from_common",
    "samples_from_health",
    "samples_from_info",
    "samples_from_usages",
    "sniff_chip_map",
    "sniff_common",
    "sniff_health",
    "sniff_info",
    "sniff_usages",
    "template_size",
    "vnpu_slices",
]
