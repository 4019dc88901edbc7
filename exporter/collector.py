"""Collector: turns the poller's backend views plus pod attribution into Prometheus metric families.

``families()`` is the pure mapping (views, attribution, node) -> metric families, driven entirely by
``exporter.catalog``: every family's name, type, unit and help come from the catalog, and the exposition
text is written by prometheus-client. ``Collector`` wraps it as a prometheus-client custom collector that
builds the families fresh on each ``collect()``. ``families()`` is the reference; what the server renders
each poll comes from ``SeriesWriter``, its fast twin, which writes the same series as exposition lines
straight from the samples, reusing each device's rendered labels across polls (exporter.exposition).

Labelling (the contract): device series carry ``DEVICE_LABELS``, plus ``namespace/pod/container`` when
exactly one container holds the whole device (``job_id/job_user/job_partition`` when it is one Slurm job).
``accelerator_allocated`` has one series per holder of the device or of any of its slices. Slice series carry
``SLICE_LABELS`` (``uuid`` is the parent's), plus the slice holder's labels when exactly one holds it. ``accelerator_container_memory_used_bytes`` has
one series per container with processes on the device (``container=""`` for processes of no named container),
never the device holder's labels. A device that is not up exports only
``accelerator_up 0``, ``accelerator_info`` and its allocation. A backend past its staleness bound exports no
device series at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as _ClientCollector
from prometheus_client.utils import floatToGoString

from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import Attribution, AttributionSource, Holder, MappingStatus
from xpuwatch.exporter.cgroup import ContainerRef
from xpuwatch.exporter.plausibility import implausible
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.selection import Selection
from xpuwatch.vendors.base import DeviceSample, Partition, Slice, merge_samples

log = logging.getLogger(__name__)

# DeviceSample scalar fields -> metric names (None = no series).
_SCALARS: tuple[tuple[str, str], ...] = (
    ("utilization_ratio", C.UTILIZATION),
    ("sm_active_ratio", C.SM_ACTIVE),
    ("sm_occupancy_ratio", C.SM_OCCUPANCY),
    ("tensor_active_ratio", C.TENSOR_ACTIVE),
    ("memory_bandwidth_utilization_ratio", C.MEMORY_BANDWIDTH),
    ("memory_used_bytes", C.MEMORY_USED),
    ("memory_total_bytes", C.MEMORY_TOTAL),
    ("memory_used_ratio", C.MEMORY_USED_RATIO),
    ("power_watts", C.POWER),
    ("power_limit_watts", C.POWER_LIMIT),
    ("energy_joules", C.ENERGY),
    ("pcie_replay_errors", C.PCIE_REPLAY),
)
# DeviceSample mappings -> (metric name, label name).
_MAPPINGS: tuple[tuple[str, str, str], ...] = (
    ("temperatures_celsius", C.TEMPERATURE, "sensor"),
    ("clocks_hertz", C.CLOCK, "clock"),
    ("clock_throttled", C.CLOCK_THROTTLED, "reason"),
    ("ecc_errors", C.ECC_ERRORS, "type"),
    ("remapped_rows", C.REMAPPED_ROWS, "type"),
    ("fault_events", C.FAULT_EVENTS, "code"),
    ("health", C.HEALTH, "subsystem"),
)
_SLICE_SCALARS: tuple[tuple[str, str], ...] = (
    ("memory_used_bytes", C.SLICE_MEMORY_USED),
    ("memory_total_bytes", C.SLICE_MEMORY_LIMIT),
    ("compute_limit_ratio", C.SLICE_COMPUTE_LIMIT),
    ("utilization_ratio", C.SLICE_UTILIZATION),
    ("sm_active_ratio", C.SLICE_SM_ACTIVE),
    ("sm_occupancy_ratio", C.SLICE_SM_OCCUPANCY),
)

_SUFFIX = {"counter": "_total", "info": "_info"}


def _max(a: float, b: float) -> float:
    return b if b > a else a


_COMBINE: dict[str, Callable[[float, float], float]] = {"sum": float.__add__, "max": _max}
"""How a switched-off breakdown's series combine, in the order the breakdown's series are written (sorted
by key): the same order in ``families()`` and ``SeriesWriter``, so the same float sums."""


def family(name: str, d: C.MetricDef) -> Metric:
    """The empty prometheus-client family of catalog entry ``name`` (without the ``_total``/``_info``
    suffix the client adds back; its unit only when the name ends with it)."""
    suffix = _SUFFIX.get(d.type, "")
    base = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
    unit = d.unit if d.unit and base.endswith("_" + d.unit) else ""
    return Metric(base, d.help, d.type, unit)


class _Families:
    """Metric families being built for one render, in catalog order, created on first sample. Families
    the selection switches off get no series; a family with a breakdown off gets one series per label set
    left once the breakdown's labels are dropped, in the order each set was first seen, its value the
    series' values combined in the order they were added."""

    def __init__(self, defs: Mapping[str, C.MetricDef], selection: Selection) -> None:
        self._defs = defs
        self._off = selection.off
        self._drop = selection.dropped()
        self._built: dict[str, Metric] = {}
        self._acc: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        if name in self._off:
            return
        drop = self._drop.get(name)
        if drop is not None:
            dropped, how = drop
            key = tuple((k, v) for k, v in labels.items() if k not in dropped)
            acc = self._acc.setdefault(name, {})
            old = acc.get(key)
            acc[key] = float(value) if old is None else _COMBINE[how](old, float(value))
            return
        fam = self._built.get(name)
        if fam is None:
            fam = self._built[name] = family(name, self._defs[name])
        fam.add_sample(name, labels, float(value))

    def count(self) -> int:
        """Series added so far (after selection)."""
        return sum(len(f.samples) for f in self._built.values()) + sum(map(len, self._acc.values()))

    def result(self) -> list[Metric]:
        for name, acc in self._acc.items():
            fam = self._built[name] = family(name, self._defs[name])
            for key, v in acc.items():
                fam.add_sample(name, dict(key), v)
        return [self._built[n] for n in self._defs if n in self._built]


