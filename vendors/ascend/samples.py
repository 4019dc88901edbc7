"""Ascend mapping: parsed npu-smi shapes -> DeviceSample (the shared schema), and the OutputFormats `inspect` uses."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from xpuwatch.vendors.ascend.card_report import parse_card_report, parse_health
from xpuwatch.vendors.ascend.chip_map import parse_chip_map
from xpuwatch.vendors.ascend.info_table import _HEADER_KEYS, parse_info_table
from xpuwatch.vendors.ascend.records import (
    AICORE_FREQ,
    AICORE_RATED_FREQ,
    AICPU,
    CARD_POWER,
    CTRLCPU,
    DDR_BANDWIDTH,
    DDR_TOTAL,
    DDR_USED,
    ERROR_CODES_ACTIVE,
    HEALTH_LEVELS,
    HEALTH_STATE,
    MHZ,
    MIB,
    PROCESS_MEMORY,
    PROCESSES,
    VECTORCORE,
    VENDOR,
    CardReport,
    ChipRow,
    HealthReport,
    InfoTable,
    _mib,
    _number,
    _ratio,
    model_name,
)
from xpuwatch.vendors.ascend.vnpu import parse_vnpu_info, vnpu_slices
from xpuwatch.vendors.base import Device, DeviceSample, ProcessMemory
from xpuwatch.vendors.registry import OutputFormat

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
    # An unreadable HBM total still means the chip's memory is its HBM (never fall back to DDR then).
    hbm_main = bool(row.hbm_total_mib) or (row.hbm_column and "memory_total_bytes" in row.unread)
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
        unread=dict(row.unread),
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


def chip_named_by(command: str) -> Device | None:
    """The chip an ``npu-smi info -t TYPE -i N -c C`` command line selects (``-i`` the NPU id, ``-c`` the chip
    id; either order, ``-i3`` or ``-i 3``), with the same fallback uuid the other outputs of that chip get,
    so that a pasted health block overlays that chip's board/usages readings. None without both ids."""
    ids: dict[str, int] = {}
    words = command.split()
    for i, w in enumerate(words):
        m = re.fullmatch(r"-([ic])(\d+)?", w)
        if m is None:
            continue
        value = m.group(2) or (words[i + 1] if i + 1 < len(words) else "")
        if value.isdigit() and len(value) <= 6:
            ids[m.group(1)] = int(value)
    if "npu-smi" not in command or "i" not in ids or "c" not in ids:
        return None
    return _bare_device(ids["i"], ids["c"])


def samples_from_vnpu(text: str) -> list[DeviceSample]:
    """``npu-smi info -t info-vnpu -i N -c C`` alone -> one identity-less sample (the output names no chip)
    whose slices are the vNPUs (kind "vnpu", template, memory, AI-core share; vendors/ascend/vnpu.py)."""
    dev = _bare_device(None, None)
    return [DeviceSample(device=dev, slices=vnpu_slices(parse_vnpu_info(text), dev.uuid))]


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
sniff_vnpu = _sniff(lambda t: "Total number of vnpu" in t and bool(re.search(r"\|\s*AICORE\s+Memory", t)))
sniff_health = _sniff(
    lambda t: (
        bool(re.search(r"^\s*Health Status\s*:", t, re.M))
        and bool(re.search(r"^\s*Error Code\s*:", t, re.M))
        and "Capacity(MB)" not in t
    )
)

# --------------------------------------------------------------------------------------------------------
# What each output holds that the parsers above do not read (``xpuwatch inspect --explain``)

_IDENTITY_KEYS = frozenset({"NPU ID", "Chip ID", "Chip Count", "Chip Name"})
_USAGES_READ = frozenset(
    {
        "Aicore Usage Rate(%)",
        "HBM Capacity(MB)",
        "HBM Usage Rate(%)",
        "DDR Capacity(MB)",
        "DDR Usage Rate(%)",
        "Aicpu Usage Rate(%)",
        "Ctrlcpu Usage Rate(%)",
        "Vectorcore Usage Rate(%)",
        "DDR Bandwidth Usage Rate(%)",
        "HBM Bandwidth Usage Rate(%)",
    }
)
_COMMON_READ = frozenset(
    {
        "Aicore Usage Rate(%)",
        "Aicore Freq(MHZ)",
        "Aicore curFreq(MHZ)",
        "Temperature(C)",
        "NPU Real-time Power(W)",
    }
)
_INFO_READ = frozenset({"power", "temp", "aicore", "memory", "hbm"})


def _unread_keys(what: str, read: frozenset[str]) -> Callable[[str], list[str]]:
    def explain(text: str) -> list[str]:
        rep = parse_card_report(text, what)
        keys: dict[str, str] = {}
        for block in [*rep.chips.values(), rep.mcu]:
            for k in block:
                if k not in read and k not in _IDENTITY_KEYS:
                    keys.setdefault(k, "no reading of the shared schema or of accelerator_huawei_* maps it")
        if rep.mcu:
            keys.pop("Temperature(C)", None)
            if "Temperature(C)" in rep.mcu:
                keys["Temperature(C) (mcu block)"] = "the card's MCU temperature, not a chip's"
        return [f"{k}: {why}" for k, why in keys.items()]

    return explain


def explain_info(text: str) -> list[str]:
    """Main-table header columns the parser does not map (e.g. Hugepages-Usage(page))."""
    parse_info_table(text)
    out: dict[str, None] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1] in ("Health", "Bus-Id"):
            for tok in cells[2].split():
                if _HEADER_KEYS.get(tok.lower(), tok.lower()) not in _INFO_READ:
                    out[tok] = None
    return [f"{k}: no reading of the shared schema maps it" for k in out]


FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("npu-smi-info", samples_from_info, sniff_info, explain_info),
    OutputFormat("npu-smi-info-m", samples_from_chip_map, sniff_chip_map, lambda _t: []),
    OutputFormat(
        "npu-smi-usages",
        samples_from_usages,
        sniff_usages,
        _unread_keys("npu-smi info -t usages", _USAGES_READ),
    ),
    OutputFormat(
        "npu-smi-common",
        samples_from_common,
        sniff_common,
        _unread_keys("npu-smi info -t common", _COMMON_READ),
    ),
    OutputFormat("npu-smi-health", samples_from_health, sniff_health, lambda _t: [], chip_named_by),
    OutputFormat("npu-smi-info-vnpu", samples_from_vnpu, sniff_vnpu, lambda _t: []),
)
