"""NVIDIA backend over the `nvidia-smi` CLI: parses `nvidia-smi -q -x` XML (and `--query-gpu` CSV) into samples.

Used where the NVML Python binding cannot load, and for capture/replay and ``xpuwatch inspect``. The
registration also carries the plain-table format (``vendors.nvidia_smi_table``), which ``inspect`` reads and
this backend never runs (why: that module's docstring); the NVIDIA-only gauges and MIG profile names the
readers share are in ``vendors.nvidia_fields``. The parsers
are pure functions of the tool's text; the backend runs ``nvidia-smi -q -x`` through the injected
``CommandRunner`` with a timeout. Field names follow the nvsmi_device DTD (v10..v12 and the 535.113.01+
renames); see docs/vendors/nvidia.md for the field-by-field mapping.
"""

from __future__ import annotations

import csv
import io
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError, Slice
from xpuwatch.vendors.command import CommandRunner
from xpuwatch.vendors.nvidia_fields import (
    FAN_SPEED,
    METRICS,
    MIG_MODE,
    PERFORMANCE_STATE,
    PERSISTENCE_MODE,
    VENDOR,
    mig_profile_name,
    performance_state,
)
from xpuwatch.vendors.nvidia_smi_table import TABLE_FORMAT
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

MIB = 1024 * 1024
MHZ = 1e6

# Clock-event (throttle) reasons: bounded label values, same bits as NVML nvmlClocksEventReason* and DCGM
# field 112 (dcgm_fields.h); the nvidia-smi tag suffix (after clocks_event_reason_/clocks_throttle_reason_)
# maps to one stable name so that the 535.113.01 rename changes nothing downstream.
CLOCK_EVENT_REASONS: Mapping[str, int] = {
    "gpu_idle": 0x1,
    "clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
_SMI_REASON_NAMES: Mapping[str, str] = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "clocks_setting",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "display_clocks_setting": "display_clocks",
}

_UNIT_SCALE: Mapping[str, float] = {
    "": 1.0,
    "%": 0.01,
    "B": 1.0,
    "KiB": 1024.0,
    "MiB": float(MIB),
    "GiB": float(1024 * MIB),
    "KB/s": 1000.0,
    "MHz": MHZ,
    "W": 1.0,
    "mW": 1e-3,
    "C": 1.0,
    "mV": 1e-3,
    "us": 1e-6,
}
_QUANTITY = re.compile(r"^([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)$")


def is_absent(text: str | None) -> bool:
    """True for the placeholders nvidia-smi prints instead of a value: ``N/A``, ``[N/A]``, ``[Not Supported]``,
    ``[Insufficient Permissions]``, ``[Requested functionality has been deprecated]``, ``[Unknown Error]``
    and any other bracketed text, or an empty string."""
    if text is None:
        return True
    t = text.strip()
    return (
        not t
        or (t.startswith("[") and t.endswith("]"))
        or t.lower() in {"n/a", "not supported", "unknown error", "none", "insufficient permissions"}
    )


def quantity(text: str | None, unit: str, scale: float | None = None) -> float | None:
    """``"19968 MiB"`` -> 20937965568.0 (base units). The printed unit must be ``unit`` (or absent);
    placeholders, other units, non-finite and malformed numbers give None."""
    if is_absent(text):
        return None
    assert text is not None
    m = _QUANTITY.match(text.strip())
    if not m or m.group(2) not in ("", unit):
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    result = value * (scale if scale is not None else _UNIT_SCALE.get(unit, 1.0))
    return result if math.isfinite(result) else None


def count(text: str | None) -> int | None:
    """A non-negative integer counter (``"0"``, ``"12"``); anything else is None."""
    if is_absent(text):
        return None
    assert text is not None
    t = text.strip()
    if not t.isascii() or not t.isdigit():
        return None
    return int(t)


def flag(text: str | None, yes: tuple[str, ...] = ("yes", "active", "enabled")) -> bool | None:
    """``Yes``/``Active``/``Enabled`` -> True, ``No``/``Not Active``/``Disabled`` -> False, else None."""
    if is_absent(text):
        return None
    assert text is not None
    t = text.strip().lower()
    if t in yes:
        return True
    if t in ("no", "not active", "disabled", "inactive"):
        return False
    return None