def _allocated_labels(ident: Mapping[str, str], h: Holder) -> dict[str, str]:
    """``accelerator_allocated``'s labels: the device's identity and the holder's pod and workload, and a
    batch job's ``job_id``/``job_user``/``job_partition`` (empty pod labels)."""
    labels = {
        **ident,
        "namespace": h.namespace,
        "pod": h.pod,
        "container": h.container,
        "workload_kind": h.workload_kind,
        "owner": h.owner,
        **dict(h.promoted),
    }
    if h.job_id:
        labels.update(job_id=h.job_id, job_user=h.job_user, job_partition=h.job_partition)
    return labels


def _partition_labels(ident: Mapping[str, str], p: Partition) -> dict[str, str]:
    return {
        **ident,
        "parent_uuid": p.parent_uuid,
        "partition_id": p.partition_id,
        "compute_partition": p.compute_mode or "",
        "memory_partition": p.memory_mode or "",
    }


def _pod_labels(holders: Sequence[Holder]) -> dict[str, str]:
    return holders[0].labels() if len(holders) == 1 else {}


def families(
    node: str,
    views: Iterable[BackendView],
    attribution: Attribution,
    mapping_up: bool | None,
    defs: Mapping[str, C.MetricDef] | None = None,
    unknown: set[str] | None = None,
    mapping_status: MappingStatus | None = None,
    pid_containers: Mapping[int, ContainerRef | None] | None = None,
    selection: Selection | None = None,
    job_status: MappingStatus | None = None,
) -> list[Metric]:
    """Render every family for one instant. Pure: same inputs, same families.

    ``unknown`` collects vendor metric names a backend returned that no registration declares (not
    exported; the caller logs them once). ``mapping_status`` adds the pod mapping's last success and
    unmatched IDs; ``pid_containers`` (host PID -> its container, None for none) names the processes of
    ``DeviceSample.processes``: given (pod mapping on), ``accelerator_container_memory_used_bytes`` is
    rendered, pids it lacks counting under ``container=""``; None (no Kubernetes), it is not.
    ``selection`` (default: ``Selection.default()``) switches families and breakdowns off
    (exporter.selection); ``xpuwatch_render_series`` counts the series written, itself included.
    ``job_status`` (None: no job mapping) adds the Slurm job mapping's health (exporter.jobmap).
    """
    sel = Selection.default() if selection is None else selection
    out = _Families(defs if defs is not None else C.by_name(), sel)
    views = tuple(views)
    for s in _merged(views):
        _device(out, node, s, attribution, unknown, pid_containers)
    for name, labels, value in _exporter_series(views, mapping_up, mapping_status, job_status):
        out.add(name, labels, value)
    if sel.family_on(C.RENDER_SERIES) and C.RENDER_SERIES in out._defs:
        out.add(C.RENDER_SERIES, {}, out.count() + 1)
    return out.result()


def _exporter_series(
    views: Sequence[BackendView],
    mapping_up: bool | None,
    status: MappingStatus | None,
    job_status: MappingStatus | None = None,
) -> Iterator[tuple[str, dict[str, str], float]]:
    """The exporter's own series: per backend, then the pod mapping's, then the job mapping's."""
    for view in views:
        b = {"backend": view.backend}
        yield C.BACKEND_UP, b, 1 if view.up else 0
        if view.poll_duration is not None:
            yield C.BACKEND_POLL_DURATION, b, view.poll_duration
        for reason, n in sorted(view.errors.items()):
            yield C.BACKEND_ERRORS, {**b, "reason": reason}, n
        if view.last_success is not None:
            yield C.BACKEND_LAST_SUCCESS, b, view.last_success
        yield C.BACKEND_DEVICES, b, view.devices
    if mapping_up is not None:
        yield C.POD_MAPPING_UP, {}, 1 if mapping_up else 0
    if status is not None:
        if status.last_success is not None:
            yield C.POD_MAPPING_LAST_SUCCESS, {}, status.last_success
        for resource, n in status.unmatched:
            yield C.POD_MAPPING_UNMATCHED, {"resource": resource}, n
        for resource, n in status.reassigned:
            yield C.POD_MAPPING_REASSIGNED, {"resource": resource}, n
    if job_status is not None:
        yield C.JOB_MAPPING_UP, {}, 1 if job_status.up else 0
        if job_status.last_success is not None:
            yield C.JOB_MAPPING_LAST_SUCCESS, {}, job_status.last_success
        yield C.JOB_MAPPING_UNMATCHED, {}, sum(n for _, n in job_status.unmatched)


