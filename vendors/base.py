"""Vendor layer contract: device identity, one poll's readings, the backend protocol and its errors.

Everything a vendor backend returns crosses into the exporter as the frozen dataclasses below, in SI base
units (bytes, watts, joules, hertz, degrees Celsius, ratios 0..1). ``None`` (or a missing mapping key) means
"this vendor/device cannot report it" and produces no series; ``0`` is a measured zero. Vendor modules never
import ``exporter``; the exporter imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

# Label values used across the schema. Kept here so vendors and the exporter agree without retyping.
TEMPERATURE_SENSORS = ("core", "memory", "hotspot", "edge")
"""``edge`` only where the tool names a core sensor too (Hygon): elsewhere the edge sensor is ``core``."""
CLOCK_DOMAINS = ("graphics", "sm", "memory")
ECC_TYPES = ("corrected", "uncorrected")
REMAP_TYPES = ("correctable", "uncorrectable")


@dataclass(frozen=True)
class Partition:
    """The partition mode of a physical card and this logical device's place on it.

    AMD Instinct MI300 cards in a compute partition mode other than SPX are listed by the tools as several
    GPUs (DPX: 2, QPX: 4, CPX: 8 per card, each with its own PCI function), not as slices of one GPU: each
    logical GPU is a ``Device`` whose ``partition`` names its card. ``parent_uuid`` is the ``uuid`` of the
    card's partition 0 (which stands for the card: the tools print the card-wide power only there), so
    ``parent_uuid == uuid`` on partition 0 and on an unpartitioned (SPX) card. ``compute_mode`` ("SPX",
    "DPX", "TPX", "QPX", "CPX") and ``memory_mode`` ("NPS1", "NPS2", "NPS4") are the card's modes as
    printed, None where the tool did not print them (amd-smi prints them on partition 0 only).
    """

    parent_uuid: str
    partition_id: str  # "0".."7" as the tool prints it
    compute_mode: str | None = None
    memory_mode: str | None = None


@dataclass(frozen=True)
class Device:
    """Identity of one physical accelerator (a GPU, an NPU chip, one GCD of a multi-die package).

    ``index`` is the vendor-local index as the vendor tool prints it (string: Ascend uses "card-chip" pairs).
    ``uuid`` is the vendor's stable identifier; where the vendor has none, a backend derives one that is
    stable across restarts (serial, PCI bus id) and says so in its docstring.
    """

    vendor: str  # lower-case vendor key: nvidia, amd, huawei, hygon, cambricon, kunlunxin, metax, mthreads, iluvatar, enflame, intel
    model: str  # marketing model as the vendor reports it, e.g. "NVIDIA A100-SXM4-80GB", "Ascend910B"
    index: str
    uuid: str
    pci_bus_id: str | None = None
    driver_version: str | None = None
    serial: str | None = None
    aliases: tuple[str, ...] = ()
    """Other names device plugins use for this device, for pod attribution: ``phy-<n>`` is the physical
    chip id in Huawei's ``Ascend910-<n>`` device IDs."""
    partition: Partition | None = None
    """Where this device sits on a physical card that the vendor splits into several listed devices (AMD
    MI300 compute partitions); None where the tool prints no partition mode."""


@dataclass(frozen=True)
class Slice:
    """One partition of a physical device: a MIG instance, a vGPU (e.g. HAMi) share or an Ascend vNPU.

    Device-wide readings (temperature, power, ECC) never appear here: they stay once per physical device so
    that ``sum()`` over a node never double-counts. ``memory_total_bytes`` is the slice's own memory (MIG
    instance size, or the vGPU share's limit).
    """

    parent_uuid: str
    slice_id: str  # MIG: "<gpu_instance_id>/<compute_instance_id>"; vGPU: the share's id; vNPU: its Vnpu ID
    profile: str  # MIG profile name ("1g.10gb"), "vgpu", or the vNPU template ("vir10_3c_16g")
    kind: Literal["mig", "vgpu", "vnpu"]
    uuid: str | None = None  # MIG device UUID ("MIG-...") as the kubelet reports it; None for vGPU shares
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    compute_limit_ratio: float | None = None  # share of the parent's compute this slice may use (0..1)
    utilization_ratio: float | None = None
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None


