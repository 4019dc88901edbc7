"""NVIDIA DCGM backend: profiling ratios (SM active/occupancy, tensor, DRAM active) and health watches.

Supplements ``nvml`` (it does not supersede it): its samples carry the same Device identity (uuid) and only
what NVML cannot give: ``sm_active_ratio``, ``sm_occupancy_ratio``, ``tensor_active_ratio``,
``memory_bandwidth_utilization_ratio`` (DRAM active), ``health{subsystem}`` and the vendor metric
``accelerator_nvidia_profiling_suspect``. ``merge_samples`` overlays them onto NVML's samples for the same
uuid; the exporter must merge (or it would serve ``accelerator_up`` twice per GPU).

The ``pydcgm`` bindings are not on PyPI: they ship with the DCGM package and are imported from its install
directory (DCGM 4: /usr/share/datacenter-gpu-manager-4/bindings/python3, DCGM 3:
/usr/local/dcgm/bindings/python3; configurable). Blank values (dcgmvalue.py sentinels, ``isBlank``) are
never exported. A lost host-engine connection (DCGM_ST_CONNECTION_NOT_VALID) fails the poll and reconnects
with exponential backoff at a later poll.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from xpuwatch.vendors.base import BackendError, Device, DeviceSample, Slice, VendorMetric
from xpuwatch.vendors.nvidia_fields import VENDOR
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, register

log = logging.getLogger(__name__)

BINDING_PATHS: tuple[str, ...] = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",  # DCGM 4 (datacenter-gpu-manager-4-core)
    "/usr/local/dcgm/bindings/python3",  # DCGM 3.x
)
PROFILING_SUSPECT = "accelerator_nvidia_profiling_suspect"

# DCGM status codes (dcgm_structs.py DCGM_ST_*), fixed by the C ABI.
ST_CONNECTION_NOT_VALID = -21
ST_GPU_IS_LOST = -18

# Field ids (dcgm_fields.h): looked up by name on the bindings first, these numbers as fallback.
FIELD_IDS: Mapping[str, tuple[str, int]] = {
    "gr_engine_active": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001),
    "sm_active": ("DCGM_FI_PROF_SM_ACTIVE", 1002),
    "sm_occupancy": ("DCGM_FI_PROF_SM_OCCUPANCY", 1003),
    "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004),
    "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", 1005),
    "gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 203),  # percent; only to cross-check profiling, not exported here
}
# Health watch systems (dcgm_structs.DCGM_HEALTH_WATCH_*): bit, label value.
HEALTH_SYSTEMS: tuple[tuple[str, int, str], ...] = (
    ("DCGM_HEALTH_WATCH_PCIE", 0x1, "pcie"),
    ("DCGM_HEALTH_WATCH_NVLINK", 0x2, "nvlink"),
    ("DCGM_HEALTH_WATCH_PMU", 0x4, "pmu"),
    ("DCGM_HEALTH_WATCH_MCU", 0x8, "mcu"),
    ("DCGM_HEALTH_WATCH_MEM", 0x10, "memory"),
    ("DCGM_HEALTH_WATCH_SM", 0x20, "sm"),
    ("DCGM_HEALTH_WATCH_INFOROM", 0x40, "inforom"),
    ("DCGM_HEALTH_WATCH_THERMAL", 0x80, "thermal"),
    ("DCGM_HEALTH_WATCH_POWER", 0x100, "power"),
    ("DCGM_HEALTH_WATCH_DRIVER", 0x200, "driver"),
)
HEALTH_RESULT_WARN = 10  # DCGM_HEALTH_RESULT_WARN; FAIL = 20
ENTITY_GPU = 1  # DCGM_FE_GPU
ENTITY_GPU_I = 2  # DCGM_FE_GPU_I: a MIG GPU instance

# dcgmvalue.py blank thresholds: any value at or above is a sentinel (blank, not found, not supported, ...).
INT32_BLANK = 0x7FFFFFF0
INT64_BLANK = 0x7FFFFFFFFFFFFFF0
FP64_BLANK = 140737488355328.0


@dataclass(frozen=True)
class DcgmBindings:
    """The DCGM Python binding modules the backend uses (real ones, or stand-ins in tests)."""

    pydcgm: Any
    dcgm_structs: Any
    dcgm_fields: Any
    dcgm_agent: Any = None  # for the MIG hierarchy (per-GPU-instance profiling); optional


def load_bindings(paths: Sequence[str] = BINDING_PATHS) -> DcgmBindings:
    """Import pydcgm, dcgm_structs and dcgm_fields from the first DCGM install directory that has them.

    The directory is appended to ``sys.path`` (never prepended: it holds generic module names).
    Raises BackendError(reason="library") naming the directories tried.
    """
    for path in paths:
        if not os.path.isfile(os.path.join(path, "pydcgm.py")):
            continue
        if path not in sys.path:
            sys.path.append(path)
        try:
            return DcgmBindings(
                pydcgm=importlib.import_module("pydcgm"),
                dcgm_structs=importlib.import_module("dcgm_structs"),
                dcgm_fields=importlib.import_module("dcgm_fields"),
                dcgm_agent=_optional_module("dcgm_agent"),
            )
        except Exception as exc:  # a broken install must not take the exporter down
            raise BackendError(f"DCGM bindings in {path} failed to import: {exc}", "library") from exc
    raise BackendError(f"DCGM Python bindings not found in {', '.join(paths)}", "library")


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def is_blank(value: Any) -> bool:
    """True for DCGM blank sentinels (dcgmvalue.py DCGM_*_IS_BLANK) and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    if isinstance(value, float):
        return value != value or value >= FP64_BLANK or value in (float("inf"), float("-inf"))
    return value >= INT32_BLANK and (value < 2**32 or value >= INT64_BLANK)