def _merged(views: Sequence[BackendView]) -> list[DeviceSample]:
    """One sample per device: of two primary backends reading the same device the first listed wins;
    supplementing backends' samples are overlaid onto it (vendors.base.merge_samples)."""
    primary: dict[tuple[str, str], DeviceSample] = {}
    for view in views:
        if not view.supplement:
            for s in view.samples:
                primary.setdefault((s.device.vendor, s.device.uuid), s)
    merged = list(primary.values())
    for view in views:
        if view.supplement:
            merged = merge_samples(merged, view.samples)
    return merged


def _device(
    out: _Families,
    node: str,
    s: DeviceSample,
    attribution: Attribution,
    unknown: set[str] | None,
    pid_containers: Mapping[int, ContainerRef | None] | None,
) -> None:
    d = s.device
    ident = {"node": node, "vendor": d.vendor, "model": d.model, "device": d.index, "uuid": d.uuid}
    device_holders = attribution.for_device(d.uuid)
    labels = {**ident, **_pod_labels(device_holders)}

    out.add(C.UP, labels, 1 if s.up else 0)
    out.add(
        C.INFO,
        {
            **labels,
            "driver_version": d.driver_version or "",
            "pci_bus_id": d.pci_bus_id or "",
            "serial": d.serial or "",
        },
        1,
    )
    if d.partition is not None:
        out.add(C.PARTITION_INFO, _partition_labels(ident, d.partition), 1)
    holders = set(device_holders)
    if s.up:
        for sl in s.slices:
            holders.update(attribution.for_slice(sl))
    for h in sorted(holders):
        out.add(C.ALLOCATED, _allocated_labels(ident, h), 1)
    if not s.up:
        # Fault counters survive a lost device: XID 79 is counted exactly when the GPU falls off the bus.
        for code, count in sorted(s.fault_events.items()):
            out.add(C.FAULT_EVENTS, {**labels, "code": str(code)}, count)
        return

    for attr, name in _SCALARS:
        v = getattr(s, attr)
        if v is not None:
            out.add(name, labels, v)
    for attr, name, label in _MAPPINGS:
        for key, v in sorted(getattr(s, attr).items()):
            out.add(name, {**labels, label: str(key)}, v)
    if s.remap_pending is not None:
        out.add(C.REMAP_PENDING, labels, 1 if s.remap_pending else 0)
    if s.remap_failed is not None:
        out.add(C.REMAP_FAILED, labels, 1 if s.remap_failed else 0)
    for (link, typ), v in sorted(s.link_errors.items()):
        out.add(C.LINK_ERRORS, {**labels, "link": str(link), "type": str(typ)}, v)
    for name, v in sorted(s.vendor_metrics.items()):
        if name in out._defs and name.startswith("accelerator_"):
            out.add(name, labels, v)
        elif unknown is not None:
            unknown.add(name)
    for sl in s.slices:
        _slice(out, ident, sl, attribution)
    if s.processes is not None and pid_containers is not None:
        _containers(out, ident, s, attribution, pid_containers)
    for reason, n in implausible(s):
        out.add(C.IMPLAUSIBLE, {**labels, "reason": reason}, n)


def _containers(
    out: _Families,
    ident: Mapping[str, str],
    s: DeviceSample,
    attribution: Attribution,
    pid_containers: Mapping[int, ContainerRef | None],
) -> None:
    """Sum the device's processes per container. A process whose container the pod list does not name
    (no pod, exited, API enrichment off) is summed under ``container=""``: never dropped, never guessed."""
    held: dict[tuple[str, str, str], float] = {}
    for p in s.processes or ():
        if p.memory_used_bytes is None:
            continue
        ref = pid_containers.get(p.pid)
        h = attribution.for_container(ref.container_id) if ref is not None and ref.container_id else None
        key = (h.namespace, h.pod, h.container) if h is not None else ("", "", "")
        held[key] = held.get(key, 0.0) + p.memory_used_bytes
    for (ns, pod, ctr), used in sorted(held.items()):
        out.add(C.CONTAINER_MEMORY_USED, {**ident, "namespace": ns, "pod": pod, "container": ctr}, used)