def _hex(text: str | None) -> int | None:
    if is_absent(text):
        return None
    assert text is not None
    try:
        return int(text.strip(), 16) if text.strip().lower().startswith("0x") else None
    except ValueError:
        return None


def _ratio(text: str | None) -> float | None:
    r = quantity(text, "%")
    return r if r is not None and 0.0 <= r <= 1.0 else None


def _celsius(text: str | None) -> float | None:
    t = quantity(text, "C")
    return t if t is not None and -40.0 <= t <= 200.0 else None


def _nonneg(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None


def _state_metrics(
    mig: bool | None, fan: str | None, pstate: str | None, persistence: bool | None
) -> dict[str, float]:
    """The NVIDIA-only gauges (``vendors.nvidia_fields``) of one GPU; what is absent or N/A is left out.
    ``fan``: ``"30 %"`` (or a bare ``30`` from ``csv,nounits``)."""
    out: dict[str, float] = {}
    if mig is not None:
        out[MIG_MODE] = 1.0 if mig else 0.0
    ratio = quantity(fan, "%")
    if ratio is not None and 0.0 <= ratio <= 1.0:
        out[FAN_SPEED] = ratio
    state = performance_state(pstate)
    if state is not None:
        out[PERFORMANCE_STATE] = state
    if persistence is not None:
        out[PERSISTENCE_MODE] = 1.0 if persistence else 0.0
    return out


# ---------------------------------------------------------------------------------------------- XML


def _load_xml(text: str) -> ET.Element:
    if not isinstance(text, str) or not text.strip():
        raise ParseError("nvidia-smi XML: empty input")
    # xml.etree never fetches external entities, but it does expand internal ones: refuse any entity
    # declaration so that a billion-laughs document cannot exhaust memory. nvidia-smi never declares any.
    if "<!ENTITY" in text.upper():
        raise ParseError("nvidia-smi XML: entity declarations are not accepted")
    try:
        root = ET.fromstring(text)
    except (ET.ParseError, ValueError) as exc:
        raise ParseError(f"nvidia-smi XML: not well-formed: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi XML: root element is <{root.tag}>, expected <nvidia_smi_log>")
    return root


def _t(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    return found.text if found is not None else None


def parse_nvidia_smi_xml(text: str) -> list[DeviceSample]:
    """Parse ``nvidia-smi -q -x`` output into one DeviceSample per ``<gpu>`` (MIG instances become Slices).

    Units: MiB -> bytes, MHz -> Hz, % -> ratio, W stays W, C stays C. Placeholders (``[N/A]`` and the like)
    give absent fields. ``Device.index`` is the ``<gpu>`` position (nvidia-smi lists GPUs in index order);
    ``Device.uuid`` is ``<uuid>``, else the PCI bus id. Raises ParseError (only) for empty, malformed,
    entity-declaring or non-nvidia-smi documents.
    """
    root = _load_xml(text)
    driver = _t(root, "driver_version")
    driver = None if is_absent(driver) else (driver or "").strip()
    samples: list[DeviceSample] = []
    for position, gpu in enumerate(root.findall("gpu")):
        samples.append(_gpu_sample(gpu, str(position), driver))
    return samples


def _gpu_sample(gpu: ET.Element, index: str, driver: str | None) -> DeviceSample:
    def text(path: str) -> str | None:
        v = _t(gpu, path)
        return None if is_absent(v) else (v or "").strip()

    pci = text("pci/pci_bus_id") or (gpu.get("id") or "").strip() or None
    uuid = text("uuid") or pci or f"nvidia-smi-gpu-{index}"
    model = text("product_name") or "NVIDIA GPU"
    device = Device(
        vendor=VENDOR,
        model=model,
        index=index,
        uuid=uuid,
        pci_bus_id=pci,
        driver_version=driver,
        serial=text("serial"),
    )

    temps: dict[str, float] = {}
    for sensor, path in (("core", "temperature/gpu_temp"), ("memory", "temperature/memory_temp")):
        c = _celsius(_t(gpu, path))
        if c is not None:
            temps[sensor] = c

    clocks: dict[str, float] = {}
    for domain, path in (
        ("graphics", "clocks/graphics_clock"),
        ("sm", "clocks/sm_clock"),
        ("memory", "clocks/mem_clock"),
    ):
        hz = _nonneg(quantity(_t(gpu, path), "MHz"))
        if hz is not None:
            clocks[domain] = hz

    remapped, pending, failed = _remap(gpu)
    mig_enabled = flag(_t(gpu, "mig_mode/current_mig"))
    slices = _mig_slices(gpu, device) if mig_enabled else ()
    total = _nonneg(quantity(_t(gpu, "fb_memory_usage/total"), "MiB"))
    return DeviceSample(
        device=device,
        utilization_ratio=_ratio(_t(gpu, "utilization/gpu_util")),
        memory_bandwidth_utilization_ratio=_ratio(_t(gpu, "utilization/memory_util")),
        memory_used_bytes=_nonneg(quantity(_t(gpu, "fb_memory_usage/used"), "MiB")),
        memory_total_bytes=total,
        temperatures_celsius=temps,
        power_watts=_power(gpu),
        power_limit_watts=_power_limit(gpu),
        clocks_hertz=clocks,
        clock_throttled=_clock_events(gpu),
        ecc_errors=_ecc(gpu),
        remapped_rows=remapped,
        remap_pending=pending,
        remap_failed=failed,
        pcie_replay_errors=count(_t(gpu, "pci/replay_counter")),
        vendor_metrics=_state_metrics(
            mig_enabled, text("fan_speed"), text("performance_state"), flag(text("persistence_mode"))
        ),
        slices=slices,
        unread=_unread(lambda p: _t(gpu, p), _XML_CELLS),
    )


# Reading -> (the cells that may give it, unit). A cell that is printed (not a placeholder) but does not read
# as a number in its unit costs that reading: it goes to DeviceSample.unread when no other cell gave it.
_XML_CELLS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("utilization_ratio", ("utilization/gpu_util",), "%"),
    ("memory_bandwidth_utilization_ratio", ("utilization/memory_util",), "%"),
    ("memory_used_bytes", ("fb_memory_usage/used",), "MiB"),
    ("memory_total_bytes", ("fb_memory_usage/total",), "MiB"),
    ("temperatures_celsius.core", ("temperature/gpu_temp",), "C"),
    ("temperatures_celsius.memory", ("temperature/memory_temp",), "C"),
    (
        "power_watts",
        tuple(
            f"{sect}/{f}"
            for sect in ("gpu_power_readings", "power_readings")
            for f in ("power_draw", "average_power_draw", "power_draw_average", "instant_power_draw")
        ),
        "W",
    ),
    ("clocks_hertz.graphics", ("clocks/graphics_clock",), "MHz"),
    ("clocks_hertz.sm", ("clocks/sm_clock",), "MHz"),
    ("clocks_hertz.memory", ("clocks/mem_clock",), "MHz"),
)
_CSV_CELLS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("utilization_ratio", ("utilization.gpu",), "%"),
    ("memory_bandwidth_utilization_ratio", ("utilization.memory",), "%"),
    ("memory_used_bytes", ("memory.used",), "MiB"),
    ("memory_total_bytes", ("memory.total",), "MiB"),
    ("temperatures_celsius.core", ("temperature.gpu",), "C"),
    ("temperatures_celsius.memory", ("temperature.memory",), "C"),
    ("power_watts", ("power.draw", "power.draw.average"), "W"),
    ("power_limit_watts", ("enforced.power.limit", "power.limit"), "W"),
)