@dataclass(frozen=True)
class ProcessMemory:
    """One process holding memory on a device, as the vendor lists it: ``pid`` in the host's PID namespace,
    ``memory_used_bytes`` None when the vendor lists the process but cannot tell its memory (NVML under
    some MIG/vGPU configurations reports usedGpuMemory as not available)."""

    pid: int
    memory_used_bytes: float | None = None


@dataclass(frozen=True)
class DeviceSample:
    """Readings of one device at one poll.

    ``up`` is False when the device is known but did not answer (lost, timed out); then every reading is
    None and only ``accelerator_up 0`` is exported for it. Counters (``*_total`` in the schema) are the
    device's own cumulative values as the vendor reports them (since boot/driver load), never deltas.
    """

    device: Device
    up: bool = True
    error: str | None = None  # short reason when not up, or when some fields failed
    utilization_ratio: float | None = None
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_used_ratio: float | None = None
    """Share of device memory in use (0..1), set only where the tool prints a percentage and no bytes
    (Hygon hy-smi ``VRAM%``); None whenever ``memory_used_bytes`` and ``memory_total_bytes`` are given."""
    temperatures_celsius: Mapping[str, float] = field(default_factory=dict)  # sensor -> C
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    clocks_hertz: Mapping[str, float] = field(default_factory=dict)  # clock domain -> Hz
    clock_throttled: Mapping[str, bool] = field(default_factory=dict)  # reason -> active
    ecc_errors: Mapping[str, int] = field(default_factory=dict)  # "corrected"/"uncorrected" -> count
    remapped_rows: Mapping[str, int] = field(default_factory=dict)  # "correctable"/"uncorrectable" -> rows
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    fault_events: Mapping[str, int] = field(default_factory=dict)  # fault code (e.g. XID "79") -> count
    pcie_replay_errors: int | None = None
    link_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (link, type) -> count
    health: Mapping[str, bool] = field(default_factory=dict)  # subsystem -> ok
    vendor_metrics: Mapping[str, float] = field(default_factory=dict)  # VendorMetric.name -> value
    slices: tuple[Slice, ...] = ()
    processes: tuple[ProcessMemory, ...] | None = None
    """Processes holding device memory (None: the vendor cannot list them; (): none running). The exporter
    maps them to containers for ``accelerator_container_memory_used_bytes``."""
    unread: Mapping[str, str] = field(default_factory=dict)
    """Readings the tool printed but that could not be read this poll: reading name (a field of this class,
    or a column name) -> short reason (``"'xxxxx MiB' is not a number with unit MiB"``). Each costs that one
    reading, never the device: the poller counts them in ``xpuwatch_backend_errors_total{reason="field"}``
    and ``xpuwatch inspect --explain`` prints them. Cells the vendor marks unavailable (``N/A``, ``-``) are
    not unread: they are None, as the vendor cannot tell."""

    @classmethod
    def lost(cls, device: Device, reason: str) -> DeviceSample:
        """A device that is known but did not answer this poll."""
        return cls(device=device, up=False, error=reason)


@dataclass(frozen=True)
class VendorMetric:
    """A vendor-only reading that fits no shared name: exported as ``accelerator_<vendor>_<name>``.

    Declared by the vendor module in its registration; the exporter's catalog includes it so that docs,
    alerts and dashboards see every metric in one place.
    """

    name: str  # full metric name, e.g. "accelerator_huawei_aicpu_utilization_ratio"
    type: Literal["gauge", "counter"]
    unit: str
    help: str
    source: str  # which vendor tool/API field it comes from