def _slice(out: _Families, ident: Mapping[str, str], sl: Slice, attribution: Attribution) -> None:
    labels = {
        **ident,
        "uuid": sl.parent_uuid or ident["uuid"],
        "slice_id": sl.slice_id,
        "profile": sl.profile,
        "slice_kind": sl.kind,
        **_pod_labels(attribution.for_slice(sl)),
    }
    out.add(C.SLICE_INFO, {**labels, "slice_uuid": sl.uuid or ""}, 1)
    for attr, name in _SLICE_SCALARS:
        v = getattr(sl, attr)
        if v is not None:
            out.add(name, labels, v)


@dataclass(frozen=True)
class RenderInputs:
    """Everything one render reads, taken once (``Collector.inputs``): the poller's ``views``, the pod
    ``attribution`` and whether its source is up (None: no pod mapping), the mapping's ``status``, and
    ``pids`` (host PID -> its container, None: no Kubernetes), and the job mapping's ``job_status`` (None:
    none configured); the arguments of ``families()``."""

    node: str
    views: tuple[BackendView, ...]
    attribution: Attribution
    mapping_up: bool | None
    status: MappingStatus | None = None
    pids: Mapping[int, ContainerRef | None] | None = None
    job_status: MappingStatus | None = None


def _size(prefixes: Mapping[str, Any]) -> int:
    return sum(
        len(v.order)
        if isinstance(v, _Plan)
        else len(v.prefixes)
        if isinstance(v, _Combined)
        else len(v)
        if isinstance(v, dict)
        else 1
        for v in prefixes.values()
    )


_ZERO = floatToGoString(0.0) + "\n"
_NEG_ZERO = floatToGoString(-0.0) + "\n"


class _Plan:
    """The series of one mapping field of one device while its keys stay the same, in the same order:
    (position in the mapping, rendered prefix) in the order the reference writes them (``keys`` None:
    rebuilt every render); and the lines last written with their ``values`` and their types."""

    __slots__ = ("keys", "lines", "order", "types", "values")

    def __init__(self, keys: tuple[Any, ...] | None, order: tuple[tuple[int, str], ...]) -> None:
        self.keys = keys
        self.order = order
        self.values: tuple[Any, ...] = ()
        self.types: tuple[type, ...] = ()
        self.lines: list[str] | None = None


class _Combined:
    """The series of one mapping field of one device with a breakdown off, while its keys stay the same:
    ``order`` is (position in the mapping, group) in sorted key order, ``prefixes`` one rendered prefix per
    group (label set left once the breakdown's labels are dropped), in the order groups are first seen;
    and the lines last written with their ``values`` and types (as ``_Plan``)."""

    __slots__ = ("keys", "lines", "order", "prefixes", "types", "values")

    def __init__(
        self, keys: tuple[Any, ...] | None, order: tuple[tuple[int, int], ...], prefixes: list[str]
    ) -> None:
        self.keys = keys
        self.order = order
        self.prefixes = prefixes
        self.values: tuple[Any, ...] = ()
        self.types: tuple[type, ...] = ()
        self.lines: list[str] | None = None


class _Device:
    """What a ``SeriesWriter`` keeps of one device between renders: its label sets and the rendered
    ``name{labels} `` prefix of each of its series: by family name, a ``_Plan`` per mapping field (keyed by
    the DeviceSample field), or a dict of them by holder, slice or container ("allocated", "slices",
    "containers")."""

    __slots__ = ("ident", "labels", "prefixes")

    def __init__(self, ident: dict[str, str], labels: dict[str, str]) -> None:
        self.ident = ident
        self.labels = labels
        self.prefixes: dict[str, Any] = {}


