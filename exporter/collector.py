"""Collector: turns the poller's backend views plus pod attribution into Prometheus metric families.

``families()`` is the pure mapping (views, attribution, node) -> metric families, driven entirely by
``exporter.catalog``: every family's name, type, unit and help come from the catalog, and the exposition
text is written by prometheus-client. ``Collector`` wraps it as a prometheus-client custom collector that
builds the families fresh on each ``collect()``.

Labelling (the contract): device series carry ``DEVICE_LABELS``, plus ``namespace/pod/container`` when
exactly one container holds the whole device. ``accelerator_allocated`` has one series per holder of the
device or of any of its slices. Slice series carry ``SLICE_LABELS`` (``uuid`` is the parent's), plus the
slice holder's pod labels when exactly one container holds it. ``accelerator_container_memory_used_bytes`` has
one series per container with processes on the device (``container=""`` for processes of no named container),
never the device holder's labels. A device that is not up exports only
``accelerator_up 0``, ``accelerator_info`` and its allocation. A backend past its staleness bound exports no
device series at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as _ClientCollector

from exporter import catalog as C
from exporter.attribution import Attribution, AttributionSource, Holder, MappingStatus
from exporter.cgroup import ContainerRef
from exporter.poller import BackendView
from vendors.base import DeviceSample, Slice, merge_samples

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


class _Families:
    """Metric families being built for one render, in catalog order, created on first sample."""

    def __init__(self, defs: Mapping[str, C.MetricDef]) -> None:
        self._defs = defs
        self._built: dict[str, Metric] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        fam = self._built.get(name)
        if fam is None:
            d = self._defs[name]
            suffix = _SUFFIX.get(d.type, "")
            base = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
            unit = d.unit if d.unit and base.endswith("_" + d.unit) else ""
            fam = self._built[name] = Metric(base, d.help, d.type, unit)
        fam.add_sample(name, labels, float(value))

    def result(self) -> list[Metric]:
        return [self._built[n] for n in self._defs if n in self._built]


def _pod_labels(holders: Sequence[Holder]) -> dict[str, str]:
    if len(holders) != 1:
        return {}
    h = holders[0]
    return {"namespace": h.namespace, "pod": h.pod, "container": h.container}


def families(
    node: str,
    views: Iterable[BackendView],
    attribution: Attribution,
    mapping_up: bool | None,
    defs: Mapping[str, C.MetricDef] | None = None,
    unknown: set[str] | None = None,
    mapping_status: MappingStatus | None = None,
    pid_containers: Mapping[int, ContainerRef | None] | None = None,
) -> list[Metric]:
    """Render every family for one instant. Pure: same inputs, same families.

    ``unknown`` collects vendor metric names a backend returned that no registration declares (not
    exported; the caller logs them once). ``mapping_status`` adds the pod mapping's last success and
    unmatched IDs; ``pid_containers`` (host PID -> its container, None for none) names the processes of
    ``DeviceSample.processes``: given (pod mapping on), ``accelerator_container_memory_used_bytes`` is
    rendered, pids it lacks counting under ``container=""``; None (no Kubernetes), it is not.
    """
    out = _Families(defs if defs is not None else C.by_name())
    views = tuple(views)
    for s in _merged(views):
        _device(out, node, s, attribution, unknown, pid_containers)
    for view in views:
        b = {"backend": view.backend}
        out.add(C.BACKEND_UP, b, 1 if view.up else 0)
        if view.poll_duration is not None:
            out.add(C.BACKEND_POLL_DURATION, b, view.poll_duration)
        for reason, n in sorted(view.errors.items()):
            out.add(C.BACKEND_ERRORS, {**b, "reason": reason}, n)
        if view.last_success is not None:
            out.add(C.BACKEND_LAST_SUCCESS, b, view.last_success)
        out.add(C.BACKEND_DEVICES, b, view.devices)
    if mapping_up is not None:
        out.add(C.POD_MAPPING_UP, {}, 1 if mapping_up else 0)
    if mapping_status is not None:
        if mapping_status.last_success is not None:
            out.add(C.POD_MAPPING_LAST_SUCCESS, {}, mapping_status.last_success)
        for resource, n in mapping_status.unmatched:
            out.add(C.POD_MAPPING_UNMATCHED, {"resource": resource}, n)
    return out.result()


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
    holders = set(device_holders)
    if s.up:
        for sl in s.slices:
            holders.update(attribution.for_slice(sl))
    for h in sorted(holders):
        out.add(
            C.ALLOCATED,
            {
                **ident,
                "namespace": h.namespace,
                "pod": h.pod,
                "container": h.container,
                "workload_kind": h.workload_kind,
                "owner": h.owner,
            },
            1,
        )
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
    ) -> None:
        self.node = node
        self._views = views
        self._attribution = attribution
        self._clock = clock
        self._status = status
        self._pid_lookup = pid_lookup
        self._defs = C.by_name()
        self._warned: set[str] = set()

    def render_key(self) -> tuple[object, ...]:
        """A value that changes whenever ``collect()`` would yield different families."""
        attribution = self._attribution.current()
        views = self._views(self._clock())
        status = self._status() if self._status is not None else None
        return (tuple(v.cache_key for v in views), attribution, self._attribution.up(), status)

    def collect(self) -> Iterator[Metric]:
        unknown: set[str] = set()
        views = self._views(self._clock())
        pids: dict[int, ContainerRef | None] | None = None
        if self._pid_lookup is not None:
            pids = {}  # a read of /proc/<pid>/cgroup per process on a device, per render
            for view in views:
                for s in view.samples:
                    for p in s.processes or ():
                        if p.pid not in pids:
                            pids[p.pid] = self._pid_lookup(p.pid)
        fams = families(
            self.node,
            views,
            self._attribution.current(),
            self._attribution.up(),
            self._defs,
            unknown,
            self._status() if self._status is not None else None,
            pids,
        )
        for name in sorted(unknown - self._warned):
            log.warning("vendor metric %s is not declared by any backend registration; not exported", name)
        self._warned |= unknown
        yield from fams
