"""Simulated heterogeneous fleet backend (``sim``): deterministic device readings from a scenario timeline.

The simulator stands in for real accelerators so the whole stack (exporter, alerts, dashboards,
remediation) can run and be tested anywhere. A *scenario* (YAML, all keys optional) lists the fleet and a
timeline of workload profiles, injected faults and pod assignments; ``parse_scenario`` turns it into frozen
dataclasses (pure, raises ``ScenarioError`` naming the key). Readings are a pure function of
(scenario, seed, device, seconds since start): ``simulate(scenario, t)``.

Default fleet on node ``sim-node-1`` (18 devices): nvidia 0-1 "NVIDIA A100-SXM4-80GB" (0 in MIG mode with
3g.40gb, 2g.20gb and 1g.10gb instances), nvidia 2-3 "NVIDIA GeForce RTX 4090" (3 shared by two HAMi vGPU
shares), amd 0-1 "AMD Instinct MI250X" (one MI250X package = two GCDs, each its own device as rocm-smi and
amd-smi list them; package power is reported on the first GCD only), amd 2-3 "AMD Instinct MI300X" (one card
in DPX/NPS1: two logical GPUs tied by ``Device.partition``, the card's power on partition 0 only), huawei
0-0..3-0 "Ascend910B" (labelled as the npu-smi parser labels chips: ``"<NPU>-<chip>"``, uuid
``ascend-<bus id>-<chip>``), huawei 4-0 "Ascend310P3", hygon 0 "K100_AI", cambricon 0 "MLU370-X8", enflame 0
"S60", kunlunxin 0 "R200", mthreads 0 "MTT S4000" (as mthreads-gmi prints it on a host with a misconfigured
IOMMU: used memory above the reported total, an implausible reading exported as printed). The
default timeline shows every profile and has no faults; with the vendor-only metrics of ``EXTRAS`` and one
process per holding container, the default fleet emits every family of ``exporter.catalog``.

Per-model capabilities follow what the real vendor interfaces report: DCGM profiling ratios (SM active,
occupancy, tensor) only on the A100; no device-level GPU-Util on a MIG-enabled A100 (NVML answers
NOT_SUPPORTED); no ECC on the RTX 4090; no power limit on Ascend (npu-smi does not report one); NVLink
counters on the A100 (12 links).

Faults (timeline ``fault:``): ``ecc_uncorrectable`` (one DBE: uncorrected ECC +1, XID 48, a pending row
remap, memory health failed), ``ecc_correctable_storm`` (corrected ECC +100 per second while active),
``xid:<code>`` (one driver fault event), ``lost`` (XID 79 "fallen off the bus": the device stops answering,
up=False), ``overheat`` (core 95 C, thermal throttling, clocks down), ``health_fail`` (every health subsystem
failed), ``hung_backend`` (``sample()`` blocks until the fault is cleared or the backend is closed),
``clear`` (ends every active fault on that device; counters keep their values).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import importlib.resources
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from xpuwatch.vendors.amd.readings import ECC_DEFERRED as AMD_ECC_DEFERRED
from xpuwatch.vendors.ascend import records as ascend
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, Partition, ProcessMemory, Slice
from xpuwatch.vendors.cambricon import ECC_ERRORS as CAMBRICON_ECC
from xpuwatch.vendors.dcgm import PROFILING_SUSPECT
from xpuwatch.vendors.enflame import ECC_ENABLED as ENFLAME_ECC
from xpuwatch.vendors.hygon import MEMORY_AVAILABLE as HYGON_MEMORY_AVAILABLE
from xpuwatch.vendors.kunlunxin import L3_TOTAL as KUNLUNXIN_L3_TOTAL
from xpuwatch.vendors.kunlunxin import L3_USED as KUNLUNXIN_L3_USED
from xpuwatch.vendors.nvidia_fields import FAN_SPEED, MIG_MODE, PERFORMANCE_STATE, PERSISTENCE_MODE
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, register
from xpuwatch.vendors.untrusted import RefusedFile, read_capped

DEFAULT_NODE = "sim-node-1"
GIB = 1024**3
MIB = 1024**2

PROFILES = ("training", "inference", "idle_notebook", "memory_bound", "compute_bound", "starved", "idle")
FAULTS = (
    "ecc_uncorrectable",
    "ecc_correctable_storm",
    "lost",
    "overheat",
    "health_fail",
    "hung_backend",
    "clear",
)
# Device plugin resource names, as pods request them (the kubelet's PodResources resource_name).
RESOURCE_NAMES = {
    "nvidia": "nvidia.com/gpu",
    "amd": "amd.com/gpu",
    "huawei": "huawei.com/Ascend910",
    "hygon": "hygon.com/dcu",
    "cambricon": "cambricon.com/mlu",
    "enflame": "enflame.com/gcu",
    "kunlunxin": "kunlunxin.com/xpu",
    "mthreads": "mthreads.com/vgpu",
}
# Models whose device plugin names another resource than their vendor's (MindCluster: one per chip family).
MODEL_RESOURCE_NAMES = {"Ascend310P3": "huawei.com/Ascend310P"}
# Resources whose device plugin may mount another chip than the kubelet recorded (MindCluster's
# huawei.com/AscendReal annotation): the exporter counts reassigned IDs for them (exporter/podsource.py).
REASSIGNING_RESOURCES = ("huawei.com/Ascend910", "huawei.com/Ascend310P")
WORKLOAD_KINDS = ("notebook", "job", "service", "unknown")
# NVIDIA XIDs the simulated NVIDIA devices watch (exported at 0 before the first event).
NVIDIA_XIDS = ("13", "31", "43", "45", "48", "63", "64", "74", "79", "94", "95")
THROTTLE_REASONS = (
    "gpu_idle",
    "clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
)
NVLINK_ERROR_TYPES = ("crc_flit", "crc_data", "replay", "recovery")
MIG_PROFILES: dict[str, tuple[int, int]] = {  # A100-80GB profile -> (compute slices of 7, memory GiB)
    "1g.10gb": (1, 10),
    "2g.20gb": (2, 20),
    "3g.40gb": (3, 40),
    "4g.40gb": (4, 40),
    "7g.80gb": (7, 80),
}


class ScenarioError(ValueError):
    """A scenario document is invalid; the message names the key (``timeline[3].fault``)."""


@dataclass(frozen=True)
class ModelSpec:
    """What one simulated model reports. Memory in bytes, power in watts, clocks in hertz."""

    vendor: str
    memory_bytes: float
    power_limit_watts: float | None
    max_clock_hertz: float
    memory_clock_hertz: float
    prof: bool = False  # DCGM profiling ratios (SM active/occupancy, tensor)
    ecc: bool = True
    remap: bool = False
    nvlinks: int = 0
    temperatures: tuple[str, ...] = ("core",)
    power_on_even_index_only: bool = False  # MI250X: package power on the first GCD of each package
    health: tuple[str, ...] = ()
    fault_codes: tuple[str, ...] = ()
    throttle: bool = False
    clocks: bool = True
    energy: bool = True  # an energy counter (NVML, amd-smi); the others' tools print power only
    memory_percent_only: bool = False  # hy-smi: VRAM% without bytes -> accelerator_memory_used_ratio
    processes: bool = False  # the tool lists processes with their memory (per-container memory)
    extras: str = ""  # key of EXTRAS: the model's vendor-only metrics
    chip_power: bool = (
        True  # Ascend 310P chips report no power (the card's MCU does); mthreads-gmi's table none
    )
    memory_total_reported: float | None = None  # a total the tool misreports (bytes): used may exceed it
    partitions: int = (
        1  # logical GPUs per card the tool lists (MI300X DPX: 2), each a Device with a Partition
    )
    partition_modes: tuple[str, str] = (
        "",
        "",
    )  # (compute, memory) partition modes as printed: ("DPX", "NPS1")


MODELS: dict[str, ModelSpec] = {
    "NVIDIA A100-SXM4-80GB": ModelSpec(
        "nvidia",
        81920 * MIB,
        400.0,
        1410e6,
        1593e6,
        prof=True,
        remap=True,
        nvlinks=12,
        temperatures=("core", "memory"),
        health=("memory", "nvlink", "pcie", "power", "thermal"),
        fault_codes=NVIDIA_XIDS,
        throttle=True,
        processes=True,
        extras="a100",
    ),
    "NVIDIA GeForce RTX 4090": ModelSpec(
        "nvidia",
        24564 * MIB,
        450.0,
        2520e6,
        10501e6,
        ecc=False,
        temperatures=("core",),
        fault_codes=NVIDIA_XIDS,
        throttle=True,
        processes=True,
        extras="geforce",
    ),
    # MI300X in DPX/NPS1, as amd-smi lists it (ROCm/amdsmi#132): two logical GPUs per card, one PCI function
    # each; the card's power and cap on partition 0 only; the whole card's memory total (196592 MiB) on
    # partition 0, half of it on partition 1 (docs/vendors/amd.md "Compute and memory partitions").
    "AMD Instinct MI300X": ModelSpec(
        "amd",
        196592 * MIB,
        750.0,
        2100e6,
        1300e6,
        temperatures=("hotspot", "memory"),
        processes=True,
        extras="amd",
        partitions=2,
        partition_modes=("DPX", "NPS1"),
    ),
    "AMD Instinct MI250X": ModelSpec(
        "amd",
        64 * GIB,
        560.0,
        1700e6,
        1600e6,
        temperatures=("hotspot", "memory"),
        power_on_even_index_only=True,
        processes=True,
        extras="amd",
    ),
    "Ascend910B": ModelSpec(
        "huawei",
        64 * GIB,
        None,
        1800e6,
        1600e6,
        temperatures=("core",),
        health=("chip",),
        clocks=False,
        processes=True,
        extras="ascend",
    ),
    # Ascend 310P3 (Atlas 300I Pro, one chip): no chip power, the card's power on its lowest chip.
    "Ascend310P3": ModelSpec(
        "huawei",
        24 * GIB,
        None,
        1080e6,
        1600e6,
        ecc=False,
        health=("chip",),
        clocks=False,
        energy=False,
        processes=True,
        extras="ascend310p",
        chip_power=False,
    ),
    # Domestic cards read by their vendors' tools: power without an energy counter.
    "K100_AI": ModelSpec(
        "hygon", 64 * GIB, 350.0, 1500e6, 1600e6, energy=False, memory_percent_only=True, extras="hygon"
    ),
    "MLU370-X8": ModelSpec("cambricon", 48 * GIB, 250.0, 1300e6, 1600e6, energy=False, extras="cambricon"),
    "S60": ModelSpec("enflame", 48 * GIB, 300.0, 1400e6, 1600e6, energy=False, extras="enflame"),
    "R200": ModelSpec("kunlunxin", 32 * GIB, 150.0, 1400e6, 1600e6, energy=False, extras="kunlunxin"),
    # MTT S4000 (48 GiB) on a host with a misconfigured IOMMU, as mthreads-gmi prints it there: a total of
    # 32768 MiB and the used bytes above it ("44302MiB(32768MiB)", shared/fixtures/mthreads S4000 capture;
    # the documented fix is enabling IOMMU). The plain table prints no power, clocks or ECC (N/A).
    "MTT S4000": ModelSpec(
        "mthreads",
        48 * GIB,
        None,
        1750e6,
        1600e6,
        ecc=False,
        clocks=False,
        energy=False,
        chip_power=False,
        memory_total_reported=32768 * MIB,
    ),
}

_VENDOR_OF_MODEL = {name: m.vendor for name, m in MODELS.items()}


@dataclass(frozen=True)
class ProfileSpec:
    """Nominal readings of a workload profile (ratios 0..1; power as a fraction of the limit; temp in C).

    ``burst`` is the amplitude of the utilization swing (inference is bursty).
    """

    util: float
    sm_active: float
    sm_occupancy: float
    tensor: float
    membw: float
    memory: float
    power: float
    temp: float
    burst: float = 0.02


PROFILE_SPECS: dict[str, ProfileSpec] = {
    "training": ProfileSpec(0.97, 0.85, 0.55, 0.45, 0.60, 0.92, 0.85, 72),
    "inference": ProfileSpec(0.45, 0.30, 0.20, 0.15, 0.30, 0.60, 0.45, 55, burst=0.35),
    "idle_notebook": ProfileSpec(0.01, 0.01, 0.005, 0.0, 0.01, 0.75, 0.15, 38, burst=0.01),
    "memory_bound": ProfileSpec(0.99, 0.35, 0.15, 0.05, 0.92, 0.55, 0.60, 65),
    "compute_bound": ProfileSpec(0.99, 0.95, 0.80, 0.85, 0.35, 0.50, 0.95, 78),
    "starved": ProfileSpec(0.25, 0.12, 0.06, 0.04, 0.08, 0.40, 0.22, 45, burst=0.1),
    "idle": ProfileSpec(0.0, 0.0, 0.0, 0.0, 0.0, 0.005, 0.10, 32, burst=0.0),
}


@dataclass(frozen=True)
class SimPod:
    """A simulated container holding a device or slice (the exporter turns it into an attribution Holder)."""

    namespace: str
    pod: str
    container: str
    workload_kind: str = "unknown"
    owner: str = ""


@dataclass(frozen=True)
class FleetEntry:
    """``count`` devices of one model. ``mig``: MIG instance profiles on the first device of this entry;
    ``vgpu``: number of HAMi vGPU shares on the last device of this entry (0 = none)."""

    vendor: str
    model: str
    count: int = 1
    mig: tuple[str, ...] = ()
    vgpu: int = 0


@dataclass(frozen=True)
class TimelineEvent:
    """One timeline entry. ``device`` selects by vendor-local index (with ``vendor``, or the first vendor
    in the fleet having that index), ``<vendor>/<index>`` or uuid. ``pods`` is None when the entry does
    not touch assignment; ``()`` releases the device/slice."""

    at: float
    device: str
    vendor: str | None = None
    slice: str | None = None
    profile: str | None = None
    fault: str | None = None
    pods: tuple[SimPod, ...] | None = None


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario: fleet, timeline (sorted by ``at``), seed, node and poll interval (seconds).
    ``timeline_start``: ``start`` (the timeline's ``at`` counts from the backend's start) or ``first_scrape``
    (the fleet holds its state at 0 until the exporter's first scrape, then the timeline runs: Prometheus
    sees every fault step from its first sample, however late it scrapes first)."""

    seed: int = 42
    node: str = DEFAULT_NODE
    poll_interval: float = 1.0
    fleet: tuple[FleetEntry, ...] = ()
    timeline: tuple[TimelineEvent, ...] = ()
    timeline_start: str = "start"


