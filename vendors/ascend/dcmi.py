"""Ascend mapping: libdcmi readings in npu-smi's shapes, so one mapping (samples.sample_chip) serves both sources."""

from __future__ import annotations

from collections.abc import Mapping

from xpuwatch.vendors.ascend.libdcmi import ChipReading
from xpuwatch.vendors.ascend.records import HEALTH_LEVELS, MAX_FAULT_CODES, ChipRow, HealthReport

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