class SeriesWriter:
    """The fast twin of ``families()``: the same series in the same order, written straight as exposition
    lines (``<prefix><value>\\n``) without building Metric or Sample objects.

    ``prefix(sample_name, labels)`` is the encoder's: it renders ``name{labels} `` exactly as the encoder
    it stands for would. Prefixes are kept per device (keyed by the device's identity and the one holder
    whose pod labels it carries) and reused while the device keeps them, so a render costs a lookup, a
    value format (remembered for repeated values) and a concatenation per series. Only the devices of the
    last render are kept; when a device's series churn (keys come and go) so that more prefixes are kept
    than series written, the next render starts afresh: memory stays proportional to the series served.
    Byte-identity with prometheus-client over ``families()`` is tested (tests/exporter/test_exposition.py).

    ``defs`` is the whole catalog and ``selection`` (default ``Selection.default()``) what of it is written:
    ``self.defs`` holds the families switched on, in catalog order. A family switched off is written into
    a list past ``self.defs`` that ``write`` drops (scalar and mapping fields skip it outright), so a
    selection that excludes nothing costs nothing; a family with a breakdown off is combined per device
    (``_combined``), its plan kept like a mapping's.
    """

    def __init__(
        self,
        defs: Mapping[str, C.MetricDef],
        prefix: Callable[[str, Mapping[str, str]], str],
        selection: Selection | None = None,
    ) -> None:
        sel = Selection.default() if selection is None else selection
        self.catalog = defs
        self.selection = sel
        on = [n for n in defs if sel.family_on(n)]
        self.defs: Mapping[str, C.MetricDef] = defs if len(on) == len(defs) else {n: defs[n] for n in on}
        self._prefix = prefix
        index = {name: i for i, name in enumerate(on)}
        for name in defs:
            index.setdefault(name, len(index))  # switched off: a list past the ones returned
        self._index = index
        self._n = len(on)
        self._drop = sel.dropped()
        self._scalars = tuple((attr, name, index[name]) for attr, name in _SCALARS if sel.family_on(name))
        self._mappings = tuple(
            (attr, name, label, index[name])
            for attr, name, label in _MAPPINGS
            if sel.family_on(name) and name not in self._drop
        )
        self._combined_mappings = tuple(
            (attr, name, (label,), index[name])
            for attr, name, label in _MAPPINGS
            if sel.family_on(name) and name in self._drop
        )
        self._slice_scalars = tuple((attr, name, index[name]) for attr, name in _SLICE_SCALARS)
        self._render_series = C.RENDER_SERIES in on
        self._devices: dict[tuple[Any, ...], _Device] = {}
        self._made = 0  # prefixes made since the kept ones were last counted (an upper bound on them)
        self._series = 0  # series of the last render
        # Non-zero value -> its text and newline, for the values of this render (``_values``) and of the
        # render before (``_seen``): most values repeat from one poll to the next (counters, states,
        # totals), and memory stays at two renders' distinct values. Before (issue 36) one dict kept every
        # value until it held 4,096 + 2 x series entries and was then cleared: at 2,048 devices a 124,000-
        # entry sawtooth of 6 MiB every ~80 polls, which left the allocator's high-water mark behind.
        self._values: dict[float, str] = {}
        self._seen: dict[float, str] = {}

    def write(self, inp: RenderInputs, unknown: set[str] | None = None) -> list[list[str]]:
        """Lines per family, indexed like ``defs`` (empty list: no series). ``unknown`` as in ``families``."""
        lines: list[list[str]] = [[] for _ in self._index]
        old = self._devices
        new: dict[tuple[Any, ...], _Device] = {}
        self._seen, self._values = self._values, {}
        for s in _merged(inp.views):
            self._device(lines, s, inp, old, new, unknown)
        total = self._series = sum(len(x) for x in lines)
        if self._made > 2 * total + 64:  # rarely: count what the devices of this render hold
            self._devices = new
            self._made = self.held()
            if self._made > 2 * total + 64:  # series churned: start afresh next render
                new, self._made = {}, 0
        self._devices = new
        self._exporter(lines, inp)
        if len(lines) != self._n:
            del lines[self._n :]  # the families switched off
        if self._render_series:
            count = sum(map(len, lines)) + 1
            lines[self._index[C.RENDER_SERIES]].append(self._prefix(C.RENDER_SERIES, {}) + self._text(count))
        return lines

    def held(self) -> int:
        """Prefixes kept for the next render (at most about twice the series of the last one)."""
        return sum(_size(e.prefixes) for e in self._devices.values())

    def texts(self) -> int:
        """Value texts kept for the next render: the distinct non-zero values of the last two renders."""
        return len(self._values) + len(self._seen)

    def _make(self, name: str, labels: Mapping[str, str]) -> str:
        self._made += 1
        return self._prefix(name, labels)

    def _text(self, v: float) -> str:
        """``floatToGoString(v)`` and a newline, remembered for non-zero values."""
        if not v:  # 0.0 and -0.0 are equal keys but print differently
            return _NEG_ZERO if math.copysign(1.0, v) < 0 else _ZERO
        t = self._values.get(v)
        if t is None:
            t = self._seen.get(v) or floatToGoString(v) + "\n"
            self._values[v] = t
        return t

    def _device(
        self,
        lines: list[list[str]],
        s: DeviceSample,
        inp: RenderInputs,
        old: dict[tuple[Any, ...], _Device],
        new: dict[tuple[Any, ...], _Device],
        unknown: set[str] | None,
    ) -> None:
        """Write one device's series."""
        d = s.device
        attribution = inp.attribution
        device_holders = attribution.for_device(d.uuid)
        key = (inp.node, d, device_holders[0] if len(device_holders) == 1 else None)
        e = old.get(key)
        if e is None:
            ident = {
                "node": inp.node,
                "vendor": d.vendor,
                "model": d.model,
                "device": d.index,
                "uuid": d.uuid,
            }
            e = _Device(ident, {**ident, **_pod_labels(device_holders)})
        new[key] = e
        pre = e.prefixes
        prefix = self._make
        values = self._values
        index = self._index
        text = self._text
        one = text(1)

        p = pre.get(C.UP)
        if p is None:
            p = pre[C.UP] = prefix(C.UP, e.labels)
        lines[index[C.UP]].append(p + (one if s.up else text(0)))
        p = pre.get(C.INFO)
        if p is None:
            info = {
                **e.labels,
                "driver_version": d.driver_version or "",
                "pci_bus_id": d.pci_bus_id or "",
                "serial": d.serial or "",
            }
            p = pre[C.INFO] = prefix(C.INFO, info)
        lines[index[C.INFO]].append(p + one)
        if d.partition is not None:
            p = pre.get(C.PARTITION_INFO)
            if p is None:
                p = pre[C.PARTITION_INFO] = prefix(C.PARTITION_INFO, _partition_labels(e.ident, d.partition))
            lines[index[C.PARTITION_INFO]].append(p + one)
        holders = set(device_holders)
        if s.up:
            for sl in s.slices:
                holders.update(attribution.for_slice(sl))
        if holders:
            sub = pre.setdefault("allocated", {})
            out = lines[index[C.ALLOCATED]]
            for h in sorted(holders):
                p = sub.get(h)
                if p is None:
                    p = sub[h] = prefix(C.ALLOCATED, _allocated_labels(e.ident, h))
                out.append(p + one)
        if not s.up:
            if s.fault_events:
                out = lines[index[C.FAULT_EVENTS]]
                if C.FAULT_EVENTS in self._drop:
                    self._combined(out, e, "fault_events", C.FAULT_EVENTS, ("code",), s.fault_events)
                else:
                    self._mapping(out, e, "fault_events", C.FAULT_EVENTS, "code", s.fault_events)
            return

        for attr, name, i in self._scalars:
            v = getattr(s, attr)
            if v is not None:
                p = pre.get(name)
                if p is None:
                    p = pre[name] = prefix(name, e.labels)
                lines[i].append(p + (values.get(v) or text(v)))
        for attr, name, label, i in self._mappings:
            m = getattr(s, attr)
            if m:
                self._mapping(lines[i], e, attr, name, label, m)
        for attr, name, labelnames, i in self._combined_mappings:
            m = getattr(s, attr)
            if m:
                self._combined(lines[i], e, attr, name, labelnames, m)
        if s.remap_pending is not None:
            p = pre.get(C.REMAP_PENDING)
            if p is None:
                p = pre[C.REMAP_PENDING] = prefix(C.REMAP_PENDING, e.labels)
            lines[index[C.REMAP_PENDING]].append(p + (one if s.remap_pending else text(0)))
        if s.remap_failed is not None:
            p = pre.get(C.REMAP_FAILED)
            if p is None:
                p = pre[C.REMAP_FAILED] = prefix(C.REMAP_FAILED, e.labels)
            lines[index[C.REMAP_FAILED]].append(p + (one if s.remap_failed else text(0)))
        if s.link_errors:
            if C.LINK_ERRORS in self._drop:
                out = lines[index[C.LINK_ERRORS]]
                self._combined(out, e, "link_errors", C.LINK_ERRORS, ("link", "type"), s.link_errors)
            else:
                out = lines[index[C.LINK_ERRORS]]
                self._mapping(out, e, "link_errors", C.LINK_ERRORS, None, s.link_errors)
        for name, v in sorted(s.vendor_metrics.items()):
            if name in index and name.startswith("accelerator_"):
                p = pre.get(name)
                if p is None:
                    p = pre[name] = prefix(name, e.labels)
                lines[index[name]].append(p + text(v))
            elif unknown is not None:
                unknown.add(name)
        if s.slices:
            self._slices(lines, e, s.slices, attribution)
        if s.processes is not None and inp.pids is not None:
            self._containers(lines, e, s, attribution, inp.pids)
        odd = implausible(s)
        if odd:
            sub = pre.setdefault("implausible", {})
            out = lines[index[C.IMPLAUSIBLE]]
            for reason, n in odd:
                p = sub.get(reason)
                if p is None:
                    p = sub[reason] = prefix(C.IMPLAUSIBLE, {**e.labels, "reason": reason})
                out.append(p + text(n))

    def _mapping(
        self, out: list[str], e: _Device, attr: str, name: str, label: str | None, m: Mapping[Any, float]
    ) -> None:
        """The series of one mapping field, in the reference's order (sorted by key), labelled ``label`` =
        ``str(key)``, or (``label`` None: link_errors) ``link``, ``type`` from a (link, type) key."""
        keys = tuple(m)
        plan = e.prefixes.get(attr)
        if plan is None or plan.keys != keys:
            plan = e.prefixes[attr] = self._plan(keys, name, e.labels, label)
        vs = tuple(m.values())
        if plan.lines is not None and vs == plan.values and tuple(map(type, vs)) == plan.types:
            out += plan.lines  # the same values as last poll (counters, states): the same lines
            return
        values = self._values
        text = self._text
        lines = [p + (values.get(vs[j]) or text(vs[j])) for j, p in plan.order]
        out += lines
        # Equal values of equal types print alike, except 0.0 and -0.0: kept only without float zeros.
        if any(type(v) is float and not v for v in vs):
            plan.lines = None
        else:
            plan.values, plan.types, plan.lines = vs, tuple(map(type, vs)), lines

    def _combined(
        self,
        out: list[str],
        e: _Device,
        attr: str,
        name: str,
        labelnames: tuple[str, ...],
        m: Mapping[Any, float],
        labels: dict[str, str] | None = None,
    ) -> None:
        """The series of one mapping field with a breakdown off: keys (one value, or a tuple of one per
        ``labelnames``) grouped by the labels the breakdown keeps, values combined in sorted key order,
        groups in the order first seen (as ``_Families`` does over the reference's series)."""
        keys = tuple(m)
        plan = e.prefixes.get(attr)
        if not isinstance(plan, _Combined) or plan.keys != keys:
            plan = e.prefixes[attr] = self._combined_plan(
                keys, name, e.labels if labels is None else labels, labelnames
            )
        vs = tuple(m.values())
        if plan.lines is not None and vs == plan.values and tuple(map(type, vs)) == plan.types:
            out += plan.lines
            return
        combine = _COMBINE[self._drop[name][1]]
        acc: list[float | None] = [None] * len(plan.prefixes)
        for j, g in plan.order:
            v = float(vs[j])
            a = acc[g]
            acc[g] = v if a is None else combine(a, v)
        text = self._text
        lines = [p + text(a) for p, a in zip(plan.prefixes, acc, strict=True) if a is not None]
        out += lines
        if any(type(v) is float and not v for v in vs):
            plan.lines = None
        else:
            plan.values, plan.types, plan.lines = vs, tuple(map(type, vs)), lines

    def _combined_plan(
        self, keys: tuple[Any, ...], name: str, labels: dict[str, str], labelnames: tuple[str, ...]
    ) -> _Combined:
        dropped = self._drop[name][0]
        kept = [i for i, label in enumerate(labelnames) if label not in dropped]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        parts = [keys[j] if len(labelnames) > 1 else (keys[j],) for j in range(len(keys))]
        exact = all(type(x) is str for k in parts for x in k)
        groups: dict[tuple[str, ...], int] = {}
        pairs = tuple(
            (j, groups.setdefault(tuple(str(parts[j][i]) for i in kept), len(groups))) for j in order
        )
        base = {k: v for k, v in labels.items() if k not in dropped}
        prefixes = [
            self._make(name, {**base, **{labelnames[i]: g[x] for x, i in enumerate(kept)}}) for g in groups
        ]
        return _Combined(keys if exact else None, pairs, prefixes)

    def _plan(self, keys: tuple[Any, ...], name: str, labels: dict[str, str], label: str | None) -> _Plan:
        # Dict keys are pairwise unequal, so sorting them orders the items as the reference's
        # sorted(items()) does. The plan is reused only for str keys: 1, 1.0 and True are equal keys
        # whose labels differ.
        order = sorted(range(len(keys)), key=keys.__getitem__)
        if label is None:
            exact = all(type(a) is str and type(b) is str for a, b in keys)
            made = [(j, {**labels, "link": str(keys[j][0]), "type": str(keys[j][1])}) for j in order]
        else:
            exact = all(type(k) is str for k in keys)
            made = [(j, {**labels, label: str(keys[j])}) for j in order]
        return _Plan(keys if exact else None, tuple((j, self._make(name, ls)) for j, ls in made))

    def _slices(
        self, lines: list[list[str]], e: _Device, slices: Sequence[Slice], attribution: Attribution
    ) -> None:
        sub = e.prefixes.setdefault("slices", {})
        info = lines[self._index[C.SLICE_INFO]]
        one = self._text(1)
        for sl in slices:
            hs = attribution.for_slice(sl)
            sk = (sl.parent_uuid, sl.slice_id, sl.profile, sl.kind, sl.uuid, hs[0] if len(hs) == 1 else None)
            ps = sub.get(sk)
            if ps is None:
                labels = {
                    **e.ident,
                    "uuid": sl.parent_uuid or e.ident["uuid"],
                    "slice_id": sl.slice_id,
                    "profile": sl.profile,
                    "slice_kind": sl.kind,
                    **_pod_labels(hs),
                }
                ps = sub[sk] = (
                    self._make(C.SLICE_INFO, {**labels, "slice_uuid": sl.uuid or ""}),
                    *(self._make(name, labels) for _, name, _ in self._slice_scalars),
                )
            info.append(ps[0] + one)
            for (attr, _, i), p in zip(self._slice_scalars, ps[1:], strict=True):
                v = getattr(sl, attr)
                if v is not None:
                    lines[i].append(p + self._text(v))

    def _containers(
        self,
        lines: list[list[str]],
        e: _Device,
        s: DeviceSample,
        attribution: Attribution,
        pid_containers: Mapping[int, ContainerRef | None],
    ) -> None:
        """As ``_containers`` of ``families()``."""
        held: dict[tuple[str, str, str], float] = {}
        for proc in s.processes or ():
            if proc.memory_used_bytes is None:
                continue
            ref = pid_containers.get(proc.pid)
            h = attribution.for_container(ref.container_id) if ref is not None and ref.container_id else None
            key = (h.namespace, h.pod, h.container) if h is not None else ("", "", "")
            held[key] = held.get(key, 0.0) + proc.memory_used_bytes
        if not held:
            return
        out = lines[self._index[C.CONTAINER_MEMORY_USED]]
        if C.CONTAINER_MEMORY_USED in self._drop:
            names = ("namespace", "pod", "container")
            self._combined(out, e, "containers+", C.CONTAINER_MEMORY_USED, names, held, e.ident)
            return
        sub = e.prefixes.setdefault("containers", {})
        for key, used in sorted(held.items()):
            p = sub.get(key)
            if p is None:
                ns, pod, ctr = key
                p = sub[key] = self._make(
                    C.CONTAINER_MEMORY_USED, {**e.ident, "namespace": ns, "pod": pod, "container": ctr}
                )
            out.append(p + self._text(used))

    def _exporter(self, lines: list[list[str]], inp: RenderInputs) -> None:
        """The exporter's own families (a few series per backend): label sets built each render."""
        for name, labels, value in _exporter_series(inp.views, inp.mapping_up, inp.status, inp.job_status):
            lines[self._index[name]].append(self._prefix(name, labels) + self._text(value))


