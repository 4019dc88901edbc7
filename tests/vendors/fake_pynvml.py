"""Stand-in for the `pynvml` module (NVML boundary) used by the NVML backend tests.

Follows nvidia-ml-py 13.x ``pynvml.py`` and the NVML API reference (docs.nvidia.com/deploy/nvml-api):
the same function names and signatures, return shapes (structs with the same attribute names, tuples/lists
where pynvml returns them) and units (power in mW, energy in mJ, memory in bytes, clocks in MHz,
utilization in percent, temperatures in degrees C). Errors are raised as ``NVMLError(code)``, which like
pynvml's maps each code to a generated subclass (``NVMLError_GpuIsLost``, ...) carrying ``.value``.

Each ``FakeGpu`` holds its readings; ``errors`` maps a function name to an NVML return code raised for that
GPU only (``"*"`` = every per-device call). ``calls`` counts calls per (function, gpu index) so tests can
check negative caching. ``init_error`` makes ``nvmlInit`` fail; ``library_error`` makes every call fail with
that code (driver unloaded / upgraded). XID events are queued with ``inject_xid``.
"""

from __future__ import annotations

import queue
import string
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_DEVICE_MIG_ENABLE = 1
nvmlMemory_v2 = 0x02000028
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksEventReasonAll = 0x1FF