DEFAULT_SCENARIO_FILE = "sim_default.yaml"
TIMELINE_STARTS = ("start", "first_scrape")
MAX_SCENARIO_BYTES = 16 * MIB
"""The largest --sim-config read (a scenario of thousands of devices is a few hundred KiB)."""


def default_scenario_text() -> str:
    """The packaged default scenario (vendors/sim_default.yaml)."""
    return (
        importlib.resources.files("xpuwatch.vendors")
        .joinpath(DEFAULT_SCENARIO_FILE)
        .read_text(encoding="utf-8")
    )


# --------------------------------------------------------------------------------------------------------
# Parsing (pure)


def parse_scenario(text: str, defaults: Scenario | None = None) -> Scenario:
    """Parse a scenario YAML document. Missing keys come from ``defaults`` (the default scenario when None):
    ``devices`` replaces the default fleet and then the default timeline is dropped too, since it names
    devices of the default fleet. Raises ScenarioError naming the offending key."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ScenarioError(f"scenario is not valid YAML: {where}{problem}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ScenarioError(
            "scenario must be a mapping of keys (seed, node, poll_interval, devices, timeline)"
        )
    unknown = set(doc) - {"seed", "node", "poll_interval", "devices", "timeline", "timeline_start"}
    if unknown:
        raise ScenarioError(f"unknown scenario key(s): {', '.join(sorted(map(str, unknown)))}")
    base = defaults if defaults is not None else _builtin_default()
    seed = _int(doc.get("seed", base.seed), "seed")
    node = doc.get("node", base.node)
    if not isinstance(node, str) or not node:
        raise ScenarioError("node: must be a non-empty string")
    interval = _num(doc.get("poll_interval", base.poll_interval), "poll_interval")
    if interval <= 0:
        raise ScenarioError("poll_interval: must be > 0 seconds")
    if "devices" in doc:
        fleet = _parse_fleet(doc["devices"])
        timeline: tuple[TimelineEvent, ...] = ()
    else:
        fleet, timeline = base.fleet, base.timeline
    if "timeline" in doc:
        timeline = _parse_timeline(doc["timeline"])
    start = doc.get("timeline_start", base.timeline_start)
    if start not in TIMELINE_STARTS:
        raise ScenarioError(f"timeline_start: one of {', '.join(TIMELINE_STARTS)}, got {start!r}")
    scenario = Scenario(
        seed=seed, node=node, poll_interval=interval, fleet=fleet, timeline=timeline, timeline_start=start
    )
    devices = fleet_devices(scenario)
    for i, ev in enumerate(scenario.timeline):
        dev = _select(devices, ev, f"timeline[{i}].device")
        if ev.slice is not None and ev.slice not in {s for s, _ in _slice_layout(scenario, dev)}:
            raise ScenarioError(
                f"timeline[{i}].slice: device {dev.vendor}/{dev.index} has no slice {ev.slice!r}"
            )
    return scenario


_BUILTIN: Scenario | None = None


def _builtin_default() -> Scenario:
    global _BUILTIN
    if _BUILTIN is None:
        _BUILTIN = parse_scenario(default_scenario_text(), defaults=Scenario())
    return _BUILTIN


def _int(v: Any, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScenarioError(f"{key}: must be an integer, got {v!r}")
    return v


def _num(v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ScenarioError(f"{key}: must be a number, got {v!r}")
    return float(v)


def _parse_fleet(raw: Any) -> tuple[FleetEntry, ...]:
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("devices: must be a non-empty list of {vendor, model, count}")
    out = []
    for i, e in enumerate(raw):
        key = f"devices[{i}]"
        if not isinstance(e, dict):
            raise ScenarioError(f"{key}: must be a mapping")
        unknown = set(e) - {"vendor", "model", "count", "mig", "vgpu"}
        if unknown:
            raise ScenarioError(f"{key}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        model = e.get("model")
        if model not in MODELS:
            raise ScenarioError(f"{key}.model: {model!r} is not simulated; choose one of {', '.join(MODELS)}")
        vendor = e.get("vendor", _VENDOR_OF_MODEL[model])
        if vendor != _VENDOR_OF_MODEL[model]:
            raise ScenarioError(f"{key}.vendor: {model} is made by {_VENDOR_OF_MODEL[model]}, not {vendor!r}")
        count = _int(e.get("count", 1), f"{key}.count")
        if not 1 <= count <= 4096:
            raise ScenarioError(f"{key}.count: must be 1..4096")
        per_card = MODELS[model].partitions
        if count % per_card:
            raise ScenarioError(
                f"{key}.count: {model} is listed as {per_card} logical GPUs per card; count must be a multiple "
                f"of {per_card}"
            )
        mig = e.get("mig", [])
        if not isinstance(mig, list) or any(p not in MIG_PROFILES for p in mig):
            raise ScenarioError(f"{key}.mig: must be a list of MIG profiles ({', '.join(MIG_PROFILES)})")
        if mig and model != "NVIDIA A100-SXM4-80GB":
            raise ScenarioError(f"{key}.mig: MIG is simulated on the A100 only")
        if sum(MIG_PROFILES[p][0] for p in mig) > 7:
            raise ScenarioError(f"{key}.mig: more than 7 compute slices")
        vgpu = _int(e.get("vgpu", 0), f"{key}.vgpu")
        if not 0 <= vgpu <= 16:
            raise ScenarioError(f"{key}.vgpu: must be 0..16")
        if vgpu and vendor != "nvidia":
            raise ScenarioError(f"{key}.vgpu: HAMi vGPU shares are simulated on NVIDIA devices only")
        out.append(FleetEntry(vendor, model, count, tuple(mig), vgpu))
    return tuple(out)


def _parse_pod(raw: Any, key: str) -> SimPod:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{key}: must be a mapping {{namespace, pod, container, workload_kind, owner}}")
    unknown = set(raw) - {"namespace", "pod", "container", "workload_kind", "owner"}
    if unknown:
        raise ScenarioError(f"{key}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    for k in ("namespace", "pod"):
        if not isinstance(raw.get(k), str) or not raw[k]:
            raise ScenarioError(f"{key}.{k}: required string")
    kind = raw.get("workload_kind", "unknown")
    if kind not in WORKLOAD_KINDS:
        raise ScenarioError(f"{key}.workload_kind: must be one of {', '.join(WORKLOAD_KINDS)}")
    container = raw.get("container", "main")
    owner = raw.get("owner", "")
    if not isinstance(container, str) or not isinstance(owner, str):
        raise ScenarioError(f"{key}: container and owner must be strings")
    return SimPod(raw["namespace"], raw["pod"], container, kind, owner)


def _parse_timeline(raw: Any) -> tuple[TimelineEvent, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ScenarioError("timeline: must be a list of events")
    out = []
    for i, e in enumerate(raw):
        key = f"timeline[{i}]"
        if not isinstance(e, dict):
            raise ScenarioError(f"{key}: must be a mapping")
        unknown = set(e) - {"at", "device", "vendor", "slice", "profile", "fault", "pod", "pods"}
        if unknown:
            raise ScenarioError(f"{key}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        at = _num(e.get("at", 0), f"{key}.at")
        if at < 0:
            raise ScenarioError(f"{key}.at: must be >= 0 seconds")
        if "device" not in e:
            raise ScenarioError(f"{key}.device: required")
        device = str(e["device"])
        vendor = e.get("vendor")
        if vendor is not None and not isinstance(vendor, str):
            raise ScenarioError(f"{key}.vendor: must be a string")
        sl = e.get("slice")
        profile = e.get("profile")
        if profile is not None and profile not in PROFILES:
            raise ScenarioError(f"{key}.profile: {profile!r} is not one of {', '.join(PROFILES)}")
        fault = e.get("fault")
        if fault is not None:
            fault = str(fault)
            if fault.startswith("xid:"):
                code = fault[4:]
                if not code.isdigit() or len(code) > 4:
                    raise ScenarioError(f"{key}.fault: xid code must be a number, got {code!r}")
            elif fault not in FAULTS:
                raise ScenarioError(f"{key}.fault: {fault!r} is not one of {', '.join(FAULTS)} or xid:<code>")
        pods: tuple[SimPod, ...] | None = None
        if "pod" in e and "pods" in e:
            raise ScenarioError(f"{key}: give pod or pods, not both")
        if "pod" in e:
            pods = () if e["pod"] in (None, {}) else (_parse_pod(e["pod"], f"{key}.pod"),)
        elif "pods" in e:
            if not isinstance(e["pods"], list):
                raise ScenarioError(f"{key}.pods: must be a list")
            pods = tuple(_parse_pod(p, f"{key}.pods[{j}]") for j, p in enumerate(e["pods"]))
        if profile is None and fault is None and pods is None:
            raise ScenarioError(f"{key}: needs profile, fault or pod")
        if sl is not None and fault is not None:
            raise ScenarioError(f"{key}.slice: faults apply to a whole device, not to a slice")
        out.append(TimelineEvent(at, device, vendor, None if sl is None else str(sl), profile, fault, pods))
    return tuple(sorted(out, key=lambda ev: ev.at))  # stable: same-time events keep file order


# --------------------------------------------------------------------------------------------------------
# The fleet


def _hex(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()


@dataclass(frozen=True)
class _SimDevice:
    device: Device
    model: ModelSpec
    entry: FleetEntry
    mig: tuple[str, ...]
    vgpu: int

    @property
    def vendor(self) -> str:
        return self.device.vendor

    @property
    def index(self) -> str:
        return self.device.index


def _uuid_for(vendor: str, seed: int, node: str, index: int) -> str:
    h = _hex("uuid", seed, node, vendor, index)
    core = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return {"nvidia": f"GPU-{core}", "amd": f"0x{h[:16]}"}.get(vendor, core)


_DRIVERS = {"nvidia": "550.54.15", "amd": "6.7.0", "huawei": "24.1.rc2", "mthreads": "1.2.0"}


@functools.lru_cache(maxsize=16)
def fleet_devices(scenario: Scenario) -> tuple[_SimDevice, ...]:
    """Every simulated device, with deterministic uuids/serials/PCI ids (from seed and node)."""
    out: list[_SimDevice] = []
    next_index: dict[str, int] = {}
    card = ("", "", "")  # (uuid, PCI bus id, serial) of the partitioned card being listed
    for entry in scenario.fleet:
        spec = MODELS[entry.model]
        for k in range(entry.count):
            idx = next_index.get(entry.vendor, 0)
            next_index[entry.vendor] = idx + 1
            bus = len(out)
            pci = f"00000000:{(0x10 + bus) % 256:02X}:00.0"
            uuid = _uuid_for(entry.vendor, scenario.seed, scenario.node, idx)
            index = str(idx)
            if entry.vendor == "huawei":
                # As the npu-smi parser labels a chip (vendors/ascend): index "<NPU>-<chip>" (one chip per
                # 910B NPU), uuid from the lower-case bus id in npu-smi's 4-digit-domain form.
                pci = f"0000:{(0x10 + bus) % 256:02x}:00.0"
                index, uuid = f"{idx}-0", f"ascend-{pci}-0"
            serial = str(int(_hex("serial", scenario.seed, scenario.node, entry.vendor, idx)[:12], 16))
            partition = None
            if spec.partitions > 1:
                # As vendors.amd.partitions ties them: one PCI function and one logical GPU index per
                # partition, the card's ASIC serial on each, uuid "<partition 0's uuid>:p<id>" on the others.
                part = k % spec.partitions
                if part == 0:
                    card = (uuid, pci, serial)
                uuid0, pci0, serial = card
                if part:
                    uuid, pci = f"{uuid0}:p{part}", f"{pci0[:-1]}{part}"
                compute, memory = spec.partition_modes
                partition = Partition(uuid0, str(part), compute or None, memory or None)
            dev = Device(
                vendor=entry.vendor,
                model=entry.model,
                index=index,
                uuid=uuid,
                pci_bus_id=pci,
                driver_version=_DRIVERS.get(entry.vendor),
                serial=serial,
                partition=partition,
            )
            mig = entry.mig if k == 0 else ()
            vgpu = entry.vgpu if k == entry.count - 1 else 0
            out.append(_SimDevice(dev, spec, entry, mig, vgpu))
    return tuple(out)


def _slice_layout(scenario: Scenario, dev: _SimDevice) -> list[tuple[str, str]]:
    """(slice_id, profile) of a device: MIG "<GI>/<CI>" ids as NVML numbers them on an A100-80GB, or
    vGPU share ids "0".."n-1"."""
    if dev.mig:
        out = []
        gi = {"7g.80gb": 0, "4g.40gb": 1, "3g.40gb": 2, "2g.20gb": 3, "1g.10gb": 9}
        used: set[int] = set()
        for p in dev.mig:
            g = gi[p]
            while g in used:
                g += 1
            used.add(g)
            out.append((f"{g}/0", p))
        return out
    return [(str(i), "vgpu") for i in range(dev.vgpu)]


def _select(devices: Sequence[_SimDevice], ev: TimelineEvent, key: str) -> _SimDevice:
    sel = ev.device
    vendor = ev.vendor
    if "/" in sel and vendor is None:
        vendor, sel = sel.split("/", 1)
    for d in devices:
        if d.device.uuid == sel:
            return d
    for d in devices:
        if d.index == sel and (vendor is None or d.vendor == vendor):
            return d
    raise ScenarioError(
        f"{key}: no simulated device {ev.device!r}" + (f" of vendor {vendor}" if vendor else "")
    )


# --------------------------------------------------------------------------------------------------------
# State over time (pure)


@dataclass(frozen=True)
class _Interval:
    start: float
    end: float  # math.inf while open


@dataclass
class _DeviceState:
    profile: str = "idle"
    storms: list[_Interval] = field(default_factory=list)
    dbe: int = 0
    xids: dict[str, int] = field(default_factory=dict)
    lost: bool = False
    overheat: bool = False
    health_fail: bool = False
    hung: bool = False
    pods: tuple[SimPod, ...] = ()
    slice_pods: dict[str, tuple[SimPod, ...]] = field(default_factory=dict)
    slice_profiles: dict[str, str] = field(default_factory=dict)


def _states_at(scenario: Scenario, devices: Sequence[_SimDevice], t: float) -> dict[str, _DeviceState]:
    states = {d.device.uuid: _DeviceState() for d in devices}
    for i, ev in enumerate(scenario.timeline):
        if ev.at > t:
            break
        dev = _select(devices, ev, f"timeline[{i}].device")
        st = states[dev.device.uuid]
        if ev.pods is not None:
            if ev.slice is None:
                st.pods = ev.pods
            else:
                st.slice_pods[ev.slice] = ev.pods
        if ev.profile is not None:
            if ev.slice is None:
                st.profile = ev.profile
            else:
                st.slice_profiles[ev.slice] = ev.profile
        f = ev.fault
        if f is None:
            continue
        if f == "clear":
            st.storms = [_Interval(s.start, min(s.end, ev.at)) for s in st.storms]
            st.lost = st.overheat = st.health_fail = st.hung = False
        elif f == "ecc_uncorrectable":
            st.dbe += 1
            st.xids["48"] = st.xids.get("48", 0) + 1
        elif f == "ecc_correctable_storm":
            if not any(s.end == math.inf for s in st.storms):
                st.storms.append(_Interval(ev.at, math.inf))
        elif f == "lost":
            st.lost = True
            st.xids["79"] = st.xids.get("79", 0) + 1
        elif f.startswith("xid:"):
            code = str(int(f[4:]))
            st.xids[code] = st.xids.get(code, 0) + 1
            if code == "79":
                st.lost = True
        elif f == "overheat":
            st.overheat = True
        elif f == "health_fail":
            st.health_fail = True
        elif f == "hung_backend":
            st.hung = True
    return states


@functools.lru_cache(maxsize=64)
def _noise_base(seed: int, uuid: str, step: int) -> Any:
    """sha256 state after ``seed, uuid, step`` (as ``_hex`` joins them): one device's noises in one poll
    hash only their field name on top of it (a copy), the same digest as hashing the whole string."""
    return hashlib.sha256(f"{seed}\x1f{uuid}\x1f{step}\x1f".encode())


def _noise(seed: int, uuid: str, step: int, what: str) -> float:
    """Deterministic uniform noise in [-1, 1] for (seed, device, poll step, field)."""
    h = _noise_base(seed, uuid, step).copy()
    h.update(what.encode())
    return int.from_bytes(h.digest()[:4], "big") / 0x7FFFFFFF - 1.0


@functools.lru_cache(maxsize=4096)
def _energy_offset(seed: int, uuid: str) -> float:
    """A device's energy counter at start, in joules (1 MJ plus a per-device offset)."""
    return 1_000_000.0 + int(_hex("e", seed, uuid)[:4], 16) * 100.0


