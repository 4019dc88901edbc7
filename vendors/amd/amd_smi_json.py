"""``amd-smi metric --json`` and ``amd-smi static --json`` (ROCm 6 list and ROCm 7 ``gpu_data`` shapes) into DeviceSamples.

Vendor layer: pure parsers of the AMD SMI CLI's JSON (ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xpuwatch.vendors.amd.partitions import partition_of, tie
from xpuwatch.vendors.amd.readings import (
    ECC_DEFERRED,
    UNKNOWN_MODEL,
    VENDOR,
    Notes,
    amount,
    count,
    device_uuid,
    load_json,
    printed,
    ratio,
    scaled,
    text,
    with_notes,
)
from xpuwatch.vendors.amd.rocm_smi_json import hygon_markers
from xpuwatch.vendors.base import Device, DeviceSample, ParseError


@dataclass(frozen=True)
class Identity:
    """What ``amd-smi static`` (or amdsmi's info calls) says about one GPU: identity, memory size, power cap.

    ``unread``: static readings printed but unreadable (reading -> reason), carried into the metric samples.
    """

    model: str | None = None
    unique_id: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    power_limit_watts: float | None = None
    memory_total_bytes: float | None = None
    partition: tuple[tuple[str, str], ...] = ()
    """The ``partition`` section as printed (``compute_partition``, ``memory_partition``, ``partition_id``)."""
    unread: dict[str, str] = field(default_factory=dict, compare=False)


def amd_smi_entries(doc: object, what: str = "amd-smi") -> list[tuple[str, Mapping[str, Any]]]:
    """The per-GPU objects of an amd-smi JSON document, as (gpu index, object), last one per index.

    Both shapes: a top-level list ``[{"gpu": 0, ...}]`` (amd-smi < 26) and ``{"gpu_data": [...]}``
    (amd-smi >= 26, ROCm 7). Watch mode repeats indexes; the last entry wins. Raises ParseError.
    """
    if isinstance(doc, Mapping):
        if "gpu_data" not in doc:
            raise ParseError(f"{what}: JSON object without 'gpu_data'")
        doc = doc["gpu_data"]
    if not isinstance(doc, list):
        raise ParseError(f"{what}: expected a list of GPUs")
    out: dict[str, Mapping[str, Any]] = {}
    for i, entry in enumerate(doc):
        if not isinstance(entry, Mapping):
            raise ParseError(f"{what}: entry {i} is not an object")
        gpu = entry.get("gpu")
        if isinstance(gpu, bool) or not isinstance(gpu, int | str) or not str(gpu).strip().isdigit():
            raise ParseError(f"{what}: entry {i} has no integer 'gpu' index")
        out[str(int(str(gpu).strip()))] = entry
    return sorted(out.items(), key=lambda kv: int(kv[0]))


def _section(entry: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    sec = entry.get(name)
    return sec if isinstance(sec, Mapping) else {}


def first(sec: Mapping[str, Any], *keys: str) -> object:
    """The first key of ``sec`` the tool printed a value for ("N/A" skipped): amd-smi renamed fields
    across releases. A garbled value is returned (and reported unread by the reader), never skipped."""
    for k in keys:
        if k in sec and printed(sec[k]):
            return sec[k]
    return None


# ``limit`` keys holding the power cap in force, newest first: ROCm 7 ``ppt0.socket_power_limit`` (amd-smi
# 26, with ``ppt1`` for a second cap where the board has one), ROCm 6.1+ ``socket_power``, 6.0 ``power_cap``
# (all from ``amdsmi_get_power_cap_info()["power_cap"]``). ``max_power``/``max_power_limit`` is the highest
# cap that may be SET (``max_power_cap``), not the cap in force: never used as the limit.
_CAP_KEYS = ("socket_power_limit", "socket_power", "power_cap")


def static_identity(entry: Mapping[str, Any]) -> Identity:
    """One ``amd-smi static --json`` GPU object -> Identity (every value read on its own).

    model: ``board.product_name`` ("AMD Instinct MI300X OAM"; ``asic.market_name`` can be generic, e.g.
    "AMD Radeon Graphics"), else ``asic.market_name``; unique id ``asic.asic_serial``; serial
    ``board.product_serial``; ``bus.bdf``; ``driver.version``; memory ``vram.size`` (MB = MiB);
    power cap ``limit.ppt0.socket_power_limit``, else ``limit.socket_power``, else ``limit.power_cap``.
    """
    asic, board, bus = _section(entry, "asic"), _section(entry, "board"), _section(entry, "bus")
    limit, driver, vram = _section(entry, "limit"), _section(entry, "driver"), _section(entry, "vram")
    notes = Notes()
    ppt0 = _section(limit, "ppt0")
    cap_raw = first(ppt0, *_CAP_KEYS) if ppt0 else first(limit, *_CAP_KEYS)
    return Identity(
        model=text(board.get("product_name")) or text(asic.get("market_name")),
        unique_id=text(asic.get("asic_serial")),
        serial=text(board.get("product_serial")),
        pci_bus_id=text(bus.get("bdf")),
        driver_version=text(driver.get("version")) or text(driver.get("driver_version")),
        power_limit_watts=amount(cap_raw, "power", "W", notes, "limit.socket_power", "power_limit_watts"),
        memory_total_bytes=amount(
            first(vram, "size", "vram_size"), "bytes", "MB", notes, "vram.size", "memory_total_bytes"
        ),
        partition=tuple(
            (k, str(v))
            for k, v in _section(entry, "partition").items()
            if k in _PARTITION_KEYS and v is not None
        ),
        unread=notes.unread,
    )


_PARTITION_KEYS = ("compute_partition", "memory_partition", "partition_id")


def parse_amd_smi_static(raw: str) -> dict[str, Identity]:
    """``amd-smi static --json`` (ROCm 6 list or ROCm 7 ``gpu_data``) -> {gpu index: Identity}.
    Raises ParseError on anything that is not such a document; one unreadable value costs that value only."""
    entries = amd_smi_entries(load_json(raw, "amd-smi static"), "amd-smi static")
    return {idx: static_identity(entry) for idx, entry in entries}


def parse_amd_smi_static_samples(raw: str) -> list[DeviceSample]:
    """``amd-smi static --json`` alone as DeviceSamples (``xpuwatch inspect``): identity, memory size and
    power cap; no live readings (static has none). Raises ParseError."""
    static = parse_amd_smi_static(raw)
    if not static:
        raise ParseError("amd-smi static: no GPUs in the output")
    return tie(
        [
            with_notes(
                DeviceSample(
                    device=amd_device(VENDOR, idx, ident),
                    memory_total_bytes=ident.memory_total_bytes,
                    power_limit_watts=ident.power_limit_watts,
                ),
                Notes(unread=dict(ident.unread)),
            )
            for idx, ident in static.items()
        ]
    )


def amd_device(vendor: str, idx: str, ident: Identity | None) -> Device:
    ident = ident or Identity()
    uuid = device_uuid(vendor, idx, ident.unique_id, ident.serial, ident.pci_bus_id)
    return Device(
        vendor=vendor,
        model=ident.model or UNKNOWN_MODEL,
        index=idx,
        uuid=uuid,
        pci_bus_id=ident.pci_bus_id,
        driver_version=ident.driver_version,
        serial=ident.serial,
        partition=partition_of(dict(ident.partition), uuid),
    )


def amd_smi_sample(idx: str, entry: Mapping[str, Any], ident: Identity | None = None) -> DeviceSample:
    """One ``amd-smi metric --json`` GPU object -> DeviceSample (see docs/vendors/amd.md for the map).

    ``ident`` (from ``amd-smi static``) gives identity, the power cap and, when metric printed no
    ``mem_usage.total_vram``, the memory size. Each value is read on its own: an unreadable one is
    named in ``unread`` and costs nothing else.
    """
    notes = Notes(unread=dict(ident.unread) if ident else {})
    usage, power = _section(entry, "usage"), _section(entry, "power")
    temp, mem = _section(entry, "temperature"), _section(entry, "mem_usage")
    energy, ecc, pcie = _section(entry, "energy"), _section(entry, "ecc"), _section(entry, "pcie")
    temps = {
        sensor: t
        for sensor, key in (("core", "edge"), ("hotspot", "hotspot"), ("memory", "mem"))
        if (
            t := scaled(
                temp.get(key), "celsius", "C", notes, f"temperature.{key}", f"temperatures_celsius.{sensor}"
            )
        )
        is not None
    }
    ecc_counts = {
        kind: n
        for kind, key in (
            ("corrected", "total_correctable_count"),
            ("uncorrected", "total_uncorrectable_count"),
        )
        if (n := count(ecc.get(key), notes, f"ecc_errors.{kind}")) is not None
    }
    deferred = count(ecc.get("total_deferred_count"), notes, "ecc.total_deferred_count")
    clocks = amd_smi_clocks(_section(entry, "clock"), notes)
    total = amount(mem.get("total_vram"), "bytes", "MB", notes, "mem_usage.total_vram", "memory_total_bytes")
    sample = DeviceSample(
        device=amd_device(VENDOR, idx, ident),
        utilization_ratio=ratio(usage.get("gfx_activity"), notes, "usage.gfx_activity", "utilization_ratio"),
        memory_bandwidth_utilization_ratio=ratio(
            usage.get("umc_activity"), notes, "usage.umc_activity", "memory_bandwidth_utilization_ratio"
        ),
        memory_used_bytes=amount(
            mem.get("used_vram"), "bytes", "MB", notes, "mem_usage.used_vram", "memory_used_bytes"
        ),
        memory_total_bytes=total if total is not None else (ident.memory_total_bytes if ident else None),
        temperatures_celsius=temps,
        clocks_hertz=clocks,
        power_watts=amount(
            first(power, "socket_power", "current_socket_power", "average_socket_power"),
            "power",
            "W",
            notes,
            "power.socket_power",
            "power_watts",
        ),
        power_limit_watts=ident.power_limit_watts if ident else None,
        energy_joules=amount(
            energy.get("total_energy_consumption"), "energy", "J", notes, "energy", "energy_joules"
        ),
        ecc_errors=ecc_counts,
        pcie_replay_errors=count(
            first(pcie, "replay_count", "pcie_replay_count"), notes, "pcie_replay_errors"
        ),
        vendor_metrics={ECC_DEFERRED.name: float(deferred)} if deferred is not None else {},
    )
    return with_notes(sample, notes)


def amd_smi_clocks(clock: Mapping[str, Any], notes: Notes) -> dict[str, float]:
    """``clock.gfx_N.clk`` -> graphics, ``clock.mem_N.clk`` -> memory (Hz): the first instance that reads
    (MI300 has one gfx clock per XCD; they run together)."""
    out: dict[str, float] = {}
    for domain, prefix in (("graphics", "gfx_"), ("memory", "mem_")):
        for key in sorted((k for k in clock if str(k).startswith(prefix)), key=str):
            sub = clock[key]
            raw = sub.get("clk") if isinstance(sub, Mapping) else None
            hz = amount(raw, "hertz", "MHz", notes, f"clock.{key}.clk", f"clocks_hertz.{domain}")
            if hz is not None:
                out[domain] = hz
                break
    return out


def parse_amd_smi_metric(raw: str, static: Mapping[str, Identity] | None = None) -> list[DeviceSample]:
    """``amd-smi metric --json`` (either shape) -> one DeviceSample per GPU. Raises ParseError.

    ``static`` (from ``parse_amd_smi_static``) supplies model, uuid, bus id, memory size and the power cap;
    without it the model is "unknown" and the uuid falls back to ``amd-index-<gpu>``.
    """
    entries = amd_smi_entries(load_json(raw, "amd-smi metric"), "amd-smi metric")
    if not entries:
        raise ParseError("amd-smi metric: no GPUs in the output")
    static = static or {}
    return tie([amd_smi_sample(idx, entry, static.get(idx)) for idx, entry in entries])


# Sections only ``amd-smi metric`` prints, and sections only ``amd-smi static`` prints.
_METRIC_SECTION = re.compile(r'"(usage|power|temperature|mem_usage|ecc|energy)"\s*:')
_PROCESS_LIST = re.compile(r'"process_list"\s*:')
_STATIC_SECTION = re.compile(r'"(asic|board|limit|vram|ifwi|vbios)"\s*:')


def _amd_smi_gpus(head: str) -> bool:
    gpu = '"gpu_data"' in head or re.search(r'"gpu"\s*:\s*\d', head) is not None
    return gpu and not hygon_markers(head)


def sniff_amd_smi_json(raw: str) -> bool:
    """amd-smi metric JSON: objects with an integer "gpu" and metric section names (or {"gpu_data": ...});
    never Hygon output, never ``amd-smi process`` output (its entries hold ``mem_usage`` too)."""
    head = raw.lstrip()[:4000]
    return (
        _amd_smi_gpus(head)
        and _METRIC_SECTION.search(head) is not None
        and _PROCESS_LIST.search(head) is None
    )


def sniff_amd_smi_static_json(raw: str) -> bool:
    """amd-smi static JSON: integer "gpu" objects with static sections (asic, board, limit, vram) and none
    of metric's."""
    head = raw.lstrip()[:4000]
    return (
        _amd_smi_gpus(head)
        and _STATIC_SECTION.search(head) is not None
        and _METRIC_SECTION.search(head) is None
    )