def _unread(
    get: Callable[[str], str | None], cells: Sequence[tuple[str, tuple[str, ...], str]]
) -> dict[str, str]:
    """Readings whose printed cells all fail to read as non-negative numbers in their unit (placeholders
    such as ``N/A`` are not failures; a bare number, as ``csv,nounits`` prints, reads)."""
    out: dict[str, str] = {}
    for reading, paths, unit in cells:
        bad: str | None = None
        for path in paths:
            v = get(path)
            if is_absent(v):
                continue
            t = (v or "").strip()
            q = quantity(t, unit)
            if q is not None and q >= 0:
                bad = None
                break
            bad = bad or t
        if bad is not None:
            out[reading] = f"{bad[:40]!r} is not a number in {unit}"
    return out


def _first(gpu: ET.Element, paths: Sequence[str], unit: str) -> float | None:
    for path in paths:
        v = _nonneg(quantity(_t(gpu, path), unit))
        if v is not None:
            return v
    return None


def _power(gpu: ET.Element) -> float | None:
    # v11 <power_readings>, v12 <gpu_power_readings>; R550+ split power_draw into average/instant, and
    # power.draw (what NVML nvmlDeviceGetPowerUsage reports) equals the average.
    paths = [
        f"{sect}/{field}"
        for sect in ("gpu_power_readings", "power_readings")
        for field in ("power_draw", "average_power_draw", "power_draw_average", "instant_power_draw")
    ]
    return _first(gpu, paths, "W")


