"""NVIDIA backend over NVML (the `pynvml` module of nvidia-ml-py): per-device readings, MIG slices, XID events.

Errors are isolated per device and per field (NVML API reference, "Return values"): a field answering
NOT_SUPPORTED / NO_PERMISSION / FUNCTION_NOT_FOUND / NOT_FOUND is omitted for that device and never asked
again until the next re-initialisation; GPU_IS_LOST / RESET_REQUIRED / UNKNOWN makes that device
``DeviceSample.lost`` and leaves the others intact; UNINITIALIZED / DRIVER_NOT_LOADED /
LIB_RM_VERSION_MISMATCH (driver reloaded or upgraded) fail the poll with BackendError, shut NVML down and
re-initialise on a later poll with exponential backoff. XIDs come from an NVML event set waited on by a
daemon thread. The ``pynvml`` module is a constructor argument so tests pass a stand-in.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ProcessMemory, Slice
from xpuwatch.vendors.nvidia_fields import MIG_MODE, MIG_MODE_METRIC, VENDOR
from xpuwatch.vendors.nvidia_smi import CLOCK_EVENT_REASONS
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, register

log = logging.getLogger(__name__)

# NVML return codes (nvml.h; pynvml NVML_ERROR_*), fixed by the C ABI.
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND, DEPRECATED = 3, 4, 6, 13, 26
UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND = 1, 9, 18, 12
GPU_IS_LOST, RESET_REQUIRED, UNKNOWN, TIMEOUT = 15, 16, 999, 10
ABSENT_CODES = frozenset({NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND, DEPRECATED})
LOST_CODES = frozenset({GPU_IS_LOST, RESET_REQUIRED, UNKNOWN})
FATAL_CODES = frozenset({UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND})

UINT32_SENTINEL = 0xFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE_uint
UINT64_SENTINEL = 0xFFFFFFFFFFFFFFFF
EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError

# The XIDs counted under their own code label (docs.nvidia.com/deploy/xid-errors; nvidia.md §2): present at 0
# from the first poll; every other code is counted under "other" so the label set stays bounded.
KNOWN_XIDS: tuple[str, ...] = (
    "13",  # graphics engine exception (application)
    "31",  # GPU memory page fault (application)
    "32",  # invalid or corrupted push buffer stream
    "43",  # GPU stopped processing (application)
    "45",  # preemptive cleanup after a fault
    "48",  # double-bit ECC error
    "61",  # internal micro-controller breakpoint
    "62",  # internal micro-controller halt
    "63",  # ECC page retirement / row remapping event
    "64",  # ECC page retirement / row remapping failure
    "68",  # video processor exception
    "69",  # graphics engine class error
    "74",  # NVLink error
    "79",  # GPU has fallen off the bus
    "92",  # high single-bit ECC error rate
    "94",  # contained ECC error
    "95",  # uncontained ECC error
    "119",  # GSP RPC timeout
    "120",  # GSP error
    "140",  # unrecovered ECC error
    "154",  # GPU recovery action changed
)
OTHER_XID = "other"

NVLINK_COUNTERS: Mapping[str, int] = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS (nvml.h, R535+)
MAX_TEMPERATURE_C = 200.0  # anything above is a sensor sentinel, not a reading (DE #312: 644245923)


class _DeviceLost(Exception):
    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: NVML error {code}")
        self.code = code


class _Fatal(Exception):
    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: NVML error {code}")
        self.code = code


@dataclass
class _GpuState:
    """What one open() learned about one GPU, plus the fields it cannot answer (negative cache)."""

    index: int
    handle: Any
    device: Device
    unsupported: set[str] = field(default_factory=set)
    nvlinks: tuple[int, ...] | None = None
    supported_reasons: int | None = None
    profiles: dict[int, tuple[str, int]] = field(default_factory=dict)  # profile id -> (name, slices)
    total_slices: int | None = None  # GPU slices of the whole board (7 on A100/H100, 4 on A30)
    lost_at_open: str | None = None


class NvmlBackend:
    """NVML backend. ``nvml`` is the pynvml module (imported on first open when None).

    ``clock`` (monotonic seconds) drives the re-initialisation backoff: ``backoff_initial`` doubling to
    ``backoff_max``. ``xid_wait_ms`` is the event-wait timeout of the XID thread (bounds ``close``).
    """

    name = "nvml"

    def __init__(
        self,
        nvml: ModuleType | Any | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        xid_wait_ms: int = 500,
        xid_events: bool = True,
    ) -> None:
        self._nvml = nvml
        self._clock = clock
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._backoff = 0.0
        self._retry_at = 0.0
        self._xid_wait_ms = xid_wait_ms
        self._xid_enabled = xid_events
        self._gpus: list[_GpuState] | None = None
        self._driver: str | None = None
        self._xid_lock = threading.Lock()
        self._xids: dict[str, dict[str, int]] = {}  # uuid -> code -> count; survives re-initialisation
        self._xid_thread: threading.Thread | None = None
        self._xid_stop = threading.Event()
        self._event_set: Any = None
        self._handle_to_uuid: dict[Any, str] = {}
        self._known: dict[
            str, Device
        ] = {}  # every GPU seen since start, by uuid (survives re-initialisation)

    # ------------------------------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Initialise NVML and enumerate GPUs. Raises BackendError(reason="init") on failure or while backing off."""
        if self._gpus is not None:
            return
        now = self._clock()
        if now < self._retry_at:
            raise BackendError(f"NVML re-initialisation backing off for {self._retry_at - now:.1f}s", "init")
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._schedule_retry()
            raise BackendError(f"nvmlInit failed: {exc} (code {_code(exc)})", "init") from exc
        try:
            self._driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            self._driver = None
        try:
            n = int(nvml.nvmlDeviceGetCount())
            self._gpus = [self._enumerate(i) for i in range(n)]
        except (nvml.NVMLError, _Fatal) as exc:
            self._shutdown()
            self._schedule_retry()
            raise BackendError(f"NVML device enumeration failed: {exc}", "init") from exc
        self._backoff = 0.0
        self._retry_at = 0.0
        with self._xid_lock:
            for g in self._gpus:
                self._xids.setdefault(g.device.uuid, {code: 0 for code in (*KNOWN_XIDS, OTHER_XID)})
        if self._xid_enabled:
            self._start_xid_thread()

    def close(self) -> None:
        """Stop the XID thread and shut NVML down; never raises."""
        self._shutdown()

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py; never the deprecated `pynvml` distribution
            except ImportError as exc:
                raise BackendError(
                    f"pynvml (nvidia-ml-py) not importable: {exc}; pip install 'xpuwatch[nvidia]'", "library"
                ) from exc
            self._nvml = pynvml
        return self._nvml

    def _schedule_retry(self) -> None:
        self._backoff = (
            self._backoff_initial if not self._backoff else min(self._backoff * 2, self._backoff_max)
        )
        self._retry_at = self._clock() + self._backoff

    def _shutdown(self) -> None:
        self._xid_stop.set()
        thread, self._xid_thread = self._xid_thread, None
        if thread is not None:
            thread.join(timeout=self._xid_wait_ms / 1000 + 2)
        nvml = self._nvml
        if nvml is not None and self._event_set is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(self._event_set)
        self._event_set = None
        if nvml is not None and self._gpus is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
        self._gpus = None

    def _enumerate(self, i: int) -> _GpuState:
        nvml = self._nvml
        assert nvml is not None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as exc:
            code = _code(exc)
            if code in FATAL_CODES:
                raise _Fatal(code, f"GPU {i} handle") from exc
            # Known to exist (counted) but not answering: keep it visible as lost under a stable placeholder.
            dev = Device(vendor=VENDOR, model="unknown", index=str(i), uuid=f"nvidia-gpu-index-{i}")
            return _GpuState(i, None, dev, lost_at_open=f"NVML error {code} at enumeration")
        name = self._optional(lambda: _text(nvml.nvmlDeviceGetName(handle))) or "NVIDIA GPU"
        pci = self._optional(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        serial = self._optional(lambda: _text(nvml.nvmlDeviceGetSerial(handle)))
        dev = Device(
            vendor=VENDOR,
            model=name,
            index=str(i),
            uuid=uuid,
            pci_bus_id=pci,
            driver_version=self._driver,
            serial=serial,
        )
        return _GpuState(i, handle, dev)

    def _optional(self, fn: Callable[[], str]) -> str | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            v = fn()
        except nvml.NVMLError:
            return None
        return v.strip() or None if isinstance(v, str) else None

    # ------------------------------------------------------------------------------------------ polling

    def sample(self) -> Sequence[DeviceSample]:
        """Read every GPU. Raises BackendError(reason="library") on a library-wide failure (then NVML is
        re-initialised, with backoff, at a later poll) and BackendError(reason="init") while backing off."""
        if self._gpus is None:
            self.open()
        gpus = self._gpus
        assert gpus is not None
        out: list[DeviceSample] = []
        try:
            for g in gpus:
                out.append(self._sample_gpu(g))
        except _Fatal as exc:
            self._shutdown()
            self._schedule_retry()
            raise BackendError(f"NVML failed library-wide ({exc}); re-initialising", "library") from exc
        # A GPU that fell off the bus may no longer be enumerated after a re-initialisation: keep it
        # visible as lost (accelerator_up 0) instead of letting its series vanish.
        seen = {s.device.uuid for s in out}
        for uuid, dev in self._known.items():
            if uuid not in seen:
                with self._xid_lock:
                    xids = dict(self._xids.get(uuid, {}))
                out.append(replace(DeviceSample.lost(dev, "no longer enumerated by NVML"), fault_events=xids))
        for s in out:
            if s.up:  # not placeholders of GPUs lost before enumeration: they have no real identity
                self._known[s.device.uuid] = s.device
        return out

    def _sample_gpu(self, g: _GpuState) -> DeviceSample:
        with self._xid_lock:
            xids = dict(self._xids.get(g.device.uuid, {}))
        if g.lost_at_open is not None:
            return replace(DeviceSample.lost(g.device, g.lost_at_open), fault_events=xids)
        try:
            return replace(self._read(g), fault_events=xids)
        except _DeviceLost as exc:
            return replace(DeviceSample.lost(g.device, str(exc)), fault_events=xids)

    def _call(self, g: _GpuState, key: str, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        """``nvml.<fn_name>(*args)`` for one field of one GPU, with the per-field error policy. None = absent."""
        if key in g.unsupported:
            return None
        nvml = self._nvml
        assert nvml is not None
        try:
            if fn_name == "_field_value":
                return _field_value(nvml, *args)
            return getattr(nvml, fn_name)(*args, **kwargs)
        except nvml.NVMLError as exc:
            code = _code(exc)
            if code in ABSENT_CODES:
                g.unsupported.add(key)
                return None
            if code in LOST_CODES:
                raise _DeviceLost(code, key) from exc
            if code in FATAL_CODES:
                raise _Fatal(code, key) from exc
            return None  # transient (TIMEOUT, NO_DATA, NOT_READY, ...): absent this poll, asked again next
        except AttributeError:
            g.unsupported.add(key)  # this pynvml predates the call
            return None

    def _read(self, g: _GpuState) -> DeviceSample:
        nvml = self._nvml
        assert nvml is not None
        h = g.handle
        util = self._call(g, "utilization", "nvmlDeviceGetUtilizationRates", h)
        mem = self._memory(g, h)
        temps: dict[str, float] = {}
        core = self._temperature(g, h)
        if core is not None:
            temps["core"] = core
        mem_temp = self._call(g, "memory_temp", "_field_value", h, 82)  # NVML_FI_DEV_MEMORY_TEMP
        if _plausible_temp(mem_temp):
            temps["memory"] = float(mem_temp)
        power = _scaled(self._call(g, "power", "nvmlDeviceGetPowerUsage", h), 1e-3)
        limit = _scaled(self._call(g, "power_limit", "nvmlDeviceGetEnforcedPowerLimit", h), 1e-3)
        energy = _scaled(self._call(g, "energy", "nvmlDeviceGetTotalEnergyConsumption", h), 1e-3, bits=64)
        clocks: dict[str, float] = {}
        for domain, clock_type in (("graphics", 0), ("sm", 1), ("memory", 2)):  # NVML_CLOCK_GRAPHICS/SM/MEM
            hz = _scaled(self._call(g, f"clock_{domain}", "nvmlDeviceGetClockInfo", h, clock_type), 1e6)
            if hz is not None:
                clocks[domain] = hz
        ecc: dict[str, int] = {}
        for kind, err_type in (("corrected", 0), ("uncorrected", 1)):
            v = self._call(
                g, f"ecc_{kind}", "nvmlDeviceGetTotalEccErrors", h, err_type, 0
            )  # NVML_VOLATILE_ECC
            if _valid_count(v, bits=64):
                ecc[kind] = int(v)
        remapped, pending, failed = self._remap(g, h)
        replay = self._call(g, "pcie_replay", "nvmlDeviceGetPcieReplayCounter", h)
        mig_mode, slices = self._mig(g, h)
        vendor: dict[str, float] = {}
        if mig_mode is not None:
            vendor[MIG_MODE] = float(mig_mode)
        return DeviceSample(
            device=g.device,
            utilization_ratio=_percent(getattr(util, "gpu", None)) if util is not None else None,
            memory_bandwidth_utilization_ratio=(
                _percent(getattr(util, "memory", None)) if util is not None else None
            ),
            memory_used_bytes=mem[0],
            memory_total_bytes=mem[1],
            temperatures_celsius=temps,
            power_watts=power,
            power_limit_watts=limit,
            energy_joules=energy,
            clocks_hertz=clocks,
            clock_throttled=self._clock_events(g, h),
            ecc_errors=ecc,
            remapped_rows=remapped,
            remap_pending=pending,
            remap_failed=failed,
            pcie_replay_errors=int(replay) if _valid_count(replay) else None,
            link_errors=self._nvlink(g, h),
            vendor_metrics=vendor,
            slices=slices,
            processes=self._processes(g, h),
        )

    def _processes(self, g: _GpuState, h: Any) -> tuple[ProcessMemory, ...] | None:
        """Compute and graphics processes (nvmlDeviceGetComputeRunningProcesses / ...GraphicsRunningProcesses),
        one entry per host PID: a process in both lists holds one allocation, reported in both, so the larger
        value is taken, never the sum. None when neither list can be read (MIG parent without admin rights:
        NO_PERMISSION)."""
        lists = [
            self._call(g, "processes_compute", "nvmlDeviceGetComputeRunningProcesses", h),
            self._call(g, "processes_graphics", "nvmlDeviceGetGraphicsRunningProcesses", h),
        ]
        if all(x is None for x in lists):
            return None
        used: dict[int, float | None] = {}
        for procs in lists:
            for p in procs or ():
                raw_pid: Any = getattr(p, "pid", None)
                if not _valid_count(raw_pid) or raw_pid == 0:
                    continue
                pid = int(raw_pid)
                mem: Any = getattr(p, "usedGpuMemory", None)
                value = float(mem) if _valid_count(mem, bits=64) else None
                prev = used.get(pid)
                used[pid] = value if prev is None else max(prev, value if value is not None else prev)
        return tuple(ProcessMemory(pid, m) for pid, m in sorted(used.items()))

    def _memory(self, g: _GpuState, h: Any) -> tuple[float | None, float | None]:
        nvml = self._nvml
        assert nvml is not None
        version = getattr(nvml, "nvmlMemory_v2", None)
        info = None
        if version is not None:
            # v2 reports `used` without the driver-reserved memory, as nvidia-smi does since R510.
            info = self._call(g, "memory_v2", "nvmlDeviceGetMemoryInfo", h, version=version)
        if info is None:
            info = self._call(g, "memory", "nvmlDeviceGetMemoryInfo", h)
        if info is None:
            return None, None
        used: Any = getattr(info, "used", None)
        total: Any = getattr(info, "total", None)
        ok_total = _valid_count(total, bits=64) and total > 0
        ok_used = _valid_count(used, bits=64) and (not ok_total or used <= total)
        return (float(used) if ok_used else None), (float(total) if ok_total else None)

    def _temperature(self, g: _GpuState, h: Any) -> float | None:
        nvml = self._nvml
        assert nvml is not None
        t = None
        if hasattr(nvml, "nvmlDeviceGetTemperatureV"):
            t = self._call(g, "temperature_v", "nvmlDeviceGetTemperatureV", h, 0)
        if t is None:  # TemperatureV missing from this driver/binding: the deprecated call
            t = self._call(g, "temperature", "nvmlDeviceGetTemperature", h, 0)
        return float(t) if _plausible_temp(t) else None

    def _clock_events(self, g: _GpuState, h: Any) -> dict[str, bool]:
        nvml = self._nvml
        assert nvml is not None
        if g.supported_reasons is None and "reasons_supported" not in g.unsupported:
            sup = self._call(g, "reasons_supported", "nvmlDeviceGetSupportedClocksEventReasons", h)
            if sup is None:
                sup = self._call(g, "reasons_supported_old", "nvmlDeviceGetSupportedClocksThrottleReasons", h)
            g.supported_reasons = int(sup) if _valid_count(sup, bits=64) else 0x1FF
        mask = self._call(g, "reasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:
            mask = self._call(g, "reasons_old", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if not _valid_count(mask, bits=64):
            return {}
        supported = g.supported_reasons if g.supported_reasons is not None else 0x1FF
        return {name: bool(int(mask) & bit) for name, bit in CLOCK_EVENT_REASONS.items() if supported & bit}

    def _remap(self, g: _GpuState, h: Any) -> tuple[dict[str, int], bool | None, bool | None]:
        nvml = self._nvml
        assert nvml is not None
        rows = self._call(g, "remapped_rows", "nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corr, unc, pending, failure = rows
            got = {k: int(v) for k, v in (("correctable", corr), ("uncorrectable", unc)) if _valid_count(v)}
            return got, bool(pending), bool(failure)
        # Pre-Ampere GPUs retire pages instead of remapping rows.
        got = {}
        for kind, cause in (("correctable", 0), ("uncorrectable", 1)):
            pages = self._call(g, f"retired_{kind}", "nvmlDeviceGetRetiredPages", h, cause)
            if pages is not None:
                got[kind] = len(pages)
        if not got:
            return {}, None, None
        pend = self._call(g, "retired_pending", "nvmlDeviceGetRetiredPagesPendingStatus", h)
        return got, (bool(pend) if pend is not None else None), None

    def _nvlink(self, g: _GpuState, h: Any) -> dict[tuple[str, str], int]:
        nvml = self._nvml
        assert nvml is not None
        if g.nvlinks is None:
            # Probe once per open: links that answer and are active (NVML_FEATURE_ENABLED).
            links = []
            for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
                state = self._call(g, f"nvlink_state_{link}", "nvmlDeviceGetNvLinkState", h, link)
                if state == 1:
                    links.append(link)
                if state is None and link == 0:
                    break  # no NVLink on this GPU
            g.nvlinks = tuple(links)
            g.unsupported.difference_update({f"nvlink_state_{lk}" for lk in range(NVLINK_MAX_LINKS)})
        out: dict[tuple[str, str], int] = {}
        for link in g.nvlinks:
            for kind, counter in NVLINK_COUNTERS.items():
                v = self._call(
                    g,
                    f"nvlink_{link}_{kind}",
                    "nvmlDeviceGetNvLinkErrorCounter",
                    h,
                    link,
                    counter,
                )
                if _valid_count(v, bits=64):
                    out[(str(link), kind)] = int(v)
        return out

    def _mig(self, g: _GpuState, h: Any) -> tuple[int | None, tuple[Slice, ...]]:
        nvml = self._nvml
        assert nvml is not None
        mode = self._call(g, "mig_mode", "nvmlDeviceGetMigMode", h)
        if mode is None:
            return None, ()
        current = int(mode[0])
        if current != 1:  # NVML_DEVICE_MIG_ENABLE
            return current, ()
        n = self._call(g, "mig_count", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
        slices = []
        for i in range(int(n)):
            s = self._mig_slice(g, h, i)
            if s is not None:
                slices.append(s)
        return current, tuple(slices)

    def _mig_slice(self, g: _GpuState, h: Any, i: int) -> Slice | None:
        nvml = self._nvml
        assert nvml is not None
        try:
            mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except nvml.NVMLError as exc:
            code = _code(exc)
            if code in LOST_CODES:
                raise _DeviceLost(code, "mig handle") from exc
            if code in FATAL_CODES:
                raise _Fatal(code, "mig handle") from exc
            return None  # NOT_FOUND: no MIG device at this index
        try:
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mh))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(mh))
            mig_uuid = _text(nvml.nvmlDeviceGetUUID(mh))
        except nvml.NVMLError as exc:
            code = _code(exc)
            if code in LOST_CODES:
                raise _DeviceLost(code, "mig identity") from exc
            if code in FATAL_CODES:
                raise _Fatal(code, "mig identity") from exc
            return None
        used = total = None
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(mh)
            used = float(info.used) if _valid_count(info.used, bits=64) else None
            total = float(info.total) if _valid_count(info.total, bits=64) else None
        except nvml.NVMLError as exc:
            if _code(exc) in FATAL_CODES:
                raise _Fatal(_code(exc), "mig memory") from exc
        profile, slices = self._profile(g, h, mh, gi)
        whole = self._total_slices(g, h)
        return Slice(
            parent_uuid=g.device.uuid,
            slice_id=f"{gi}/{ci}",
            profile=profile,
            kind="mig",
            uuid=mig_uuid,
            memory_used_bytes=used,
            memory_total_bytes=total,
            compute_limit_ratio=slices / whole if slices and whole and slices <= whole else None,
        )

    def _profile(self, g: _GpuState, h: Any, mh: Any, gi: int) -> tuple[str, int | None]:
        """The GI profile's own name ("1g.10gb") and GPU-slice count, from nvmlGpuInstanceGetInfo -> profile
        info by id (cached per profile id).

        Falls back to "<slices>g.<GiB>gb" from the MIG device attributes (that can read "7g.79gb" for 7g.80gb,
        DE #713, hence only a fallback), then "unknown"."""
        nvml = self._nvml
        assert nvml is not None
        with contextlib.suppress(nvml.NVMLError, AttributeError):
            profile_id = int(nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(h, gi)).profileId)
            if profile_id in g.profiles:
                return g.profiles[profile_id]
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfoById(h, profile_id)
            name = _text(info.name).strip()
            name = name[4:] if name.startswith("MIG ") else name
            if name:
                g.profiles[profile_id] = (name, int(info.sliceCount))
                return g.profiles[profile_id]
        with contextlib.suppress(nvml.NVMLError, AttributeError):
            attrs = nvml.nvmlDeviceGetAttributes(mh)
            slices = int(attrs.gpuInstanceSliceCount)
            return f"{slices}g.{round(int(attrs.memorySizeMB) / 1024)}gb", slices
        return "unknown", None

    def _total_slices(self, g: _GpuState, h: Any) -> int:
        """GPU slices of the whole board: the largest sliceCount among the GI profiles it supports (probed
        once per initialisation with nvmlDeviceGetGpuInstanceProfileInfo over NVML_GPU_INSTANCE_PROFILE_*)."""
        if g.total_slices is None:
            nvml = self._nvml
            assert nvml is not None
            best = 0
            for index in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18))):
                with contextlib.suppress(nvml.NVMLError, AttributeError):
                    best = max(best, int(nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index).sliceCount))
            g.total_slices = best
        return g.total_slices

    # ------------------------------------------------------------------------------------------ XID events

    def _start_xid_thread(self) -> None:
        nvml = self._nvml
        assert nvml is not None and self._gpus is not None
        try:
            event_set = nvml.nvmlEventSetCreate()
        except (nvml.NVMLError, AttributeError) as exc:
            log.warning("NVML event set unavailable, XIDs not counted: %s", exc)
            return
        registered = 0
        self._handle_to_uuid = {}
        for g in self._gpus:
            if g.handle is None:
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(g.handle, EVENT_XID, event_set)
                registered += 1
            except nvml.NVMLError as exc:  # e.g. NOT_SUPPORTED on some GeForce boards: that GPU only
                log.info("XID events not available on GPU %s: %s", g.device.index, exc)
            self._handle_to_uuid[_handle_key(g.handle)] = g.device.uuid
        self._event_set = event_set
        if not registered:
            return
        self._xid_stop = threading.Event()
        self._xid_thread = threading.Thread(
            target=self._xid_loop, args=(event_set, self._xid_stop), name="xpuwatch-nvml-xid", daemon=True
        )
        self._xid_thread.start()

    def _xid_loop(self, event_set: Any, stop: threading.Event) -> None:
        nvml = self._nvml
        assert nvml is not None
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        while not stop.is_set():
            try:
                data = wait(event_set, self._xid_wait_ms)
            except nvml.NVMLError as exc:
                code = _code(exc)
                if code == TIMEOUT:
                    continue  # no event within the wait: the normal case
                if code in FATAL_CODES:
                    log.warning("NVML event wait stopped: %s", exc)
                    return
                stop.wait(min(1.0, self._xid_wait_ms / 1000))
                continue
            except Exception as exc:  # a stand-in or a broken binding must not kill the exporter
                log.warning("NVML event wait failed: %s", exc)
                stop.wait(1.0)
                continue
            if int(getattr(data, "eventType", EVENT_XID)) & EVENT_XID:
                self.record_xid(self._event_uuid(data.device), int(data.eventData))

    def _event_uuid(self, handle: Any) -> str | None:
        uuid = self._handle_to_uuid.get(_handle_key(handle))
        if uuid is None and self._nvml is not None:
            with contextlib.suppress(Exception):
                uuid = _text(self._nvml.nvmlDeviceGetUUID(handle))
        return uuid

    def record_xid(self, uuid: str | None, code: int) -> None:
        """Count one XID for a GPU (thread-safe). Unknown GPUs are ignored; codes outside KNOWN_XIDS count as "other"."""
        if uuid is None:
            return
        label = str(code) if str(code) in KNOWN_XIDS else OTHER_XID
        with self._xid_lock:
            counts = self._xids.setdefault(uuid, {c: 0 for c in (*KNOWN_XIDS, OTHER_XID)})
            counts[label] = counts.get(label, 0) + 1

    def xid_thread_alive(self) -> bool:
        return self._xid_thread is not None and self._xid_thread.is_alive()


