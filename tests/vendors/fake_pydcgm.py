"""Stand-in for DCGM's Python bindings (pydcgm, dcgm_structs, dcgm_fields) at the host-engine boundary.

Follows NVIDIA/DCGM ``testing/python3`` (the sources installed as bindings/python3): ``DcgmHandle.py``
(``DcgmHandle(ipAddress=..., opMode=...)``, ``GetSystem()``, ``Shutdown()``), ``DcgmSystem.py``
(``GetDefaultGroup()``, ``discovery.GetGpuAttributes(gpuId).identifiers.{uuid,deviceName,pciBusId,serial,
driverVersion}``), ``DcgmGroup.py`` (``GetGpuIds()``, ``samples.WatchFields(fieldGroup, updateFreq_us,
maxKeepAge_s, maxKeepSamples)``, ``samples.GetLatest(fieldGroup).values[gpuId][fieldId][-1]`` with
``.value/.isBlank/.ts``, ``health.Set(systems)``, ``health.Check()`` -> ``incidentCount``,
``incidents[i].{system,health,entityInfo.{entityGroupId,entityId}}``), ``DcgmFieldGroup.py``
(``DcgmFieldGroup(handle, name, fieldIds)``, ``Delete()``), ``dcgm_structs.py`` (``DCGMError`` with
``.value``, ``dcgmExceptionClass(status)``, DCGM_ST_* / DCGM_HEALTH_* constants), ``dcgm_fields.py`` (field
ids) and ``dcgmvalue.py`` (blank sentinels: FP64 140737488355328.0 and up, flagged ``isBlank``).

``FakeHostEngine`` is the nv-hostengine: set ``values[gpu_id][field_id]`` (None = blank), queue health
incidents, take it ``down`` (connect fails) or ``drop()`` the live connection (next call raises
DCGM_ST_CONNECTION_NOT_VALID).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from xpuwatch.vendors.dcgm import DcgmBindings

DCGM_ST_OK = 0
DCGM_ST_NOT_SUPPORTED = -6
DCGM_ST_GPU_IS_LOST = -18
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_PROFILING_LIBRARY_ERROR = -37
DCGM_FP64_BLANK = 140737488355328.0


class DCGMError(Exception):
    """dcgm_structs.DCGMError: ``DCGMError(status)``; subclasses per status via ``dcgmExceptionClass``."""

    value: int

    def __init__(self, value: int) -> None:
        super().__init__(f"DCGM status {value}")
        self.value = value


_classes: dict[int, type[DCGMError]] = {}


def dcgmExceptionClass(status: int) -> type[DCGMError]:
    if status not in _classes:

        def init(self: DCGMError) -> None:
            DCGMError.__init__(self, status)

        _classes[status] = type(f"DCGMError_{abs(status)}", (DCGMError,), {"__init__": init})
    return _classes[status]


dcgm_structs = SimpleNamespace(
    DCGMError=DCGMError,
    dcgmExceptionClass=dcgmExceptionClass,
    DCGM_ST_OK=DCGM_ST_OK,
    DCGM_ST_CONNECTION_NOT_VALID=DCGM_ST_CONNECTION_NOT_VALID,
    DCGM_OPERATION_MODE_AUTO=1,
    DCGM_HEALTH_WATCH_PCIE=0x1,
    DCGM_HEALTH_WATCH_NVLINK=0x2,
    DCGM_HEALTH_WATCH_PMU=0x4,
    DCGM_HEALTH_WATCH_MCU=0x8,
    DCGM_HEALTH_WATCH_MEM=0x10,
    DCGM_HEALTH_WATCH_SM=0x20,
    DCGM_HEALTH_WATCH_INFOROM=0x40,
    DCGM_HEALTH_WATCH_THERMAL=0x80,
    DCGM_HEALTH_WATCH_POWER=0x100,
    DCGM_HEALTH_WATCH_DRIVER=0x200,
    DCGM_HEALTH_RESULT_PASS=0,
    DCGM_HEALTH_RESULT_WARN=10,
    DCGM_HEALTH_RESULT_FAIL=20,
)
dcgm_fields = SimpleNamespace(
    DCGM_FE_GPU=1,
    DCGM_FI_DEV_GPU_UTIL=203,
    DCGM_FI_PROF_GR_ENGINE_ACTIVE=1001,
    DCGM_FI_PROF_SM_ACTIVE=1002,
    DCGM_FI_PROF_SM_OCCUPANCY=1003,
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=1004,
    DCGM_FI_PROF_DRAM_ACTIVE=1005,
)
_DOUBLE_FIELDS = {1001, 1002, 1003, 1004, 1005}


@dataclass
class FakeGpuInfo:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:19:00.0"
    serial: str = "1650000000000"
    driver: str = "550.54.15"


@dataclass
class FakeHostEngine:
    gpus: dict[int, FakeGpuInfo]
    values: dict[int, dict[int, float | int | None]] = field(default_factory=dict)
    incidents: list[tuple[int, int, int]] = field(default_factory=list)  # (gpu_id, system bit, health)
    down: bool = False
    generation: int = 0  # bumped by drop(): handles of older generations are invalid
    connects: int = 0
    watches: list[tuple[list[int], int, float, int]] = field(default_factory=list)
    health_systems: int = 0
    field_groups: set[str] = field(default_factory=set)
    gpu_instances: dict[int, tuple[int, int]] = field(default_factory=dict)  # GI entity -> (gpu id, NVML GI)
    gi_values: dict[int, dict[int, float | int | None]] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)

    def drop(self) -> None:
        self.generation += 1

    def bindings(self) -> DcgmBindings:
        return DcgmBindings(
            pydcgm=_PydcgmModule(self),
            dcgm_structs=dcgm_structs,
            dcgm_fields=dcgm_fields,
            dcgm_agent=_AgentModule(self),
        )


class _Value:
    def __init__(self, field_id: int, raw: float | int | None) -> None:
        self.ts = 1_700_000_000_000_000
        self.fieldId = field_id
        if raw is None:  # status != DCGM_ST_OK: blank with no value
            self.value: Any = None
            self.isBlank = True
            return
        self.value = float(raw) if field_id in _DOUBLE_FIELDS else int(raw)
        self.isBlank = (
            self.value >= DCGM_FP64_BLANK if isinstance(self.value, float) else self.value >= 0x7FFFFFF0
        )


class _Series:
    """dcgm_field_helpers.DcgmFieldValueTimeSeries."""

    def __init__(self, values: list[_Value]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, key: int) -> _Value:
        return self.values[key]


class DcgmHandle:
    def __init__(self, engine: FakeHostEngine, ipAddress: str | None = None, opMode: int = 1) -> None:
        if engine.down:
            raise dcgmExceptionClass(DCGM_ST_CONNECTION_NOT_VALID)()
        engine.connects += 1
        self.engine = engine
        self.generation = engine.generation
        self.ipAddress = ipAddress
        self.open = True
        self.handle = self  # DcgmHandle.handle: the raw dcgmHandle_t passed to dcgm_agent calls

    def check(self) -> None:
        if not self.open or self.generation != self.engine.generation or self.engine.down:
            raise dcgmExceptionClass(DCGM_ST_CONNECTION_NOT_VALID)()

    def GetSystem(self) -> _System:
        self.check()
        return _System(self)

    def Shutdown(self) -> None:
        self.open = False


class _System:
    def __init__(self, handle: DcgmHandle) -> None:
        self._h = handle
        self.discovery = SimpleNamespace(GetGpuAttributes=self._attributes)

    def _attributes(self, gpu_id: int) -> SimpleNamespace:
        self._h.check()
        g = self._h.engine.gpus[gpu_id]
        return SimpleNamespace(
            identifiers=SimpleNamespace(
                uuid=g.uuid, deviceName=g.name, pciBusId=g.pci_bus_id, serial=g.serial, driverVersion=g.driver
            )
        )

    def GetDefaultGroup(self) -> _Group:
        self._h.check()
        return _Group(self._h)


class DcgmFieldGroup:
    def __init__(self, handle: DcgmHandle, name: str, fieldIds: list[int]) -> None:
        handle.check()
        if name in handle.engine.field_groups:
            raise dcgmExceptionClass(-31)()  # DCGM_ST_DUPLICATE_KEY
        handle.engine.field_groups.add(name)
        self._h = handle
        self.name = name
        self.fieldIds = list(fieldIds)

    def Delete(self) -> None:
        self._h.engine.field_groups.discard(self.name)


class _Group:
    def __init__(self, handle: DcgmHandle) -> None:
        self._h = handle
        self.samples = SimpleNamespace(WatchFields=self._watch, GetLatest=self._latest)
        self.health = SimpleNamespace(Set=self._health_set, Check=self._health_check)

    def GetGpuIds(self) -> list[int]:
        self._h.check()
        return sorted(self._h.engine.gpus)

    def _watch(self, fg: DcgmFieldGroup, update_us: int, max_age_s: float, max_samples: int) -> None:
        self._h.check()
        self._h.engine.watches.append((fg.fieldIds, update_us, max_age_s, max_samples))

    def _latest(self, fg: DcgmFieldGroup) -> SimpleNamespace:
        self._h.check()
        out: dict[int, dict[int, _Series]] = {}
        for gpu_id in self._h.engine.gpus:
            per = self._h.engine.values.get(gpu_id, {})
            out[gpu_id] = {fid: _Series([_Value(fid, per.get(fid))]) for fid in fg.fieldIds}
        return SimpleNamespace(values=out)

    def _health_set(self, systems: int) -> None:
        self._h.check()
        self._h.engine.health_systems = systems

    def _health_check(self) -> SimpleNamespace:
        self._h.check()
        incidents = [
            SimpleNamespace(
                system=system,
                health=health,
                entityInfo=SimpleNamespace(entityGroupId=1, entityId=gpu),
                error=SimpleNamespace(code=0, msg="injected"),
            )
            for gpu, system, health in self._h.engine.incidents
        ]
        worst = max((i.health for i in incidents), default=0)
        return SimpleNamespace(overallHealth=worst, incidentCount=len(incidents), incidents=incidents)


class DcgmGroup:
    """pydcgm.DcgmGroup created by name (an empty group of entities, DCGM_GROUP_EMPTY)."""

    def __init__(
        self, handle: DcgmHandle, groupId: Any = None, groupName: str | None = None, groupType: int = 0
    ):
        handle.check()
        assert groupName is not None and groupType == 0
        handle.engine.groups.add(groupName)
        self._h = handle
        self.name = groupName
        self.entities: list[tuple[int, int]] = []
        self.samples = SimpleNamespace(WatchFields=self._watch, GetLatest_v2=self._latest_v2)

    def AddEntity(self, entityGroupId: int, entityId: int) -> None:
        self._h.check()
        self.entities.append((entityGroupId, entityId))

    def _watch(self, fg: DcgmFieldGroup, update_us: int, max_age_s: float, max_samples: int) -> None:
        self._h.check()
        self._h.engine.watches.append((fg.fieldIds, update_us, max_age_s, max_samples))

    def _latest_v2(self, fg: DcgmFieldGroup) -> SimpleNamespace:
        """DcgmFieldValueEntityCollection: values[entityGroupId][entityId][fieldId]."""
        self._h.check()
        out: dict[int, dict[int, dict[int, _Series]]] = {}
        for group_id, entity_id in self.entities:
            per = self._h.engine.gi_values.get(entity_id, {})
            out.setdefault(group_id, {})[entity_id] = {
                fid: _Series([_Value(fid, per.get(fid))]) for fid in fg.fieldIds
            }
        return SimpleNamespace(values=out)

    def Delete(self) -> None:
        self._h.engine.groups.discard(self.name or "")


class _AgentModule:
    """dcgm_agent: only dcgmGetGpuInstanceHierarchy (c_dcgmMigHierarchy_v2: count, entityList[i].{entity,
    parent,info.nvmlInstanceId})."""

    def __init__(self, engine: FakeHostEngine) -> None:
        self._engine = engine

    def dcgmGetGpuInstanceHierarchy(self, handle: DcgmHandle) -> SimpleNamespace:
        handle.check()
        entries = [
            SimpleNamespace(
                entity=SimpleNamespace(entityGroupId=2, entityId=eid),
                parent=SimpleNamespace(entityGroupId=1, entityId=gpu),
                info=SimpleNamespace(
                    gpuUuid=self._engine.gpus[gpu].uuid,
                    nvmlGpuIndex=gpu,
                    nvmlInstanceId=gi,
                    nvmlComputeInstanceId=0,
                ),
            )
            for eid, (gpu, gi) in self._engine.gpu_instances.items()
        ]
        return SimpleNamespace(count=len(entries), entityList=entries)


class _PydcgmModule:
    """Module-like pydcgm bound to one fake host engine."""

    def __init__(self, engine: FakeHostEngine) -> None:
        self._engine = engine
        self.DcgmFieldGroup = DcgmFieldGroup
        self.DcgmGroup = DcgmGroup

    def DcgmHandle(self, handle: Any = None, ipAddress: str | None = None, opMode: int = 1) -> DcgmHandle:
        return DcgmHandle(self._engine, ipAddress=ipAddress, opMode=opMode)
