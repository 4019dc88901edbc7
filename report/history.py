"""Synthetic fleet history -> OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`: the
baseline report's test bed and benchmark, and a way to try `xpuwatch report` without a week of waiting.

The fleet is deterministic (a function of the device count and the time) and shaped like the field report's
clusters: pools of A100, H100, Ascend 910B and MI300X; training jobs that run a day/night curve, inference
services at a steady level, development notebooks that hold memory with compute near 0, free cards, MIG
slices sized too small for their tenant, and pods that wait for cards in the afternoon. ``point`` gives one
device's readings at a time and ``waiting`` the pods pending then, so a test can compute the report's
figures from the same model it backfilled. Series carry the exporter's names and labels
(``exporter.catalog``) and the kube-state-metrics names ``alerts.queue`` reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts import queue
from xpuwatch.exporter import catalog as c

GIB = 1024.0**3
DAY = 86400

# (vendor, model, framebuffer bytes, kube-state-metrics resource, training base and day swing of utilization)
POOLS = (
    ("nvidia", "NVIDIA A100-SXM4-80GB", 80 * GIB, "nvidia_com_gpu", 0.55, 0.4),
    ("nvidia", "NVIDIA H100 80GB HBM3", 80 * GIB, "nvidia_com_gpu", 0.7, 0.25),
    ("huawei", "Ascend910B", 64 * GIB, "huawei_com_Ascend910", 0.45, 0.3),
    ("amd", "AMD Instinct MI300X", 192 * GIB, "amd_com_gpu", 0.35, 0.3),
)
# Workload shapes, cycled over each pool's devices: what holds the card and how it behaves.
SHAPES = ("training", "training", "inference", "notebook", "training", "free", "inference", "hoarder")


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str
    workload_kind: str
    owner: str


@dataclass(frozen=True)
class HistoryDevice:
    node: str
    vendor: str
    model: str
    device: str
    uuid: str
    memory_total_bytes: float
    resource: str
    base: float
    swing: float
    shape: str
    holder: Holder | None
    slice_id: str | None = None  # a MIG slice (1g.10gb) on this device, held by the notebook shape


@dataclass(frozen=True)
class Point:
    """One device's readings at one time: ratios 0..1, bytes."""

    utilization: float
    sm_occupancy: float
    memory_used_bytes: float
    slice_memory_used_bytes: float | None = None
    slice_memory_limit_bytes: float | None = None
    slice_utilization: float | None = None


@dataclass(frozen=True)
class WaitingPod:
    namespace: str
    pod: str
    resource: str
    count: int
    created: float  # Unix seconds


def fleet(devices: int) -> tuple[HistoryDevice, ...]:
    """``devices`` devices, 4 per node, the pools in turn (node n belongs to pool n % 4)."""
    out = []
    for i in range(devices):
        node_index, dev = divmod(i, 4)
        vendor, model, total, resource, base, swing = POOLS[node_index % len(POOLS)]
        shape = SHAPES[(i + 3 * node_index) % len(SHAPES)]
        holder = None
        if shape != "free":
            kind = {"training": "job", "inference": "service", "notebook": "notebook", "hoarder": "job"}[
                shape
            ]
            team = ("ml", "nlp", "vision", "search")[i % 4]
            pod = {
                "training": f"train-{i}",
                "inference": f"infer-{i}",
                "notebook": f"jupyter-user{i}",
                "hoarder": f"stale-{i}",
            }[shape]
            holder = Holder(team, pod, "main", kind, f"user{i % 5}" if kind == "notebook" else team)
        uuid = f"{vendor.upper()}-{node_index:02d}{dev:02d}"
        out.append(
            HistoryDevice(
                node=f"gpu-node-{node_index:02d}",
                vendor=vendor,
                model=model,
                device=f"{dev}" if vendor != "huawei" else f"{dev}-0",
                uuid=uuid,
                memory_total_bytes=total,
                resource=resource,
                base=base,
                swing=swing,
                shape=shape,
                holder=holder,
                slice_id="1/0" if shape == "notebook" and vendor == "nvidia" else None,
            )
        )
    return tuple(out)


def _day_curve(t: float) -> float:
    """0..1, peaking at 14:00 UTC and lowest at 02:00: the working day of the teams that submit jobs."""
    return 0.5 + 0.5 * math.cos(2 * math.pi * ((t % DAY) / DAY - 14 / 24))


# What the change at ``change_at`` does (the improvement a before/after report has to show): training jobs
# are packed onto the cards (+0.15 utilization), idle notebooks are culled (their cards freed), and the
# freed capacity shortens the afternoon queue to 30 minutes.
CHANGE_TRAINING_GAIN = 0.15
CHANGE_WAIT_SECONDS = 1800