# ---------------------------------------------------------------------------------------------- values


def _code(exc: BaseException) -> int:
    v = getattr(exc, "value", None)
    return int(v) if isinstance(v, int) else UNKNOWN


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)


def _valid_count(v: Any, bits: int = 32) -> bool:
    if isinstance(v, bool) or not isinstance(v, int):
        return False
    return 0 <= v < (UINT32_SENTINEL if bits == 32 else UINT64_SENTINEL) and not (
        bits == 64 and v == UINT32_SENTINEL
    )


def _scaled(v: Any, factor: float, bits: int = 32) -> float | None:
    return float(v) * factor if _valid_count(v, bits) else None


def _percent(v: Any) -> float | None:
    return v / 100.0 if _valid_count(v) and v <= 100 else None


def _plausible_temp(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and -40 <= v <= MAX_TEMPERATURE_C


def _field_value(nvml: Any, handle: Any, field_id: int) -> float | int | None:
    """nvmlDeviceGetFieldValues for one field; the per-field nvmlReturn is raised like a call's error."""
    values = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
    fv = values[0]
    ret = int(getattr(fv, "nvmlReturn", 0))
    if ret != 0:
        raise nvml.NVMLError(ret)
    kind = int(fv.valueType)
    v = fv.value
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(kind)
    if attr is None:
        return None
    out = getattr(v, attr)
    if kind == 1 and out == UINT32_SENTINEL:
        return None
    return out  # type: ignore[no-any-return]


def _handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML device handle (a ctypes pointer in pynvml; any object in stand-ins)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        try:
            hash(handle)
        except TypeError:
            return id(handle)
        return handle


# ---------------------------------------------------------------------------------------------- registry


def _create(ctx: BackendContext) -> NvmlBackend:
    opts = ctx.options
    return NvmlBackend(
        backoff_initial=float(opts.get("backoff_initial_seconds", 1.0)),
        backoff_max=float(opts.get("backoff_max_seconds", 60.0)),
        xid_wait_ms=int(opts.get("xid_wait_ms", 500)),
        xid_events=bool(opts.get("xid_events", True)),
    )


def detect(ctx: BackendContext, module: Any = None) -> Detection:
    """Found when pynvml imports and nvmlInit succeeds with at least one GPU."""
    nvml: Any = module
    if nvml is None:
        try:
            import pynvml
        except ImportError as exc:
            return Detection(
                False, f"pynvml (nvidia-ml-py) not importable: {exc}; pip install 'xpuwatch[nvidia]'"
            )
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound on hosts without the driver, and the like
        return Detection(False, f"nvmlInit failed: {exc}")
    try:
        n = int(nvml.nvmlDeviceGetCount())
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception as exc:
        return Detection(False, f"NVML initialised but could not list GPUs: {exc}")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    if n == 0:
        return Detection(False, f"NVML (driver {driver}) sees no GPUs")
    return Detection(True, f"NVML driver {driver}, {n} GPU(s)")


SPEC = register(
    BackendSpec(
        name="nvml",
        vendor=VENDOR,
        create=_create,
        detect=detect,
        metrics=(MIG_MODE_METRIC,),
        priority=10,
        supersedes=("nvidia-smi",),
        reads_library=True,
        options={
            "backoff_initial_seconds": "seconds",
            "backoff_max_seconds": "seconds",
            "xid_wait_ms": "int",
            "xid_events": "bool",
        },
    )
)
