"""Attribution stage: which containers or batch jobs hold which device or slice, fed to the collector as labels.

The collector asks an ``AttributionSource`` for the current ``Attribution`` once per render. A source that
fails only drops holder labels (``xpuwatch_pod_mapping_up 0`` / ``xpuwatch_job_mapping_up 0``, after a grace
period); device series are never lost because of it.
Sources here: a static one (tests, fixed mappings), the simulator's (sim pods from the sim timeline) and the
merge of two (a node with both a kubelet and a Slurm job mapping). The kubelet PodResources source
(``exporter.podsource``) and the Slurm job mapping directory (``exporter.jobmap``) implement the same protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from xpuwatch.vendors.base import Slice

WorkloadKind = Literal["notebook", "job", "service", "unknown"]
WORKLOAD_KINDS: tuple[str, ...] = ("notebook", "job", "service", "unknown")


@dataclass(frozen=True, order=True)
class Holder:
    """One container, or one batch-scheduler job, holding a device or slice.

    ``workload_kind`` is notebook|job|service|unknown; ``owner`` is the user name for notebooks, else "".
    A Slurm job (``Holder.batch_job``) has no namespace, pod or container: ``job_id``, ``job_user`` and
    ``job_partition`` (AMD device-metrics-exporter's label names) say who holds the card, ``workload_kind`` is
    ``job`` and ``owner`` the job's user.
    """

    namespace: str
    pod: str
    container: str
    workload_kind: str = "unknown"
    owner: str = ""
    promoted: tuple[tuple[str, str], ...] = ()
    """Pod labels and annotations promoted to series labels by the allow-lists (``label_<key>`` /
    ``annotation_<key>``, exporter.workload.promote), on ``accelerator_allocated`` only."""
    job_id: str = ""
    job_user: str = ""
    job_partition: str = ""

    def __post_init__(self) -> None:
        if self.workload_kind not in WORKLOAD_KINDS:
            raise ValueError(
                f"workload_kind {self.workload_kind!r} is not one of {', '.join(WORKLOAD_KINDS)}"
            )

    @classmethod
    def batch_job(cls, job_id: str, user: str = "", partition: str = "") -> Holder:
        """A batch job (Slurm) holding the device: ``workload_kind="job"``, ``owner`` its user."""
        return cls("", "", "", "job", user, job_id=job_id, job_user=user, job_partition=partition)

    def labels(self) -> dict[str, str]:
        """The labels naming this holder on a device's or slice's series when it is the only holder:
        ``namespace``/``pod``/``container`` for a container, ``job_id``/``job_user``/``job_partition`` for a
        batch job."""
        if self.job_id:
            return {"job_id": self.job_id, "job_user": self.job_user, "job_partition": self.job_partition}
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container}


def slice_key(parent_uuid: str, slice_id: str) -> str:
    """Attribution key of a slice that has no uuid of its own (a vGPU share): ``<parent uuid>/<slice id>``."""
    return f"{parent_uuid}/{slice_id}"


@dataclass(frozen=True)
class Attribution:
    """Holders by key: a device uuid, a MIG device uuid (``MIG-...``), or ``slice_key(parent, slice_id)``.

    Stored as a sorted tuple so that two equal mappings compare equal (the exposition cache relies on it).
    """

    entries: tuple[tuple[str, tuple[Holder, ...]], ...] = ()
    containers: tuple[tuple[str, Holder], ...] = ()
    """Runtime container ID -> the container (every container of the node's pods, holding a device or not):
    names the processes found on a device (``exporter.cgroup``)."""
    _index: dict[str, tuple[Holder, ...]] = field(default_factory=dict, compare=False, repr=False, hash=False)
    _containers: dict[str, Holder] = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        self._index.update(self.entries)
        self._containers.update(self.containers)

    @classmethod
    def of(
        cls, holders: Mapping[str, Iterable[Holder]], containers: Mapping[str, Holder] | None = None
    ) -> Attribution:
        """Build from ``{key: holders}``; holders are de-duplicated and sorted, empty keys dropped."""
        items = tuple(sorted((k, tuple(sorted(set(hs)))) for k, hs in holders.items() if k and tuple(hs)))
        return cls(items, tuple(sorted((containers or {}).items())))

    def for_container(self, container_id: str) -> Holder | None:
        """The container with this runtime ID, if the pod list names it."""
        return self._containers.get(container_id)

    def for_device(self, uuid: str) -> tuple[Holder, ...]:
        """Holders of the whole device."""
        return self._index.get(uuid, ())

    def merged(self, other: Attribution) -> Attribution:
        """Both attributions' holders together (a key held in both keeps every holder of either)."""
        if not other.entries and not other.containers:
            return self
        if not self.entries and not self.containers:
            return other
        table: dict[str, list[Holder]] = {k: list(hs) for k, hs in self.entries}
        for k, hs in other.entries:
            table.setdefault(k, []).extend(hs)
        return Attribution.of(table, {**dict(self.containers), **dict(other.containers)})

    def for_slice(self, s: Slice) -> tuple[Holder, ...]:
        """Holders of one slice: by its own uuid when it has one, else by ``slice_key``."""
        if s.uuid:
            hit = self._index.get(s.uuid)
            if hit:
                return hit
        return self._index.get(slice_key(s.parent_uuid, s.slice_id), ())


EMPTY = Attribution()


@dataclass(frozen=True)
class MappingStatus:
    """Health of a refreshed mapping, for the exporter's self-metrics.

    ``up``: the last refresh succeeded. ``last_success``: Unix time of the last successful refresh (None
    before the first). ``unmatched``: (resource name, allocated IDs matching no device) at the last
    successful refresh, DRA claims as ``dra:<driver>``. ``reassigned``: (resource name, allocated IDs whose
    device the device plugin's pod annotation corrected, 0 included) at the last successful refresh."""

    up: bool
    last_success: float | None = None
    unmatched: tuple[tuple[str, int], ...] = ()
    reassigned: tuple[tuple[str, int], ...] = ()


class AttributionSource(Protocol):
    """Where holders come from. ``current`` never raises and never blocks on I/O (it returns the last
    refresh); ``up`` is True/False for the last refresh, None when no pod mapping is configured."""

    def current(self) -> Attribution: ...

    def up(self) -> bool | None: ...


class StaticAttributionSource:
    """A fixed attribution (tests, or a node without Kubernetes: ``up()`` is None, no self-metric)."""

    def __init__(self, attribution: Attribution = EMPTY, up: bool | None = None) -> None:
        self._attribution = attribution
        self._up = up

    def current(self) -> Attribution:
        return self._attribution

    def up(self) -> bool | None:
        return self._up


class MergedAttributionSource:
    """Two sources' holders together: the primary (the kubelet's, or the simulator's pods) and a second one
    (the Slurm job mapping). ``up`` is the primary's (``xpuwatch_pod_mapping_up``); the second reports its
    own health through its status. The merge is redone only when either part changes (``current`` of both
    returns the same object while nothing changed)."""

    def __init__(self, primary: AttributionSource, second: AttributionSource) -> None:
        self._primary = primary
        self._second = second
        self._lock = threading.Lock()
        self._parts: tuple[Attribution, Attribution] | None = None
        self._last = EMPTY

    def current(self) -> Attribution:
        a, b = self._primary.current(), self._second.current()
        with self._lock:
            if self._parts is None or self._parts[0] is not a or self._parts[1] is not b:
                self._parts = (a, b)
                self._last = a.merged(b)
            return self._last

    def up(self) -> bool | None:
        return self._primary.up()


class TimelineAttributionSource:
    """Attribution that changes with time (the simulator's pods).

    ``raw_at(now)`` returns ``{key: items}`` and must return the *same object* while nothing changed (the
    simulator memoises per timeline step); ``convert`` turns one item into a Holder; ``container_id`` (given)
    names each item's runtime container, so processes on a device are summed per container. The conversion runs
    only when the raw mapping object changes, so scrape-time checks stay cheap at 512 devices.
    """

    def __init__(
        self,
        raw_at: Callable[[float], Mapping[str, Iterable[Any]]],
        convert: Callable[[Any], Holder],
        clock: Callable[[], float],
        container_id: Callable[[Any], str] | None = None,
    ) -> None:
        self._raw_at = raw_at
        self._convert = convert
        self._container_id = container_id
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: object = None
        self._last = EMPTY

    def current(self) -> Attribution:
        raw = self._raw_at(self._clock())
        with self._lock:
            if raw is not self._raw:
                self._raw = raw
                cid = self._container_id
                containers = {cid(x): self._convert(x) for v in raw.values() for x in v} if cid else None
                self._last = Attribution.of(
                    {k: [self._convert(x) for x in v] for k, v in raw.items()}, containers
                )
            return self._last

    def up(self) -> bool | None:
        return True