def held(d: HistoryDevice, t: float, change_at: float | None = None) -> bool:
    """Whether ``d``'s holder holds it at ``t``: always, except notebooks culled by the change."""
    if d.holder is None:
        return False
    return not (d.shape == "notebook" and change_at is not None and t >= change_at)


def point(d: HistoryDevice, t: float, change_at: float | None = None) -> Point:
    """Readings of device ``d`` at Unix time ``t`` (deterministic); from ``change_at`` on (when given) the
    fleet after the change."""
    wobble = 0.03 * math.sin(t / 977.0 + len(d.uuid) + int(d.uuid[-2:]))
    total = d.memory_total_bytes
    changed = change_at is not None and t >= change_at
    if d.shape == "training":
        gain = CHANGE_TRAINING_GAIN if changed else 0.0
        u = min(1.0, d.base + gain + d.swing * _day_curve(t) + wobble)
        return Point(u, min(1.0, (0.5 + d.base / 2) * u), (0.6 + d.base / 2) * total)
    if d.shape == "inference":
        u = d.base / 2 + 0.1 + wobble
        return Point(u, 0.6 * u, (0.2 + d.base / 3) * total)
    if d.shape == "notebook" and changed:
        if d.slice_id is not None:
            return Point(0.0, 0.0, 0.0, 0.0, 10 * GIB, 0.0)
        return Point(0.0, 0.0, 0.0)
    if d.shape == "notebook":
        mem = 12 * GIB
        if d.slice_id is not None:
            return Point(0.0, 0.0, mem, 9.6 * GIB, 10 * GIB, 0.01)
        return Point(0.0, 0.0, mem)
    if d.shape == "hoarder":
        return Point(0.01, 0.0, 0.6 * total)
    return Point(0.0, 0.0, 0.0)  # free


IDLE_WATTS, BUSY_WATTS = 60.0, 340.0
ENERGY_COUNTER_VENDORS = ("nvidia", "amd")  # Ascend's npu-smi reports power but no energy counter


def power_watts(d: HistoryDevice, t: float, change_at: float | None = None) -> float:
    """Power draw of ``d`` at ``t``: 60 W idle plus 340 W at full utilization."""
    return IDLE_WATTS + BUSY_WATTS * point(d, t, change_at).utilization


def waiting(t: float, start: float, change_at: float | None = None) -> tuple[WaitingPod, ...]:
    """Pods pending for a card at ``t``: each afternoon (13:00-17:00 UTC) one NVIDIA job waits from 13:00 and
    one Ascend job from 15:00; nothing waits otherwise. From ``change_at`` on each waits at most
    ``CHANGE_WAIT_SECONDS``."""
    day0 = t - t % DAY
    out = []
    for ns, name, resource, count, hour in (
        ("ml", "big-train", "nvidia_com_gpu", 8, 13),
        ("nlp", "ft", "huawei_com_Ascend910", 4, 15),
    ):
        created = day0 + hour * 3600
        until = day0 + 17 * 3600
        if change_at is not None and t >= change_at:
            until = min(until, created + CHANGE_WAIT_SECONDS)
        if created <= t < until and created >= start:
            out.append(WaitingPod(ns, f"{name}-{int(day0 // DAY)}", resource, count, created))
    return tuple(out)


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def _num(v: float) -> str:
    return repr(float(v))


def times(start: int, end: int, step: int, change_at: int | None = None) -> list[int]:
    """The sample times of ``openmetrics``: every ``step`` from ``start`` to ``end``, without ``change_at``
    itself (one scrape missed while the change rolled out), so no window ending at the change sees after-
    change data, whichever end of a range Prometheus includes."""
    return [t for t in range(start - start % step, end + 1, step) if t != change_at]