@functools.lru_cache(maxsize=16)
def _zero_links(nvlinks: int) -> Mapping[tuple[str, str], int]:
    """Every NVLink error counter of a device with ``nvlinks`` links at 0 (shared: copy before use)."""
    return MappingProxyType({(str(link), typ): 0 for link in range(nvlinks) for typ in NVLINK_ERROR_TYPES})


def _clip(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return min(hi, max(lo, x))


STORM_ERRORS_PER_SECOND = 100


def simulate(scenario: Scenario, t: float) -> list[DeviceSample]:
    """Readings of every simulated device ``t`` seconds after start. Pure and deterministic."""
    devices = fleet_devices(scenario)
    states = _states_at(scenario, devices, t)
    step = int(t // scenario.poll_interval)
    return [_sample(scenario, d, states[d.device.uuid], t, step) for d in devices]


def _sample(scenario: Scenario, d: _SimDevice, st: _DeviceState, t: float, step: int) -> DeviceSample:
    m, p, seed, uuid = d.model, PROFILE_SPECS[st.profile], scenario.seed, d.device.uuid
    if st.lost:
        # As NVML does: the event thread counted the XID 79, so the count outlives the device's readings.
        return DeviceSample(
            d.device,
            up=False,
            error="GPU is lost (XID 79: fallen off the bus)",
            fault_events={**dict.fromkeys(m.fault_codes, 0), **st.xids} if m.fault_codes else {},
        )

    def r(x: float, nd: int = 4) -> float:
        return round(x, nd)

    def jitter(base: float, what: str, amp: float = 0.02) -> float:
        return _clip(base + amp * _noise(seed, uuid, step, what))

    util = jitter(p.util, "util", p.burst)
    part = d.device.partition
    # A partition > 0 of a DPX/NPS1 card: amd-smi prints half the card's memory as its total.
    memory = (
        m.memory_bytes / m.partitions if part is not None and part.partition_id != "0" else m.memory_bytes
    )
    mem_used = round(memory * jitter(p.memory, "mem", 0.01) / MIB) * MIB
    limit = m.power_limit_watts
    nominal_limit = limit if limit is not None else 350.0
    power = r(nominal_limit * jitter(p.power + 0.5 * (util - p.util) * p.power, "power"), 2)
    temp = p.temp + 2 * _noise(seed, uuid, step, "temp")
    clock_ratio = 0.15 if st.profile == "idle" else 0.55 + 0.45 * min(1.0, util + 0.2)
    throttle = dict.fromkeys(THROTTLE_REASONS, False) if m.throttle else {}
    if m.throttle and st.profile in ("idle", "idle_notebook"):
        throttle["gpu_idle"] = True
    if st.overheat:
        temp = 95.0 + _noise(seed, uuid, step, "temp")
        clock_ratio *= 0.6
        if m.throttle:
            throttle["hw_thermal"] = throttle["sw_thermal"] = True
    storms = sum(max(0.0, min(s.end, t) - s.start) for s in st.storms)
    corrected = 3 + int(storms * STORM_ERRORS_PER_SECOND)
    energy = r(nominal_limit * p.power * t + _energy_offset(seed, uuid), 1)
    temps: dict[str, float] = {}
    for sensor in m.temperatures:
        offset = {"core": 0.0, "hotspot": 8.0, "memory": 4.0}[sensor]
        temps[sensor] = r(temp + offset, 1)
    health = dict.fromkeys(m.health, not st.health_fail)
    if st.dbe and "memory" in health:
        health["memory"] = False
    has_power = m.chip_power and not (m.power_on_even_index_only and int(d.index) % 2 == 1)
    has_power = has_power and (part is None or part.partition_id == "0")
    slices = _slices(scenario, d, st, step)
    mig = bool(d.mig)
    device_mem = float(sum(s.memory_used_bytes or 0 for s in slices) if mig else mem_used)
    processes = _processes(scenario, d, st, slices, device_mem) if m.processes else None
    reading = _Reading(p, util, device_mem, memory, nominal_limit * p.power, processes or ())
    total = m.memory_total_reported if m.memory_total_reported is not None else memory
    extras = EXTRAS[m.extras](d, reading, lambda what: _noise(seed, uuid, step, what)) if m.extras else {}
    return DeviceSample(
        device=d.device,
        utilization_ratio=None if mig else r(util),
        sm_active_ratio=r(jitter(p.sm_active, "sm")) if m.prof else None,
        sm_occupancy_ratio=r(jitter(p.sm_occupancy, "occ")) if m.prof else None,
        tensor_active_ratio=r(jitter(p.tensor, "tensor")) if m.prof else None,
        memory_bandwidth_utilization_ratio=r(jitter(p.membw, "membw")),
        memory_used_bytes=None if m.memory_percent_only else device_mem,
        memory_total_bytes=None if m.memory_percent_only else float(total),
        memory_used_ratio=r(device_mem / memory) if m.memory_percent_only else None,
        temperatures_celsius=temps,
        power_watts=power if has_power else None,
        power_limit_watts=(limit if has_power else None),
        energy_joules=energy if has_power and m.energy else None,
        clocks_hertz=(
            {
                "graphics": r(m.max_clock_hertz * clock_ratio, -6),
                "sm": r(m.max_clock_hertz * clock_ratio, -6),
                "memory": m.memory_clock_hertz,
            }
            if m.clocks
            else {}
        ),
        clock_throttled=throttle,
        ecc_errors={"corrected": corrected, "uncorrected": st.dbe} if m.ecc else {},
        remapped_rows={"correctable": 0, "uncorrectable": st.dbe} if m.remap else {},
        remap_pending=(st.dbe > 0) if m.remap else None,
        remap_failed=False if m.remap else None,
        fault_events={**dict.fromkeys(m.fault_codes, 0), **st.xids} if m.fault_codes else {},
        pcie_replay_errors=0 if d.vendor not in ("huawei", "mthreads") else None,
        link_errors=dict(_zero_links(m.nvlinks)),
        health=health,
        slices=slices,
        vendor_metrics=extras,
        processes=processes,
    )


def resource_name(device: Device) -> str:
    """The device plugin resource a pod requests for ``device`` ("" for a vendor without one here)."""
    return MODEL_RESOURCE_NAMES.get(device.model) or RESOURCE_NAMES.get(device.vendor, "")


def container_id(seed: int, pod: SimPod) -> str:
    """The runtime container ID (64 hex) of a simulated container, as the pod list and cgroups name it."""
    return _hex("container", seed, pod.namespace, pod.pod, pod.container)


def pod_uid(seed: int, pod: SimPod) -> str:
    """The pod UID (dashed, as ``metadata.uid``) of a simulated pod."""
    h = _hex("pod", seed, pod.namespace, pod.pod)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def process_pid(seed: int, pod: SimPod) -> int:
    """The host PID of a simulated container's process on its device (one per container, 1000..60999)."""
    return 1000 + int(_hex("pid", seed, pod.namespace, pod.pod, pod.container)[:8], 16) % 60000


def _processes(
    scenario: Scenario, d: _SimDevice, st: _DeviceState, slices: Sequence[Slice], device_mem: float
) -> tuple[ProcessMemory, ...]:
    """One process per holding container, as the vendor's process list shows it: a slice's holders share
    its memory, a whole device's holders share what the device holds outside slices (the first container
    of a pod holds the larger part, as a server next to its warm-up sidecar does)."""
    out: dict[int, float] = {}

    def share(pods: Sequence[SimPod], held: float) -> None:
        if not pods:
            return
        weights = [2.0 if i == 0 else 1.0 for i in range(len(pods))]
        for pod, w in zip(pods, weights, strict=True):
            mib = round(held * w / sum(weights) / MIB)
            pid = process_pid(scenario.seed, pod)
            out[pid] = out.get(pid, 0.0) + float(mib * MIB)

    in_slices = 0.0
    for sl in slices:
        pods = st.slice_pods.get(sl.slice_id, ())
        share(pods, sl.memory_used_bytes or 0.0)
        in_slices += (sl.memory_used_bytes or 0.0) if pods else 0.0
    share(st.pods, max(0.0, device_mem - in_slices))
    return tuple(ProcessMemory(pid, used) for pid, used in sorted(out.items()))


@dataclass(frozen=True)
class _Reading:
    """What vendor-only metrics derive from: the profile and the device's readings this poll."""

    profile: ProfileSpec
    util: float
    memory_used: float
    memory_total: float
    power_watts: float
    processes: tuple[ProcessMemory, ...]


def _ascend(d: _SimDevice, x: _Reading, noise: Callable[[str], float]) -> dict[str, float]:
    """npu-smi's extra fields of a 910B chip (vendors/ascend/records.py)."""
    return {
        ascend.HEALTH_STATE.name: 0.0,
        ascend.ERROR_CODES_ACTIVE.name: 0.0,
        ascend.AICPU.name: round(_clip(0.02 + 0.05 * x.util + 0.01 * noise("aicpu")), 4),
        ascend.CTRLCPU.name: round(_clip(0.06 + 0.02 * noise("ctrlcpu")), 4),
        ascend.AICORE_FREQ.name: 1800e6 if x.util > 0.05 else 1000e6,
        ascend.AICORE_RATED_FREQ.name: 1800e6,
        ascend.DDR_USED.name: float(2 * GIB + round(512 * _clip(0.5 + 0.2 * noise("ddr"))) * MIB),
        ascend.DDR_TOTAL.name: float(16 * GIB),
        ascend.DDR_BANDWIDTH.name: round(_clip(0.05 + 0.1 * x.profile.membw), 4),
        ascend.PROCESSES.name: float(len(x.processes)),
        ascend.PROCESS_MEMORY.name: float(sum(p.memory_used_bytes or 0.0 for p in x.processes)),
    }


def _ascend310p(d: _SimDevice, x: _Reading, noise: Callable[[str], float]) -> dict[str, float]:
    """A 310P3 chip adds vector-core usage and, on the card's lowest chip, the card's power."""
    out = _ascend(d, x, noise)
    out[ascend.AICORE_FREQ.name] = 1080e6 if x.util > 0.05 else 600e6
    out[ascend.AICORE_RATED_FREQ.name] = 1080e6
    out[ascend.VECTORCORE.name] = round(_clip(0.6 * x.util + 0.02 * noise("vector")), 4)
    out[ascend.CARD_POWER.name] = round(20.0 + 50.0 * x.profile.power + noise("cardpower"), 2)
    return out


def _geforce(d: _SimDevice, x: _Reading, noise: Callable[[str], float]) -> dict[str, float]:
    """A GeForce board as the plain nvidia-smi table shows one: a fan that follows the load, P2 while busy
    and P8 idle, persistence off (the consumer default)."""
    return {
        FAN_SPEED: round(_clip(0.3 + 0.5 * x.util + 0.02 * noise("fan")), 2),
        PERFORMANCE_STATE: 2.0 if x.util > 0.05 else 8.0,
        PERSISTENCE_MODE: 0.0,
    }


EXTRAS: dict[str, Callable[[_SimDevice, _Reading, Callable[[str], float]], dict[str, float]]] = {
    # A100 SXM: passively cooled (fan N/A, no series), P0 even idle, persistence on (as in the captures)
    "a100": lambda d, x, n: {
        MIG_MODE: 1.0 if d.mig else 0.0,
        PROFILING_SUSPECT: 0.0,
        PERFORMANCE_STATE: 0.0,
        PERSISTENCE_MODE: 1.0,
    },
    "geforce": _geforce,
    "amd": lambda d, x, n: {AMD_ECC_DEFERRED.name: 0.0},
    "ascend": _ascend,
    "ascend310p": _ascend310p,
    "cambricon": lambda d, x, n: {CAMBRICON_ECC.name: 0.0},
    "enflame": lambda d, x, n: {ENFLAME_ECC.name: 1.0},
    # hy-smi --showmemavailable on a K100_AI prints 65438 MiB whatever the load (shared/fixtures/hygon
    # hy-smi_showmemavailable_K100_AIx8_65438MiB: the usable VRAM size, not what is free).
    "hygon": lambda d, x, n: {HYGON_MEMORY_AVAILABLE.name: float(65438 * MIB)},
    "kunlunxin": lambda d, x, n: {
        KUNLUNXIN_L3_USED.name: float(round(64 * _clip(x.profile.membw + 0.05)) * MIB),
        KUNLUNXIN_L3_TOTAL.name: float(64 * MIB),
    },
}
"""Vendor-only metrics by ``ModelSpec.extras``: the names the real backends declare, so the simulated fleet
emits every family of the catalog."""


def _slices(scenario: Scenario, d: _SimDevice, st: _DeviceState, step: int) -> tuple[Slice, ...]:
    seed, uuid = scenario.seed, d.device.uuid
    out = []
    for sid, profile in _slice_layout(scenario, d):
        p = PROFILE_SPECS[st.slice_profiles.get(sid, st.profile)]
        u = _clip(p.util + p.burst * _noise(seed, uuid, step, f"util/{sid}"))
        if d.mig:
            compute, gib = MIG_PROFILES[profile]
            total = float(gib * GIB)
            out.append(
                Slice(
                    parent_uuid=uuid,
                    slice_id=sid,
                    profile=profile,
                    kind="mig",
                    uuid="MIG-" + _uuid_for("mig", seed, uuid, int(sid.split("/")[0]))[0:36],
                    memory_used_bytes=float(round(total * _clip(p.memory) / MIB) * MIB),
                    memory_total_bytes=total,
                    compute_limit_ratio=compute / 7,
                    utilization_ratio=round(u, 4),
                    sm_active_ratio=round(
                        _clip(p.sm_active + 0.02 * _noise(seed, uuid, step, f"sm/{sid}")), 4
                    ),
                    sm_occupancy_ratio=round(
                        _clip(p.sm_occupancy + 0.02 * _noise(seed, uuid, step, f"o/{sid}")), 4
                    ),
                )
            )
        else:
            total = float(12 * GIB)
            out.append(
                Slice(
                    parent_uuid=uuid,
                    slice_id=sid,
                    profile=profile,
                    kind="vgpu",
                    memory_used_bytes=float(round(total * _clip(p.memory) / MIB) * MIB),
                    memory_total_bytes=total,
                    compute_limit_ratio=round(1 / d.vgpu, 4),
                    utilization_ratio=round(u / d.vgpu, 4),
                )
            )
    return tuple(out)


def pods_at(scenario: Scenario, t: float) -> dict[str, tuple[SimPod, ...]]:
    """Who holds what ``t`` seconds after start: ``{device uuid | MIG uuid | "<parent uuid>/<share id>":
    pods}`` (the key scheme of ``exporter.attribution``)."""
    devices = fleet_devices(scenario)
    states = _states_at(scenario, devices, t)
    out: dict[str, tuple[SimPod, ...]] = {}
    for d in devices:
        st = states[d.device.uuid]
        if st.pods:
            out[d.device.uuid] = st.pods
        for sid, _profile in _slice_layout(scenario, d):
            pods = st.slice_pods.get(sid)
            if not pods:
                continue
            if d.mig:
                key = "MIG-" + _uuid_for("mig", scenario.seed, d.device.uuid, int(sid.split("/")[0]))[0:36]
            else:
                key = f"{d.device.uuid}/{sid}"
            out[key] = pods
    return out


def hung_at(scenario: Scenario, t: float) -> bool:
    """Whether a ``hung_backend`` fault is active at ``t``."""
    devices = fleet_devices(scenario)
    return any(st.hung for st in _states_at(scenario, devices, t).values())


# --------------------------------------------------------------------------------------------------------
# The backend


class SimBackend:
    """The ``sim`` backend: ``sample()`` returns ``simulate(scenario, clock() - start)``.

    While a ``hung_backend`` fault is active, ``sample()`` blocks (re-checking every 0.2 s of real time)
    until the fault is cleared or ``close()`` is called; then it raises BackendError(reason="closed").
    """

    name = "sim"

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.time) -> None:
        self.scenario = scenario
        self._clock = clock
        self.start = clock()
        # Held at 0 until ``begin`` (scenario timeline_start: first_scrape); the exporter calls it on a scrape.
        self._held = scenario.timeline_start == "first_scrape"
        self._closed = threading.Event()
        self._event_times = [ev.at for ev in scenario.timeline]
        self._pods_cache: tuple[int, Mapping[str, tuple[SimPod, ...]]] | None = None
        self._pid_pods = {
            process_pid(scenario.seed, p): p for ev in scenario.timeline for p in (ev.pods or ())
        }
        # The pod mapping's status, read by every scrape (Collector.render_key): the fleet never changes and
        # the held devices only at a timeline event, so each is computed once, not per scrape (at 2,048
        # devices the per-scrape walk over the fleet was half the interpreter's time under back-to-back
        # scrapes, issue 36).
        self._unmatched: tuple[tuple[str, int], ...] | None = None
        self._reassigned: tuple[int, tuple[tuple[str, int], ...]] | None = None

    def elapsed(self) -> float:
        """Seconds into the timeline: 0 while held (``timeline_start: first_scrape`` before ``begin``)."""
        if self._held:
            return 0.0
        return max(0.0, self._clock() - self.start)

    def begin(self) -> None:
        """Start a held timeline now (the exporter's first scrape); later calls, or a timeline that was not
        held, change nothing. Any thread (one bool written once)."""
        if self._held:
            self.start = self._clock()
            self._held = False

    def open(self) -> None:
        self._closed.clear()

    def sample(self) -> Sequence[DeviceSample]:
        while hung_at(self.scenario, self.elapsed()):
            if self._closed.wait(0.2):
                raise BackendError("sim backend closed while hung", reason="closed")
        return simulate(self.scenario, self.elapsed())

    def pods(self, t: float | None = None) -> Mapping[str, tuple[SimPod, ...]]:
        """Sim pods at ``t`` seconds after start (default: now); recomputed only when a timeline event
        has passed since the last call."""
        t = self.elapsed() if t is None else t
        epoch = bisect.bisect_right(self._event_times, t)
        cached = self._pods_cache
        if cached is not None and cached[0] == epoch:
            return cached[1]
        pods = pods_at(self.scenario, t)
        self._pods_cache = (epoch, pods)
        return pods

    def process_pod(self, pid: int) -> SimPod | None:
        """The container whose process ``pid`` is (the stand-in for /proc/<pid>/cgroup), None for none."""
        return self._pid_pods.get(pid)

    def last_refresh(self) -> float:
        """Unix time of the last poll step: the simulated pod mapping refreshes with every poll."""
        interval = self.scenario.poll_interval
        return self.start + (self.elapsed() // interval) * interval

    def resources_unmatched(self) -> tuple[tuple[str, int], ...]:
        """(device plugin resource name, unmatched IDs) per simulated resource: always 0, nothing is lost.
        Computed once (the fleet is fixed)."""
        out = self._unmatched
        if out is None:
            names = {resource_name(d.device) for d in fleet_devices(self.scenario)}
            out = self._unmatched = tuple(sorted((r, 0) for r in names if r))
        return out

    def resources_reassigned(self, t: float | None = None) -> tuple[tuple[str, int], ...]:
        """(resource, reassigned IDs) for each resource of ``REASSIGNING_RESOURCES`` some pod holds a device
        of at ``t`` (default: now): always 0, the simulated plugin mounts the chips the kubelet recorded.
        The real exporter likewise counts only resources held by a pod its plugin annotated. Recomputed
        only when a timeline event has passed since the last call (as ``pods``)."""
        t = self.elapsed() if t is None else t
        epoch = bisect.bisect_right(self._event_times, t)
        cached = self._reassigned
        if cached is not None and cached[0] == epoch:
            return cached[1]
        held = {uuid for uuid, pods in self.pods(t).items() if pods}
        names = {resource_name(d.device) for d in fleet_devices(self.scenario) if d.device.uuid in held}
        out = tuple(sorted((r, 0) for r in names if r in REASSIGNING_RESOURCES))
        self._reassigned = (epoch, out)
        return out

    def close(self) -> None:
        self._closed.set()


def load_scenario(options: Mapping[str, Any]) -> Scenario:
    """The scenario from backend options: ``config`` (a YAML file path), then ``seed``/``node`` overrides."""
    path = options.get("config")
    text = ""
    if path:
        try:  # a regular file only (a FIFO never blocks the backend's open), bounded
            text = read_capped(Path(str(path)), MAX_SCENARIO_BYTES, follow_symlinks=True).decode("utf-8")
        except RefusedFile as exc:
            raise ScenarioError(f"sim config {path}: cannot read: {exc.why}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"sim config {path}: cannot read: {exc}") from exc
    try:
        scenario = parse_scenario(text)
    except ScenarioError as exc:
        raise ScenarioError(f"sim config {path}: {exc}" if path else str(exc)) from exc
    if options.get("seed") is not None:
        scenario = replace(scenario, seed=int(options["seed"]))
    if options.get("node"):
        scenario = replace(scenario, node=str(options["node"]))
    return scenario


def _create(ctx: BackendContext) -> SimBackend:
    return SimBackend(load_scenario(ctx.options), clock=ctx.clock)


register(
    BackendSpec(
        name="sim",
        vendor="sim",
        create=_create,
        detect=lambda ctx: Detection(True, "the simulator is always available (enable it by name)"),
        priority=1000,
        auto=False,
        default_interval_seconds=1.0,
        options={"config": "string", "seed": "int", "node": "string"},
    )
)