class NVMLError(Exception):
    """``NVMLError(code)`` returns the code's subclass, as pynvml's ``NVMLError.__new__`` does."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - mirrors pynvml
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return f"NVML error {self.value}"


for _name, _val in list(globals().items()):
    if _name.startswith("NVML_ERROR_"):
        _cls_name = "NVMLError_" + string.capwords(_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        _cls = type(_cls_name, (NVMLError,), {})
        globals()[_cls_name] = _cls
        NVMLError._valClassMapping[_val] = _cls


@dataclass
class FakeMig:
    """One MIG device (GPU instance + compute instance) as NVML shows it."""

    gi: int
    ci: int
    uuid: str
    profile_id: int
    profile_name: str  # as nvmlGpuInstanceProfileInfo_v2.name: "MIG 1g.10gb"
    memory_total: int  # bytes
    memory_used: int
    slice_count: int = 1


@dataclass(eq=False)
class FakeGpu:
    """One physical GPU. Units as NVML returns them."""

    index: int
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    pci_bus_id: str = "00000000:07:00.0"
    serial: str = "1320000000000"
    util_gpu: int = 87  # %
    util_memory: int = 41  # %
    memory_total: int = 85899345920  # bytes
    memory_used: int = 21474836480
    temperature: int = 61  # C
    memory_temperature: int | None = 70  # C; None = field not supported
    power_mw: int = 312500
    power_limit_mw: int = 400000
    energy_mj: int = 123456789
    clocks_mhz: dict[int, int] = field(default_factory=lambda: {0: 1410, 1: 1410, 2: 1593})
    clock_reasons: int = 0x4  # sw_power_cap
    clock_reasons_supported: int = 0x1FF
    ecc: dict[int, int] = field(default_factory=lambda: {0: 3, 1: 0})  # corrected, uncorrected (volatile)
    remapped_rows: tuple[int, int, int, int] | None = (2, 0, 0, 0)  # None = pre-Ampere
    retired_pages: dict[int, list[int]] = field(default_factory=lambda: {0: [], 1: []})
    retired_pending: int = 0
    pcie_replay: int = 5
    nvlinks: dict[int, dict[int, int]] = field(default_factory=dict)  # link -> counter -> value
    mig_mode: int | None = 0  # None = NOT_SUPPORTED
    migs: list[FakeMig] = field(default_factory=list)
    # Running processes as (pid, usedGpuMemory bytes or None): pynvml returns nvmlProcessInfo objects with
    # pid/usedGpuMemory/gpuInstanceId/computeInstanceId and sets usedGpuMemory to None where NVML reports
    # NVML_VALUE_NOT_AVAILABLE. A process that both computes and draws is listed by both calls.
    compute_processes: list[tuple[int, int | None]] = field(default_factory=list)
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _MigHandle:
    parent: int
    slot: int


class FakeNvml:
    """A module-like object: ``backend = NvmlBackend(nvml=FakeNvml(gpus))``."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    nvmlMemory_v2 = nvmlMemory_v2
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def __init__(self, gpus: list[FakeGpu], driver: str = "550.54.15") -> None:
        self.gpus = gpus
        self.driver = driver
        self.initialised = False
        self.init_calls = 0
        self.init_error: int | None = None
        self.library_error: int | None = None
        self.calls: Counter[tuple[str, int]] = Counter()
        self.events: queue.Queue[SimpleNamespace] = queue.Queue()
        self.registered: list[int] = []
        for name, val in globals().items():
            if name.startswith("NVMLError_"):
                setattr(self, name, val)

    # -- library
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.initialised = False

    def _lib(self) -> None:
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if self.library_error is not None:
            raise NVMLError(self.library_error)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._lib()
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._lib()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        self._lib()
        if not 0 <= i < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[i]

    def _dev(self, fn: str, h: Any) -> FakeGpu:
        self._lib()
        gpu = self.gpus[h.parent] if isinstance(h, _MigHandle) else h
        self.calls[(fn, gpu.index)] += 1
        code = gpu.errors.get(fn, gpu.errors.get("*"))
        if code is not None:
            raise NVMLError(code)
        return gpu

    # -- identity
    def nvmlDeviceGetUUID(self, h: Any) -> str:
        gpu = self._dev("nvmlDeviceGetUUID", h)
        if isinstance(h, _MigHandle):
            return gpu.migs[h.slot].uuid
        return gpu.uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._dev("nvmlDeviceGetName", h).name

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=self._dev("nvmlDeviceGetPciInfo", h).pci_bus_id)

    def nvmlDeviceGetSerial(self, h: FakeGpu) -> str:
        return self._dev("nvmlDeviceGetSerial", h).serial

    # -- readings
    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        g = self._dev("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> SimpleNamespace:
        g = self._dev("nvmlDeviceGetMemoryInfo", h)
        if isinstance(h, _MigHandle):
            m = g.migs[h.slot]
            return SimpleNamespace(
                total=m.memory_total, used=m.memory_used, free=m.memory_total - m.memory_used
            )
        reserved = 536870912 if version else 0
        return SimpleNamespace(
            total=g.memory_total,
            reserved=reserved,
            used=g.memory_used,
            free=g.memory_total - g.memory_used - reserved,
        )

    def nvmlDeviceGetTemperatureV(self, h: FakeGpu, sensor: int) -> int:
        return self._dev("nvmlDeviceGetTemperatureV", h).temperature

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        return self._dev("nvmlDeviceGetTemperature", h).temperature

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[int]) -> list[SimpleNamespace]:
        g = self._dev("nvmlDeviceGetFieldValues", h)
        out = []
        for fid in field_ids:
            if fid == NVML_FI_DEV_MEMORY_TEMP and g.memory_temperature is not None:
                value = SimpleNamespace(uiVal=g.memory_temperature)
                out.append(
                    SimpleNamespace(
                        fieldId=fid, nvmlReturn=0, valueType=NVML_VALUE_TYPE_UNSIGNED_INT, value=value
                    )
                )
            else:
                out.append(
                    SimpleNamespace(
                        fieldId=fid,
                        nvmlReturn=NVML_ERROR_NOT_SUPPORTED,
                        valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                        value=SimpleNamespace(uiVal=0),
                    )
                )
        return out

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetEnforcedPowerLimit", h).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetTotalEnergyConsumption", h).energy_mj

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock_type: int) -> int:
        return self._dev("nvmlDeviceGetClockInfo", h).clocks_mhz[clock_type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", h).clock_reasons

    def nvmlDeviceGetSupportedClocksEventReasons(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetSupportedClocksEventReasons", h).clock_reasons_supported

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter_type: int) -> int:
        g = self._dev("nvmlDeviceGetTotalEccErrors", h)
        assert counter_type == 0, "xpuwatch reads volatile counters"
        return g.ecc[error_type]

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        g = self._dev("nvmlDeviceGetRemappedRows", h)
        if g.remapped_rows is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g.remapped_rows

    def nvmlDeviceGetRetiredPages(self, h: FakeGpu, cause: int) -> list[int]:
        return list(self._dev("nvmlDeviceGetRetiredPages", h).retired_pages[cause])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetRetiredPagesPendingStatus", h).retired_pending

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        g = self._dev("nvmlDeviceGetComputeRunningProcesses", h)
        return [_process(pid, mem) for pid, mem in g.compute_processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        g = self._dev("nvmlDeviceGetGraphicsRunningProcesses", h)
        return [_process(pid, mem) for pid, mem in g.graphics_processes]

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetPcieReplayCounter", h).pcie_replay

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        g = self._dev("nvmlDeviceGetNvLinkState", h)
        if not g.nvlinks:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= 12:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return 1 if link in g.nvlinks else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, h: FakeGpu, link: int, counter: int) -> int:
        return self._dev("nvmlDeviceGetNvLinkErrorCounter", h).nvlinks[link][counter]

    # -- MIG
    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        g = self._dev("nvmlDeviceGetMigMode", h)
        if g.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [g.mig_mode, g.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        self._dev("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, i: int) -> _MigHandle:
        g = self._dev("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if i >= len(g.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _MigHandle(g.index, i)

    def nvmlDeviceGetGpuInstanceId(self, mh: _MigHandle) -> int:
        return self._dev("nvmlDeviceGetGpuInstanceId", mh).migs[mh.slot].gi

    def nvmlDeviceGetComputeInstanceId(self, mh: _MigHandle) -> int:
        return self._dev("nvmlDeviceGetComputeInstanceId", mh).migs[mh.slot].ci

    def nvmlDeviceGetGpuInstanceById(self, h: FakeGpu, gi: int) -> SimpleNamespace:
        g = self._dev("nvmlDeviceGetGpuInstanceById", h)
        for m in g.migs:
            if m.gi == gi:
                return SimpleNamespace(parent=g.index, mig=m)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, h: FakeGpu, profile: int, version: int = 2
    ) -> SimpleNamespace:
        """By profile index (NVML_GPU_INSTANCE_PROFILE_*): an A100 supports the 1..7-slice profiles."""
        self._dev("nvmlDeviceGetGpuInstanceProfileInfo", h)
        slices = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}.get(profile)
        if slices is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=profile, sliceCount=slices)

    def nvmlGpuInstanceGetInfo(self, gi: SimpleNamespace) -> SimpleNamespace:
        self._lib()
        return SimpleNamespace(id=gi.mig.gi, profileId=gi.mig.profile_id)

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, h: FakeGpu, profile_id: int) -> SimpleNamespace:
        g = self._dev("nvmlDeviceGetGpuInstanceProfileInfoById", h)
        for m in g.migs:
            if m.profile_id == profile_id:
                return SimpleNamespace(
                    id=profile_id,
                    sliceCount=m.slice_count,
                    memorySizeMB=m.memory_total // 2**20,
                    name=m.profile_name.encode(),
                )
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    # -- events
    def nvmlEventSetCreate(self) -> str:
        self._lib()
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, event_set: str) -> None:
        self._dev("nvmlDeviceRegisterEvents", h)
        self.registered.append(h.index)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass

    def inject_xid(self, gpu_index: int, xid: int) -> None:
        self.events.put(
            SimpleNamespace(
                device=self.gpus[gpu_index],
                eventType=nvmlEventTypeXidCriticalError,
                eventData=xid,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
        )


def fleet(n: int = 8) -> list[FakeGpu]:
    """n healthy A100s with distinct UUIDs and PCI bus ids."""
    return [
        FakeGpu(
            index=i,
            uuid=f"GPU-00000000-0000-0000-0000-0000000000{i:02d}",
            pci_bus_id=f"00000000:{i + 7:02X}:00.0",
        )
        for i in range(n)
    ]


def _process(pid: int, used: int | None) -> SimpleNamespace:
    """An nvmlProcessInfo_v3 as pynvml's nvmlStructToFriendlyObject returns it; 0xFFFFFFFF ids = no MIG."""
    return SimpleNamespace(
        pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
    )