def _power_limit(gpu: ET.Element) -> float | None:
    # The enforced limit: v11 <enforced_power_limit>, v12 "Current Power Limit" <current_power_limit>.
    return _first(
        gpu,
        (
            "gpu_power_readings/current_power_limit",
            "power_readings/enforced_power_limit",
            "power_readings/current_power_limit",
            "power_readings/power_limit",
        ),
        "W",
    )


def _clock_events(gpu: ET.Element) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        el = gpu.find(section)
        if el is None:
            continue
        for child in el:
            if not child.tag.startswith(prefix):
                continue
            name = _SMI_REASON_NAMES.get(child.tag[len(prefix) :])
            active = flag(child.text, yes=("active",))
            if name is not None and active is not None:
                out[name] = active
        if out:
            break
    return out


def _ecc(gpu: ET.Element) -> dict[str, int]:
    vol = gpu.find("ecc_errors/volatile")
    if vol is None:
        return {}
    # DTD v10/v11 on pre-Ampere GPUs: single_bit/total and double_bit/total.
    sbe, dbe = count(_t(vol, "single_bit/total")), count(_t(vol, "double_bit/total"))
    if sbe is not None or dbe is not None:
        return {k: v for k, v in (("corrected", sbe), ("uncorrected", dbe)) if v is not None}
    # DTD v12 (Ampere+): SRAM and DRAM counts; NVML's volatile total is their sum. R550+ splits
    # sram_uncorrectable into _parity and _secded: use the split only when the plain tag is missing.
    vals = {child.tag: count(child.text) for child in vol}
    corrected = [v for k, v in vals.items() if k.endswith("_correctable") and v is not None]
    unc_keys = ["dram_uncorrectable"]
    unc_keys += (
        ["sram_uncorrectable"]
        if "sram_uncorrectable" in vals
        else ["sram_uncorrectable_parity", "sram_uncorrectable_secded"]
    )
    uncorrected = [vals[k] for k in unc_keys if vals.get(k) is not None]
    out: dict[str, int] = {}
    if corrected:
        out["corrected"] = sum(v for v in corrected if v is not None)
    if uncorrected:
        out["uncorrected"] = sum(v for v in uncorrected if v is not None)
    return out


def _remap(gpu: ET.Element) -> tuple[dict[str, int], bool | None, bool | None]:
    rows = gpu.find("remapped_rows")
    if rows is not None and len(rows):
        corr, unc = count(_t(rows, "remapped_row_corr")), count(_t(rows, "remapped_row_unc"))
        got = {k: v for k, v in (("correctable", corr), ("uncorrectable", unc)) if v is not None}
        if got:
            return (
                got,
                flag(_t(rows, "remapped_row_pending")),
                flag(_t(rows, "remapped_row_failure")),
            )
    # GPUs before row remapping (pre-Ampere) retire pages instead.
    pages = gpu.find("retired_pages")
    if pages is None:
        return {}, None, None
    sbe = count(_t(pages, "multiple_single_bit_retirement/retired_count"))
    dbe = count(_t(pages, "double_bit_retirement/retired_count"))
    got = {k: v for k, v in (("correctable", sbe), ("uncorrectable", dbe)) if v is not None}
    pending = flag(_t(pages, "pending_retirement"))
    if pending is None:
        pending = flag(_t(pages, "pending_blacklist"))
    return got, (pending if got else None), None