class Collector(_ClientCollector):
    """prometheus-client custom collector over a poller and an attribution source.

    ``views(now)`` is typically ``Poller.view``; ``clock`` gives ``now`` (Unix seconds). Each ``collect()``
    builds fresh families; register it on a private ``CollectorRegistry``.
    """

    def __init__(
        self,
        node: str,
        views: Callable[[float], Sequence[BackendView]],
        attribution: AttributionSource,
        clock: Callable[[], float],
        status: Callable[[], MappingStatus | None] | None = None,
        pid_lookup: Callable[[int], ContainerRef | None] | None = None,
        selection: Selection | None = None,
        job_status: Callable[[], MappingStatus | None] | None = None,
    ) -> None:
        self.node = node
        self._views = views
        self._attribution = attribution
        self._clock = clock
        self._status = status
        self._job_status = job_status
        self._pid_lookup = pid_lookup
        self.catalog = C.by_name()
        self.selection = Selection.default() if selection is None else selection
        self._defs = {n: d for n, d in self.catalog.items() if self.selection.family_on(n)}
        self._warned: set[str] = set()

    def render_key(self) -> tuple[object, ...]:
        """A value that changes whenever ``collect()`` would yield different families."""
        attribution = self._attribution.current()
        views = self._views(self._clock())
        status = self._status() if self._status is not None else None
        job_status = self._job_status() if self._job_status is not None else None
        return (tuple(v.cache_key for v in views), attribution, self._attribution.up(), status, job_status)

    def polls(self) -> int:
        """How many polls have completed, over all backends (each one changes ``render_key``): a body
        rendered after reading ``polls() == k`` holds the state of poll ``k`` or newer."""
        return sum(v.generation for v in self._views(self._clock()))

    @property
    def defs(self) -> Mapping[str, C.MetricDef]:
        """The families it renders (the catalog's, less those the selection switches off), in order."""
        return self._defs

    def inputs(self) -> RenderInputs:
        """Read the poller, the attribution and (pod mapping on) each device process's container, once."""
        views = tuple(self._views(self._clock()))
        pids: dict[int, ContainerRef | None] | None = None
        if self._pid_lookup is not None:
            pids = {}  # a read of /proc/<pid>/cgroup per process on a device, per render
            for view in views:
                for s in view.samples:
                    for p in s.processes or ():
                        if p.pid not in pids:
                            pids[p.pid] = self._pid_lookup(p.pid)
        return RenderInputs(
            self.node,
            views,
            self._attribution.current(),
            self._attribution.up(),
            self._status() if self._status is not None else None,
            pids,
            self._job_status() if self._job_status is not None else None,
        )

    def warn_unknown(self, unknown: set[str]) -> None:
        """Log, once per name, the vendor metrics a backend returned that no registration declares."""
        for name in sorted(unknown - self._warned):
            log.warning("vendor metric %s is not declared by any backend registration; not exported", name)
        self._warned |= unknown

    def collect(self) -> Iterator[Metric]:
        inp = self.inputs()
        unknown: set[str] = set()
        fams = families(
            inp.node,
            inp.views,
            inp.attribution,
            inp.mapping_up,
            self.catalog,
            unknown,
            inp.status,
            inp.pids,
            self.selection,
            inp.job_status,
        )
        self.warn_unknown(unknown)
        yield from fams