@dataclass
class _Gpu:
    gpu_id: int
    device: Device
    suspect_streak: int = 0


@dataclass
class _Conn:
    handle: Any
    group: Any
    field_group: Any
    gpus: list[_Gpu]
    field_ids: dict[str, int]
    health_watched: int = 0
    health_labels: dict[int, str] = field(default_factory=dict)
    mig_group: Any = None
    mig_entities: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # GI entity -> (gpu id, NVML GI id)


class DcgmBackend:
    """DCGM backend over an nv-hostengine (``host``, default ``localhost``) or an embedded one (``host=None``).

    ``suspect_utilization`` (ratio) and ``suspect_polls``: when DCGM's own GPU utilization is at least that
    high while SM active and graphics-engine active both read exactly 0 for that many consecutive polls, the
    profiling ratios are not exported for the GPU and ``accelerator_nvidia_profiling_suspect`` is 1
    (DE #662, DCGM#56: the profiling counters stall when another profiler holds the lock).
    """

    name = "dcgm"

    def __init__(
        self,
        bindings: DcgmBindings | None = None,
        *,
        paths: Sequence[str] = BINDING_PATHS,
        host: str | None = "localhost",
        update_interval_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        suspect_utilization: float = 0.5,
        suspect_polls: int = 3,
        health: bool = True,
    ) -> None:
        self._bindings = bindings
        self._paths = tuple(paths)
        self._host = host
        self._interval_us = max(100_000, int(update_interval_seconds * 1e6))
        self._clock = clock
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._backoff = 0.0
        self._retry_at = 0.0
        self._suspect_utilization = suspect_utilization
        self._suspect_polls = max(1, suspect_polls)
        self._health = health
        self._conn: _Conn | None = None

    def open(self) -> None:
        """Connect, discover GPUs, watch the profiling fields and health systems.

        Raises BackendError(reason="library") when the bindings are missing, reason="connection" when the host
        engine cannot be reached (then retried with backoff), reason="init" while backing off."""
        if self._conn is not None:
            return
        now = self._clock()
        if now < self._retry_at:
            raise BackendError(f"DCGM reconnect backing off for {self._retry_at - now:.1f}s", "init")
        b = self._bindings or load_bindings(self._paths)
        self._bindings = b
        try:
            self._conn = self._connect(b)
        except Exception as exc:
            self._schedule_retry()
            code = getattr(exc, "value", None)
            raise BackendError(f"DCGM connect failed: {exc} (status {code})", "connection") from exc
        self._backoff = 0.0
        self._retry_at = 0.0

    def _connect(self, b: DcgmBindings) -> _Conn:
        structs = b.dcgm_structs
        mode = getattr(structs, "DCGM_OPERATION_MODE_AUTO", 1)
        handle = (
            b.pydcgm.DcgmHandle(ipAddress=self._host, opMode=mode)
            if self._host
            else b.pydcgm.DcgmHandle(opMode=mode)
        )
        try:
            system = handle.GetSystem()
            group = system.GetDefaultGroup()
            gpu_ids = list(group.GetGpuIds())
            gpus = []
            for gid in gpu_ids:
                attrs = system.discovery.GetGpuAttributes(gid)
                ident = attrs.identifiers
                gpus.append(
                    _Gpu(
                        int(gid),
                        Device(
                            vendor=VENDOR,
                            model=_s(ident.deviceName) or "NVIDIA GPU",
                            index=str(gid),
                            uuid=_s(ident.uuid) or f"dcgm-gpu-{gid}",
                            pci_bus_id=_s(getattr(ident, "pciBusId", None)),
                            driver_version=_s(getattr(ident, "driverVersion", None)),
                            serial=_s(getattr(ident, "serial", None)),
                        ),
                    )
                )
            field_ids = {
                key: int(getattr(b.dcgm_fields, name, default)) for key, (name, default) in FIELD_IDS.items()
            }
            fg = b.pydcgm.DcgmFieldGroup(handle, f"xpuwatch_{os.getpid()}", list(field_ids.values()))
            # Keep only a few samples: we read the latest each poll (DE #702: unbounded caches grow).
            group.samples.WatchFields(fg, self._interval_us, max(10.0, 5 * self._interval_us / 1e6), 5)
            conn = _Conn(handle, group, fg, gpus, field_ids)
            if self._health:
                watched = 0
                for name, bit, label in HEALTH_SYSTEMS:
                    value = int(getattr(structs, name, bit))
                    watched |= value
                    conn.health_labels[value] = label
                try:
                    group.health.Set(watched)
                    conn.health_watched = watched
                except Exception as exc:  # health watches are optional: profiling still works without
                    log.warning("DCGM health watches unavailable: %s", exc)
            self._watch_gpu_instances(b, conn)
            return conn
        except Exception:
            with contextlib.suppress(Exception):
                handle.Shutdown()
            raise

    def _watch_gpu_instances(self, b: DcgmBindings, conn: _Conn) -> None:
        """Watch the profiling fields on every MIG GPU instance too (dcgmGetGpuInstanceHierarchy + a group of
        DCGM_FE_GPU_I entities). Optional: any failure leaves slices without activity, logged once."""
        if b.dcgm_agent is None:
            return
        try:
            hierarchy = b.dcgm_agent.dcgmGetGpuInstanceHierarchy(conn.handle.handle)
            entities: dict[int, tuple[int, int]] = {}
            for i in range(int(hierarchy.count)):
                e = hierarchy.entityList[i]
                if int(e.entity.entityGroupId) == ENTITY_GPU_I:
                    entities[int(e.entity.entityId)] = (int(e.parent.entityId), int(e.info.nvmlInstanceId))
            if not entities:
                return
            group = b.pydcgm.DcgmGroup(
                conn.handle,
                groupName=f"xpuwatch_mig_{os.getpid()}",
                groupType=getattr(b.dcgm_structs, "DCGM_GROUP_EMPTY", 0),
            )
            for entity_id in entities:
                group.AddEntity(ENTITY_GPU_I, entity_id)
            group.samples.WatchFields(
                conn.field_group, self._interval_us, max(10.0, 5 * self._interval_us / 1e6), 5
            )
            conn.mig_group, conn.mig_entities = group, entities
        except Exception as exc:
            log.warning("DCGM per-GPU-instance profiling unavailable: %s", exc)

    def _schedule_retry(self) -> None:
        self._backoff = (
            self._backoff_initial if not self._backoff else min(self._backoff * 2, self._backoff_max)
        )
        self._retry_at = self._clock() + self._backoff

    def close(self) -> None:
        """Delete the field group and disconnect; never raises."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.mig_group is not None:
            with contextlib.suppress(Exception):
                conn.mig_group.Delete()
        with contextlib.suppress(Exception):
            conn.field_group.Delete()
        with contextlib.suppress(Exception):
            conn.handle.Shutdown()

    def sample(self) -> Sequence[DeviceSample]:
        """Latest profiling values and health per GPU. Raises BackendError(reason="connection") when the
        host engine went away (reconnect on a later poll, with backoff), reason="library" on other DCGM errors."""
        if self._conn is None:
            self.open()
        conn = self._conn
        assert conn is not None
        try:
            values = conn.group.samples.GetLatest(conn.field_group).values
            health = self._check_health(conn)
            gi_values = (
                conn.mig_group.samples.GetLatest_v2(conn.field_group).values.get(ENTITY_GPU_I, {})
                if conn.mig_group is not None
                else {}
            )
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code == ST_CONNECTION_NOT_VALID:
                self.close()
                self._schedule_retry()
                raise BackendError("DCGM host engine connection lost; reconnecting", "connection") from exc
            raise BackendError(f"DCGM read failed: {exc} (status {code})", "library") from exc
        out = []
        for g in conn.gpus:
            s = self._gpu_sample(conn, g, values.get(g.gpu_id, {}), health.get(g.gpu_id))
            slices = tuple(
                self._gi_slice(conn, g, gi, gi_values.get(entity_id, {}))
                for entity_id, (gpu_id, gi) in sorted(conn.mig_entities.items())
                if gpu_id == g.gpu_id
            )
            out.append(replace(s, slices=slices) if slices else s)
        return out

    def _gi_slice(self, conn: _Conn, g: _Gpu, gi: int, fields: Mapping[int, Any]) -> Slice:
        """Activity of one GPU instance. ``slice_id`` is the GI id alone: ``merge_samples`` applies it to
        every NVML slice ``"<gi>/<ci>"`` of that instance (DCGM reads activity per GI, not per CI)."""
        return Slice(
            parent_uuid=g.device.uuid,
            slice_id=str(gi),
            profile="",
            kind="mig",
            utilization_ratio=_ratio_of(conn, fields, "gr_engine_active"),
            sm_active_ratio=_ratio_of(conn, fields, "sm_active"),
            sm_occupancy_ratio=_ratio_of(conn, fields, "sm_occupancy"),
        )

    def _check_health(self, conn: _Conn) -> dict[int, dict[str, bool]]:
        if not conn.health_watched:
            return {}
        resp = conn.group.health.Check()
        out = {g.gpu_id: dict.fromkeys(conn.health_labels.values(), True) for g in conn.gpus}
        for i in range(int(getattr(resp, "incidentCount", 0))):
            inc = resp.incidents[i]
            entity = inc.entityInfo
            if int(entity.entityGroupId) != ENTITY_GPU or int(entity.entityId) not in out:
                continue
            label = conn.health_labels.get(int(inc.system))
            if label is not None and int(inc.health) >= HEALTH_RESULT_WARN:
                out[int(entity.entityId)][label] = False
        return out

    def _gpu_sample(
        self, conn: _Conn, g: _Gpu, fields: Mapping[int, Any], health: Mapping[str, bool] | None
    ) -> DeviceSample:
        def latest(key: str) -> float | None:
            series = fields.get(conn.field_ids[key])
            if not series:
                return None
            v = series[-1]
            if getattr(v, "isBlank", False) or is_blank(v.value):
                return None
            return float(v.value)

        def ratio(key: str) -> float | None:
            r = latest(key)
            return r if r is not None and 0.0 <= r <= 1.0 else None

        sm, occ, tensor, dram, gr = (
            ratio("sm_active"),
            ratio("sm_occupancy"),
            ratio("tensor_active"),
            ratio("dram_active"),
            ratio("gr_engine_active"),
        )
        util = latest("gpu_util")
        vendor: dict[str, float] = {}
        if util is not None and 0 <= util <= 100 and (sm is not None or gr is not None):
            stalled = util / 100 >= self._suspect_utilization and (sm or 0.0) == 0.0 and (gr or 0.0) == 0.0
            g.suspect_streak = g.suspect_streak + 1 if stalled else 0
            suspect = g.suspect_streak >= self._suspect_polls
            vendor[PROFILING_SUSPECT] = 1.0 if suspect else 0.0
            if suspect:
                sm = occ = tensor = dram = None  # flagged, not trusted
        return DeviceSample(
            device=g.device,
            sm_active_ratio=sm,
            sm_occupancy_ratio=occ,
            tensor_active_ratio=tensor,
            memory_bandwidth_utilization_ratio=dram,
            health=dict(health or {}),
            vendor_metrics=vendor,
        )


def _ratio_of(conn: _Conn, fields: Mapping[int, Any], key: str) -> float | None:
    series = fields.get(conn.field_ids[key])
    if not series:
        return None
    v = series[-1]
    if getattr(v, "isBlank", False) or is_blank(v.value):
        return None
    r = float(v.value)
    return r if 0.0 <= r <= 1.0 else None


def _s(v: Any) -> str | None:
    if v is None:
        return None
    t = v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)
    t = t.strip()
    return None if not t or t == "<<<NULL>>>" else t


def _create(ctx: BackendContext) -> DcgmBackend:
    opts = ctx.options
    host = opts.get("host", "localhost")
    return DcgmBackend(
        paths=tuple(opts.get("bindings_paths", BINDING_PATHS)),
        host=None if host in (None, "", "embedded") else str(host),
        update_interval_seconds=float(opts.get("update_interval_seconds", 1.0)),
        backoff_initial=float(opts.get("backoff_initial_seconds", 1.0)),
        backoff_max=float(opts.get("backoff_max_seconds", 60.0)),
        suspect_utilization=float(opts.get("suspect_utilization", 0.5)),
        suspect_polls=int(opts.get("suspect_polls", 3)),
    )


def detect(ctx: BackendContext, bindings: DcgmBindings | None = None) -> Detection:
    """Found when the bindings import and a host engine answers with at least one GPU."""
    paths = tuple(ctx.options.get("bindings_paths", BINDING_PATHS))
    try:
        b = bindings or load_bindings(paths)
    except BackendError as exc:
        return Detection(False, str(exc))
    host = ctx.options.get("host", "localhost")
    backend = DcgmBackend(b, host=None if host in (None, "", "embedded") else str(host), health=False)
    try:
        backend.open()
        n = len(backend._conn.gpus) if backend._conn else 0
    except BackendError as exc:
        return Detection(False, str(exc))
    finally:
        backend.close()
    return Detection(n > 0, f"DCGM host engine at {host}: {n} GPU(s)")


PROFILING_SUSPECT_METRIC = VendorMetric(
    name=PROFILING_SUSPECT,
    type="gauge",
    unit="",
    help="1 when DCGM profiling reads 0 while the GPU is busy (profiling ratios then withheld), else 0.",
    source="DCGM DCGM_FI_DEV_GPU_UTIL vs DCGM_FI_PROF_SM_ACTIVE / DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)

SPEC = register(
    BackendSpec(
        name="dcgm",
        vendor=VENDOR,
        create=_create,
        detect=detect,
        metrics=(PROFILING_SUSPECT_METRIC,),
        priority=15,
        supplement=True,
        reads_library=True,
        options={
            "host": "string",
            "bindings_paths": "strings",
            "update_interval_seconds": "seconds",
            "backoff_initial_seconds": "seconds",
            "backoff_max_seconds": "seconds",
            "suspect_utilization": "number",
            "suspect_polls": "int",
        },
    )
)