def _mig_slices(gpu: ET.Element, parent: Device) -> tuple[Slice, ...]:
    parent_total_mib = quantity(_t(gpu, "fb_memory_usage/total"), "MiB", scale=1.0)
    out: list[Slice] = []
    for mig in gpu.findall("mig_devices/mig_device"):
        gi, ci = count(_t(mig, "gpu_instance_id")), count(_t(mig, "compute_instance_id"))
        if gi is None or ci is None:
            continue
        total_mib = quantity(_t(mig, "fb_memory_usage/total"), "MiB", scale=1.0)
        sms = count(_t(mig, "device_attributes/shared/multiprocessor_count"))
        out.append(
            Slice(
                parent_uuid=parent.uuid,
                slice_id=f"{gi}/{ci}",
                profile=mig_profile_name(parent.model, sms, total_mib, parent_total_mib),
                kind="mig",
                memory_used_bytes=_nonneg(quantity(_t(mig, "fb_memory_usage/used"), "MiB")),
                memory_total_bytes=_nonneg(quantity(_t(mig, "fb_memory_usage/total"), "MiB")),
            )
        )
    return tuple(out)


def sniff_xml(text: str) -> bool:
    """True when the text looks like ``nvidia-smi -q -x`` output."""
    return "<nvidia_smi_log" in text[:4096]


# ---------------------------------------------------------------------------------------------- CSV

# --query-gpu field (unit suffix stripped) -> how it lands in the sample.
_CSV_TEMP = {"temperature.gpu": "core", "temperature.memory": "memory"}
_CSV_CLOCK = {
    "clocks.current.graphics": "graphics",
    "clocks.gr": "graphics",
    "clocks.current.sm": "sm",
    "clocks.sm": "sm",
    "clocks.current.memory": "memory",
    "clocks.mem": "memory",
}


def _csv_rows(text: str) -> list[dict[str, str]]:
    # Captures may carry '#' comment lines (our bundles and the shared fixtures); nvidia-smi never prints them.
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ParseError("nvidia-smi CSV: empty input")
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    except csv.Error as exc:
        raise ParseError(f"nvidia-smi CSV: {exc}") from exc
    header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    if "uuid" not in header and "index" not in header:
        raise ParseError("nvidia-smi CSV: header has neither uuid nor index (use --format=csv with a header)")
    out = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ParseError(f"nvidia-smi CSV: line {n} has {len(row)} fields, header has {len(header)}")
        out.append({h: v.strip() for h, v in zip(header, row, strict=True)})
    return out