def openmetrics(devices: int, start: int, end: int, step: int, change_at: int | None = None) -> Iterator[str]:
    """OpenMetrics exposition lines (with timestamps, families contiguous, ``# EOF`` last) of the fleet from
    ``start`` to ``end`` (Unix seconds, inclusive) every ``step`` seconds; with ``change_at``, the fleet
    changes then (``point``, ``held``, ``waiting``)."""
    ds = fleet(devices)
    times_ = times(start, end, step, change_at)
    ident = {
        d.uuid: dict(node=d.node, vendor=d.vendor, model=d.model, device=d.device, uuid=d.uuid) for d in ds
    }
    base = {"job": "xpuwatch", "instance": "sim:9851"}

    def family(
        name: str, series: Sequence[tuple[str, Any]], value: Callable[[Any, int], float | None]
    ) -> Iterator[str]:
        yield f"# TYPE {name} gauge"
        for labels, key in series:
            for t in times_:
                v = value(key, t)
                if v is not None:
                    yield f"{name}{labels} {_num(v)} {t}"

    def dev_series() -> list[tuple[str, HistoryDevice]]:
        return [(_labels(**base, **ident[d.uuid]), d) for d in ds]

    yield from family(c.UP, dev_series(), lambda d, t: 1.0)
    yield from family(c.UTILIZATION, dev_series(), lambda d, t: point(d, t, change_at).utilization)
    yield from family(c.SM_OCCUPANCY, dev_series(), lambda d, t: point(d, t, change_at).sm_occupancy)
    yield from family(c.MEMORY_USED, dev_series(), lambda d, t: point(d, t, change_at).memory_used_bytes)
    yield from family(c.MEMORY_TOTAL, dev_series(), lambda d, t: d.memory_total_bytes)
    yield from family(c.POWER, dev_series(), lambda d, t: power_watts(d, t, change_at))
    # The energy counter accumulates each sample's power over the step before it, so rate() over one step
    # is that sample's power exactly (vendors with no counter export power only).
    counters = [(labels, d) for labels, d in dev_series() if d.vendor in ENERGY_COUNTER_VENDORS]
    energy: dict[str, float] = {}

    def joules(d: HistoryDevice, t: int) -> float:
        energy[d.uuid] = energy.get(d.uuid, 1e6) + power_watts(d, t, change_at) * step
        return energy[d.uuid]

    yield f"# TYPE {c.ENERGY.removesuffix('_total')} counter"
    for line in family(c.ENERGY, counters, joules):
        if not line.startswith("#"):
            yield line
    holders = [(_labels(**base, **ident[d.uuid], **vars(d.holder)), d) for d in ds if d.holder is not None]
    yield from family(c.ALLOCATED, holders, lambda d, t: 1.0 if held(d, t, change_at) else None)
    sliced = [d for d in ds if d.slice_id is not None]

    def slice_series() -> list[tuple[str, HistoryDevice]]:
        return [
            (
                _labels(
                    **base, **ident[d.uuid], slice_id=d.slice_id or "", profile="1g.10gb", slice_kind="mig"
                ),
                d,
            )
            for d in sliced
        ]

    def at(attr: str) -> Callable[[HistoryDevice, int], float | None]:
        return lambda d, t: getattr(point(d, t, change_at), attr)

    yield from family(c.SLICE_MEMORY_USED, slice_series(), at("slice_memory_used_bytes"))
    yield from family(c.SLICE_MEMORY_LIMIT, slice_series(), at("slice_memory_limit_bytes"))
    yield from family(c.SLICE_UTILIZATION, slice_series(), at("slice_utilization"))
    # One Ascend vNPU (issue 22): the exporter gives its size only (template, memory limit, AI-core share);
    # npu-smi prints no per-vNPU usage, so it has slice_info but no used/utilization series.
    vnpu_on = [d for d in ds if d.vendor == "huawei"][:1]
    vnpu = [
        (_labels(**base, **ident[d.uuid], slice_id="100", profile="vir10_3c_16g", slice_kind="vnpu"), d)
        for d in vnpu_on
    ]
    yield "# TYPE " + c.SLICE_INFO + " gauge"
    for labels, _d in [*slice_series(), *vnpu]:
        for t in times_:
            yield f"{c.SLICE_INFO}{labels} 1.0 {t}"
    yield from _ksm(start, times_, change_at)
    yield "# EOF"


def _ksm(start: int, times: Sequence[int], change_at: int | None) -> Iterator[str]:
    """kube-state-metrics series of the waiting pods: present only while they wait, like KSM's."""
    ksm = {"job": "kube-state-metrics", "instance": "ksm:8080"}
    pods: dict[tuple[str, str], tuple[WaitingPod, list[int]]] = {}
    for t in times:
        for p in waiting(t, start, change_at):
            pods.setdefault((p.namespace, p.pod), (p, []))[1].append(t)
    families = (
        (
            queue.KSM_REQUESTS,
            lambda p: dict(container="main", resource=p.resource, unit="integer"),
            lambda p: p.count,
        ),
        (queue.KSM_PHASE, lambda p: dict(uid=p.pod, phase="Pending"), lambda p: 1),
        (queue.KSM_SCHEDULED, lambda p: dict(uid=p.pod, condition="false"), lambda p: 1),
        (queue.KSM_CREATED, lambda p: dict(uid=p.pod), lambda p: p.created),
    )
    for name, extra, value in families:
        yield f"# TYPE {name} gauge"
        for p, ts in pods.values():
            labels = _labels(**ksm, namespace=p.namespace, pod=p.pod, **extra(p))
            for t in ts:
                yield f"{name}{labels} {_num(value(p))} {t}"