class BackendError(Exception):
    """A backend failed as a whole for this poll. ``reason`` is a short, bounded label value
    (``timeout``, ``exec_failed``, ``exit_status``, ``parse``, ``library``, ``init``, ...) for
    ``xpuwatch_backend_errors_total{reason}``."""

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason


class ParseError(BackendError):
    """A vendor tool's output could not be parsed (garbled, truncated, unexpected layout)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="parse")


@runtime_checkable
class Backend(Protocol):
    """One source of device readings (a vendor library or tool), polled by the exporter's poller.

    ``open`` acquires the library/handles (may raise BackendError); ``sample`` returns every known device
    (lost ones as ``DeviceSample.lost``) or raises BackendError when nothing could be read; ``close``
    releases resources and never raises. The poller never calls one backend from two threads at once.
    """

    name: str

    def open(self) -> None: ...

    def sample(self) -> Sequence[DeviceSample]: ...

    def close(self) -> None: ...


_OVERLAY_SCALARS = (
    "utilization_ratio",
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "memory_bandwidth_utilization_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_used_ratio",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "remap_pending",
    "remap_failed",
    "pcie_replay_errors",
    "processes",
)
_OVERLAY_MAPPINGS = (
    "temperatures_celsius",
    "clocks_hertz",
    "clock_throttled",
    "ecc_errors",
    "remapped_rows",
    "fault_events",
    "link_errors",
    "health",
    "vendor_metrics",
)
_SLICE_OVERLAY = (
    "memory_used_bytes",
    "memory_total_bytes",
    "compute_limit_ratio",
    "utilization_ratio",
    "sm_active_ratio",
    "sm_occupancy_ratio",
)


def overlay(primary: DeviceSample, supplement: DeviceSample) -> DeviceSample:
    """Overlay a supplementing backend's readings of the same device onto the primary's (e.g. DCGM's
    profiling ratios and health onto NVML's sample).

    The supplement exists to give better readings, so its non-None values win, mapping keys included.
    Identity and ``up`` stay the primary's; a lost primary stays lost with nothing overlaid. A supplement
    slice applies to the primary slice of the same ``slice_id``, or to every compute instance
    ``"<gi>/<ci>"`` of a GPU instance it names as ``"<gi>"``.
    """
    if not primary.up:
        return primary
    changes: dict[str, object] = {}
    for name in _OVERLAY_SCALARS:
        v = getattr(supplement, name)
        if v is not None:
            changes[name] = v
    for name in _OVERLAY_MAPPINGS:
        extra = getattr(supplement, name)
        if extra:
            changes[name] = {**getattr(primary, name), **extra}
    if supplement.slices:
        by_id = {s.slice_id: s for s in supplement.slices}
        merged = []
        for p in primary.slices:
            s = by_id.get(p.slice_id) or by_id.get(p.slice_id.split("/", 1)[0])
            if s is None:
                merged.append(p)
                continue
            merged.append(
                replace(p, **{f: getattr(s, f) for f in _SLICE_OVERLAY if getattr(s, f) is not None})
            )
        # vGPU shares the primary cannot see (HAMi's per-container regions over NVML) are added
        known = {p.slice_id for p in primary.slices}
        merged.extend(s for s in supplement.slices if s.kind == "vgpu" and s.slice_id not in known)
        changes["slices"] = tuple(merged)
    return replace(primary, **changes)  # type: ignore[arg-type]


def merge_samples(primary: Sequence[DeviceSample], supplement: Sequence[DeviceSample]) -> list[DeviceSample]:
    """``overlay`` by (vendor, uuid). Supplement samples of devices the primary does not know are appended,
    unless the supplement cannot name the device's model (HAMi knows only the GPU UUID): such a supplement
    adds to devices another backend reads, it never makes one up."""
    by_key = {(s.device.vendor, s.device.uuid): s for s in supplement}
    out = []
    for p in primary:
        s = by_key.pop((p.device.vendor, p.device.uuid), None)
        out.append(p if s is None else overlay(p, s))
    out.extend(s for s in by_key.values() if s.device.model)
    return out