def parse_nvidia_smi_csv(text: str) -> list[DeviceSample]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv`` output (with header; ``nounits`` accepted).

    Any subset of fields works; known ones map like the XML (memory.* MiB -> bytes, clocks.* MHz -> Hz,
    utilization.* % -> ratio, ecc.errors.*.volatile.total, remapped_rows.* else retired_pages.*,
    clocks_event_reasons.* / clocks_throttle_reasons.*). Raises ParseError (only) on empty input, a header
    without uuid/index, or a row whose field count differs from the header.
    """
    samples = []
    for position, row in enumerate(_csv_rows(text)):
        samples.append(_csv_sample(row, str(position)))
    return samples


def _csv_sample(row: Mapping[str, str], position: str) -> DeviceSample:
    def get(key: str) -> str | None:
        v = row.get(key)
        return None if is_absent(v) else v

    def scaled(key: str, unit: str) -> float | None:
        v = get(key)
        if v is None:
            return None
        v = v.strip()
        # --format=csv,nounits drops the unit: a bare number is in the header's unit.
        bare = re.fullmatch(r"[-+]?\d+(?:\.\d+)?", v) is not None
        return _nonneg(quantity(v, "", scale=_UNIT_SCALE[unit]) if bare else quantity(v, unit))

    idx = count(get("index"))
    index = str(idx) if idx is not None else position
    pci = (get("pci.bus_id") or "").strip() or None
    uuid = (get("uuid") or "").strip() or pci or f"nvidia-smi-gpu-{index}"
    device = Device(
        vendor=VENDOR,
        model=(get("name") or "NVIDIA GPU").strip(),
        index=index,
        uuid=uuid,
        pci_bus_id=pci,
        driver_version=(get("driver_version") or "").strip() or None,
        serial=(get("serial") or "").strip() or None,
    )

    def ratio(key: str) -> float | None:
        r = scaled(key, "%")
        return r if r is not None and r <= 1.0 else None

    temps: dict[str, float] = {}
    for key, sensor in _CSV_TEMP.items():
        t = scaled(key, "C")
        if t is not None and t <= 200.0:
            temps[sensor] = t
    clocks: dict[str, float] = {}
    for key, domain in _CSV_CLOCK.items():
        hz = scaled(key, "MHz")
        if hz is not None:
            clocks.setdefault(domain, hz)
    throttled: dict[str, bool] = {}
    for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
        for key, value in row.items():
            if key.startswith(prefix):
                name = _SMI_REASON_NAMES.get(key[len(prefix) :])
                active = flag(value, yes=("active",))
                if name and active is not None:
                    throttled.setdefault(name, active)
    # The hex masks cover reasons that have no per-reason column (display_clocks): only supported bits.
    active_mask, supported_mask = (
        _hex(get("clocks_event_reasons.active")),
        _hex(get("clocks_event_reasons.supported")),
    )
    if active_mask is not None and supported_mask is not None:
        for name, bit in CLOCK_EVENT_REASONS.items():
            if supported_mask & bit:
                throttled.setdefault(name, bool(active_mask & bit))
    ecc: dict[str, int] = {}
    for kind, key in (
        ("corrected", "ecc.errors.corrected.volatile.total"),
        ("uncorrected", "ecc.errors.uncorrected.volatile.total"),
    ):
        c = count(get(key))
        if c is not None:
            ecc[kind] = c
    remapped = {
        k: v
        for k, v in (
            ("correctable", count(get("remapped_rows.correctable"))),
            ("uncorrectable", count(get("remapped_rows.uncorrectable"))),
        )
        if v is not None
    }
    pending: bool | None
    failed: bool | None
    if remapped:
        pending, failed = flag(get("remapped_rows.pending")), flag(get("remapped_rows.failure"))
    else:
        remapped = {
            k: v
            for k, v in (
                ("correctable", count(get("retired_pages.single_bit_ecc.count"))),
                ("uncorrectable", count(get("retired_pages.double_bit.count"))),
            )
            if v is not None
        }
        pending, failed = (flag(get("retired_pages.pending")) if remapped else None), None
    power = next(
        (p for p in (scaled("power.draw", "W"), scaled("power.draw.average", "W")) if p is not None), None
    )
    limit = next(
        (p for p in (scaled("enforced.power.limit", "W"), scaled("power.limit", "W")) if p is not None), None
    )
    mig = flag(get("mig.mode.current"))
    return DeviceSample(
        device=device,
        utilization_ratio=ratio("utilization.gpu"),
        memory_bandwidth_utilization_ratio=ratio("utilization.memory"),
        memory_used_bytes=scaled("memory.used", "MiB"),
        memory_total_bytes=scaled("memory.total", "MiB"),
        temperatures_celsius=temps,
        power_watts=power,
        power_limit_watts=limit,
        clocks_hertz=clocks,
        clock_throttled=throttled,
        ecc_errors=ecc,
        remapped_rows=remapped,
        remap_pending=pending,
        remap_failed=failed,
        vendor_metrics=_state_metrics(mig, get("fan.speed"), get("pstate"), flag(get("persistence_mode"))),
        unread=_unread(row.get, _CSV_CELLS),
    )


_NVIDIA_BRANDS = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN", "GRID")


def sniff_csv(text: str) -> bool:
    """True for a --query-gpu CSV (header naming uuid or index) whose first GPU is an NVIDIA one: its name
    carries an NVIDIA brand or, without a name column, its uuid starts with ``GPU-``. Other vendors' clones
    of this format (Iluvatar ixsmi) therefore do not match."""
    lines = [ln for ln in text.splitlines()[:60] if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) < 2 or "nvidia_smi_log" in lines[0]:
        return False
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[:2])), skipinitialspace=True))
    except csv.Error:
        return False
    header = [re.sub(r"\s*\[[^\]]*\]$", "", h.strip()) for h in rows[0]]
    if len(rows) < 2 or len(rows[1]) != len(header) or not ({"uuid", "index"} & set(header)):
        return False
    row = dict(zip(header, (v.strip() for v in rows[1]), strict=True))
    if "name" in row:
        return row["name"].startswith(_NVIDIA_BRANDS)
    return row.get("uuid", "").startswith("GPU-")


# ---------------------------------------------------------------------------------------------- backend


class NvidiaSmiBackend:
    """Polls ``nvidia-smi -q -x`` through a CommandRunner (timeout, process-group kill on expiry).

    Raises BackendError from the runner (``timeout``, ``exit_status``, ``not_found``, ...) or ParseError.
    A GPU seen at an earlier poll and missing from this one's output is returned as
    ``DeviceSample.lost(..., "missing from nvidia-smi output")`` so that it shows ``accelerator_up 0``.
    """

    name = "nvidia-smi"

    def __init__(
        self, runner: CommandRunner, *, binary: str = "nvidia-smi", timeout_seconds: float = 10.0
    ) -> None:
        self._runner = runner
        self._binary = binary
        self._timeout = timeout_seconds
        self._known: dict[str, Device] = {}

    def open(self) -> None:
        """Nothing to acquire: each poll is one process."""

    def sample(self) -> Sequence[DeviceSample]:
        result = self._runner.run([self._binary, "-q", "-x"], self._timeout)
        samples = parse_nvidia_smi_xml(result.stdout)
        if not samples and not self._known:
            raise BackendError("nvidia-smi listed no GPUs", reason="no_devices")
        seen = {s.device.uuid for s in samples}
        missing = [
            DeviceSample.lost(dev, "missing from nvidia-smi output")
            for uuid, dev in self._known.items()
            if uuid not in seen
        ]
        for s in samples:
            self._known[s.device.uuid] = s.device
        return [*samples, *missing]

    def close(self) -> None:
        """Nothing held."""


def _create(ctx: BackendContext) -> NvidiaSmiBackend:
    opts = ctx.options
    return NvidiaSmiBackend(
        ctx.runner,
        binary=str(opts.get("binary", "nvidia-smi")),
        timeout_seconds=float(opts.get("timeout_seconds", 10.0)),
    )


def _detect(ctx: BackendContext) -> Detection:
    binary = str(ctx.options.get("binary", "nvidia-smi"))
    path = ctx.runner.which(binary)
    return Detection(True, f"{binary} found at {path}") if path else Detection(False, f"{binary} not on PATH")


class _LookedUp(dict[str, str]):
    """A CSV row that remembers which columns the mapping looked up (for ``explain_csv``)."""

    def __init__(self, row: Mapping[str, str]) -> None:
        super().__init__(row)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)


def explain_csv(text: str) -> list[str]:
    """The ``--query-gpu`` columns of ``text`` that map to no reading (``xpuwatch inspect --explain``).
    Raises ParseError like ``parse_nvidia_smi_csv``."""
    unused: dict[str, None] = {}
    reasons = ("clocks_event_reasons.", "clocks_throttle_reasons.")
    for position, row in enumerate(_csv_rows(text)):
        looked = _LookedUp(row)
        _csv_sample(looked, str(position))
        for key in row:
            if key in looked.read:
                continue
            if any(key.startswith(p) and key[len(p) :] in _SMI_REASON_NAMES for p in reasons):
                continue
            unused[key] = None
    return [f"{k}: no reading maps it" for k in unused]


XML_FORMAT = OutputFormat(name="nvidia-smi-xml", parse=parse_nvidia_smi_xml, sniff=sniff_xml)
CSV_FORMAT = OutputFormat(
    name="nvidia-smi-csv", parse=parse_nvidia_smi_csv, sniff=sniff_csv, explain=explain_csv
)

SPEC = register(
    BackendSpec(
        name="nvidia-smi",
        vendor=VENDOR,
        create=_create,
        detect=_detect,
        formats=(XML_FORMAT, CSV_FORMAT, TABLE_FORMAT),
        metrics=METRICS,
        priority=20,
        options={"binary": "string", "timeout_seconds": "seconds"},
    )
)
