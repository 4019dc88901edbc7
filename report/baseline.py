"""Baseline figures: the field report's one-week baseline as PromQL over raw series -> frozen dataclasses.

The field report's first step of any improvement: a week per node of P95 (not average) utilization, memory,
SM occupancy, task counts and queue time; memory allocated against SM occupancy shows whether a pool lacks
memory or compute; a healthy pool sits at 70-85 %. ``QUERIES`` are the instant queries that give those
figures over a window; ``collect`` runs them (and two range queries for the curves) and ``figures`` turns
the answers into a :class:`Baseline` — pure, so tests can feed it answers.

Every query reads raw exporter series (``exporter.catalog``) and raw kube-state-metrics series
(``alerts.queue``), never the recording rules: a baseline of last week must not depend on rules that were
deployed yesterday. Thresholds come from alerts/spec.yaml (idle = the IdleNotebook alert's
``utilization_max`` and ``memory_min_bytes``; slice advice = the recording bottleneck thresholds; the
healthy band = PoolUnderused/PoolSaturated thresholds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xpuwatch.alerts import queue
from xpuwatch.alerts.promapi import DEFAULT_CONCURRENCY, Prometheus, Request, Series
from xpuwatch.alerts.selectors import team_of
from xpuwatch.alerts.spec import Spec
from xpuwatch.exporter import catalog as c
from xpuwatch.report.chargeback import Usage

IDENT = "node, vendor, model, device, uuid"
SLICE_IDENT = "node, vendor, model, device, uuid, slice_id, profile, slice_kind"
PART_IDENT = "node, device, parent_uuid, partition_id, compute_partition, memory_partition"
GIB = 1024.0**3


class ReportError(Exception):
    """The report cannot be made from what Prometheus holds (no xpuwatch series in the window). Prometheus
    unreachable or refusing a query is ``promapi.PromError``."""


ENERGY_RATE_MIN_S = 300
"""Shortest window for the energy counter's rate() (``Window.energy_window``): two samples at scrape intervals
up to 2.5 minutes, whether range windows are closed (Prometheus 2) or left-open (Prometheus 3)."""


@dataclass(frozen=True)
class Window:
    """The report's time range: ``end`` Unix seconds, ``seconds`` long, subqueries every ``step`` seconds."""

    end: float
    seconds: int
    step: int

    @property
    def range(self) -> str:
        return f"{self.seconds}s"

    @property
    def sub(self) -> str:
        return f"[{self.seconds}s:{self.step}s]"

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def energy_window(self) -> int:
        """Seconds of the energy counter's ``rate()`` at each step: the step, at least ``ENERGY_RATE_MIN_S``.
        rate() needs two samples in its window; a window of one step held one sample (or none) whenever the
        step was shorter than twice the scrape interval (a 1-day report's 1-minute step over 1-minute
        scrapes on Prometheus 3's left-open windows), and NVIDIA/AMD energy came out as 0 kWh. The longer
        window averages the last 5 minutes: each step's joules are still rate x step, so a card's total
        holds; a holder change moves up to 5 minutes of energy to its neighbour."""
        return max(self.step, ENERGY_RATE_MIN_S)


@dataclass(frozen=True)
class PoolUtil:
    vendor: str
    model: str
    devices: int
    avg: float  # mean utilization ratio over the window
    p95: float  # P95 over the window of the pool's mean utilization at each step
    sm_occupancy: float = math.nan  # mean SM occupancy ratio (NaN: no device of the pool reports it)


@dataclass(frozen=True)
class DevicePoint:
    node: str
    vendor: str
    model: str
    device: str
    uuid: str
    memory_ratio: float  # mean device memory (framebuffer, HBM, VRAM) used / total
    compute_ratio: float  # mean SM occupancy, else mean utilization
    compute_source: str  # "sm_occupancy" | "utilization"


@dataclass(frozen=True)
class Hoarder:
    namespace: str
    owner: str
    device_hours: float  # device-hours held with memory allocated and compute ~0
    memory_gib_hours: float
    cards: float = 0.0  # device_hours / the window's hours: 336 h in a week = 2 cards all week


@dataclass(frozen=True)
class IdleNotebook:
    namespace: str
    pod: str
    owner: str
    idle_hours: float
    held_hours: float


@dataclass(frozen=True)
class SliceAdvice:
    node: str
    device: str
    slice_id: str
    profile: str
    memory_ratio: float
    compute_ratio: float
    advice: str


@dataclass(frozen=True)
class Waiting:
    namespace: str
    resource: str  # as pods request it: nvidia.com/gpu (kube-state-metrics writes nvidia_com_gpu)
    pods: int
    max_wait_seconds: float


# kube-state-metrics sanitizes a resource name into a label value (nvidia.com/gpu -> nvidia_com_gpu); the
# extended resource names device plugins register are <domain>/<name>, the domain ending in one of these.
_KSM_RESOURCE = re.compile(r"^([a-z0-9][a-z0-9_-]*?)_(com|cn|io|ai|org|net)_(.+)$")


def resource_name(ksm: str) -> str:
    """A kube-state-metrics resource label as users write it: ``nvidia_com_gpu`` -> ``nvidia.com/gpu``,
    ``huawei_com_Ascend910`` -> ``huawei.com/Ascend910``; names of no domain (``cpu``) are kept."""
    m = _KSM_RESOURCE.match(ksm)
    return f"{m[1].replace('_', '.')}.{m[2]}/{m[3]}" if m else ksm


def span(seconds: float) -> str:
    """A window length in words: ``45 min``, ``36 h``, ``7 d``, ``1 d 12 h``."""
    s = int(seconds)
    if s < 3600:
        return f"{max(1, s // 60)} min" if s >= 60 else f"{s} s"
    if s < 2 * 86400 and s % 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 else "")
    d, rest = divmod(s, 86400)
    return f"{d} d" + (f" {rest // 3600} h" if rest // 3600 else "")


@dataclass(frozen=True)
class Baseline:
    window: Window
    band: tuple[float, float]
    fleet: PoolUtil
    pools: tuple[PoolUtil, ...]
    curves: Mapping[str, tuple[tuple[float, float], ...]]  # "vendor model" -> (t, mean utilization)
    devices: tuple[DevicePoint, ...]
    hoarders: tuple[Hoarder, ...]
    idle_notebooks: tuple[IdleNotebook, ...]
    slices: tuple[SliceAdvice, ...]
    waiting: tuple[Waiting, ...]
    pending_curve: tuple[tuple[float, float], ...]  # (t, accelerators requested by waiting pods)
    pods_waited: int | None  # None: no kube-state-metrics data in the window
    max_wait_seconds: float
    idle_cards_while_waiting: float | None  # mean sum(1 - utilization) while any pod waited
    idle_cards: float  # mean sum(1 - utilization) over the window
    alerts: Mapping[tuple[str, str], int]  # (category, alertname) -> alert series that fired
    usage: tuple[Usage, ...] = ()  # chargeback per (namespace, owner, vendor, model)
    notebook_memory_gib: float = 0.0  # mean device memory (GiB) held by idle notebooks over the window
    wait_p95_seconds: float = 0.0  # P95 over the pods that waited of each pod's longest wait

    @property
    def alerts_by_category(self) -> dict[str, int]:
        """Alert series that fired, per category."""
        out: dict[str, int] = {}
        for (category, _name), n in self.alerts.items():
            out[category] = out.get(category, 0) + n
        return out

    @property
    def headline(self) -> str:
        if self.pods_waited:
            return (
                f"{self.idle_cards_while_waiting or 0.0:.1f} cards' worth of capacity idle while "
                f"{self.pods_waited} jobs waited (longest wait {_duration(self.max_wait_seconds)})"
            )
        if self.pods_waited == 0:
            return f"{self.idle_cards:.1f} cards' worth of capacity idle on average; no job waited for a card"
        return (
            f"{self.idle_cards:.1f} cards' worth of capacity idle on average "
            "(no kube-state-metrics data: queue time unknown)"
        )


def _duration(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h {rest // 60:02d}m" if h else f"{rest // 60}m"


@dataclass(frozen=True)
class Query:
    key: str
    title: str  # what the progress bar says
    expr: str


def queries(spec: Spec, w: Window) -> tuple[Query, ...]:
    """The instant queries, evaluated at ``w.end``."""
    job = ", ".join(p for p in (spec.exporter_job_selector, spec.cluster_selector) if p)
    idle = spec.alert("AcceleratorIdleNotebook")
    u_max, mem_min = idle.value("utilization_max"), idle.value("memory_min_bytes")
    util, up = f"{c.UTILIZATION}{{{job}}}", f"{c.UP}{{{job}}}"
    alloc = team_of(f"{c.ALLOCATED}{{{job}}}")  # a Slurm job's team: its partition, as namespace
    used, total = f"{c.MEMORY_USED}{{{job}}}", f"{c.MEMORY_TOTAL}{{{job}}}"
    idle_dev = f"max by (node, uuid) (({util} <= {u_max}) and on (node, uuid) ({used} >= {mem_min}))"
    idle_mem = f"max by (node, uuid) ({used} and on (node, uuid) ({util} <= {u_max}) and on (node, uuid) ({used} >= {mem_min}))"
    held = f"0 * ({alloc} == 1)"
    pods = queue.pod_pending_expr(spec)
    slice_ratio = f"{c.SLICE_MEMORY_USED}{{{job}}} / ({c.SLICE_MEMORY_LIMIT}{{{job}}} > 0)"
    used_ratio = f"({used} / ({total} > 0))"
    # AMD MI300 logical GPUs carry their card's partition mode (accelerator_partition_info, value 1).
    part = (
        "* on (node, uuid) group_left (parent_uuid, partition_id, compute_partition, memory_partition) "
        f"{c.PARTITION_INFO}{{{job}}}"
    )
    r, sub = w.range, w.sub
    sm = f"{c.SM_OCCUPANCY}{{{job}}}"
    nb_held = f'0 * ({c.ALLOCATED}{{{job}, workload_kind="notebook"}} == 1)'
    created = f"max by (cluster, namespace, pod) ({queue.KSM_CREATED}{{{queue.ksm_selector(spec)}}})"
    pod_age = f"(time() - {created}) + on (cluster, namespace, pod) group_right () (0 * (({pods}) > 0))"
    # a held card's share per holder at each step (1/N for N holders), labelled with the holder
    share = f"(({alloc} == 1) / on (node, uuid) group_left () count by (node, uuid) ({alloc} == 1))"
    team = "namespace, owner, vendor, model"
    energy, power = f"{c.ENERGY}{{{job}}}", f"{c.POWER}{{{job}}}"

    def charged(title: str, key: str, per_device: str | None) -> Query:
        x = share if per_device is None else f"{share} * on (node, uuid) group_left () {per_device}"
        return Query(key, title, f"sum by ({team}) (sum_over_time(({x}){sub}))")

    return (
        charged("device-hours", "cb_steps", None),
        Query(
            "cb_idle",
            "idle device-hours",
            f"sum by ({team}) (sum_over_time(({share} and on (node, uuid) ({util} <= {u_max})){sub}))",
        ),
        charged("memory GiB-hours", "cb_mem", f"max by (node, uuid) ({used})"),
        charged("energy", "cb_energy", f"max by (node, uuid) (rate({energy}[{w.energy_window}s]))"),
        charged(
            "energy from power", "cb_power", f"max by (node, uuid) ({power} unless on (node, uuid) {energy})"
        ),
        Query(
            "devices",
            "devices seen",
            f"count by (vendor, model) (count by ({IDENT}) (count_over_time({up}[{r}])))",
        ),
        Query("pool_avg", "pool utilization", f"avg by (vendor, model) (avg_over_time({util}[{r}]))"),
        Query("pool_p95", "pool P95", f"quantile_over_time(0.95, (avg by (vendor, model) ({util})){sub})"),
        Query("fleet_avg", "fleet utilization", f"avg(avg_over_time({util}[{r}]))"),
        Query("fleet_p95", "fleet P95", f"quantile_over_time(0.95, (avg({util})){sub})"),
        Query("pool_sm", "pool SM occupancy", f"avg by (vendor, model) (avg_over_time({sm}[{r}]))"),
        Query("fleet_sm", "fleet SM occupancy", f"avg(avg_over_time({sm}[{r}]))"),
        Query(
            "nb_mem",
            "memory of idle notebooks",
            f"sum_over_time((sum({idle_mem} + on (node, uuid) group_right () {nb_held})){sub})",
        ),
        Query(
            "wait_by_pod",
            "wait per pod",
            f"max by (cluster, namespace, pod) (max_over_time(({pod_age}){sub}))",
        ),
        Query(
            "mem_ratio",
            "memory per device",
            f"avg by ({IDENT}) (avg_over_time(({used} / ({total} > 0)){sub}))",
        ),
        Query(
            "sm_occ",
            "SM occupancy per device",
            f"avg by ({IDENT}) (avg_over_time({c.SM_OCCUPANCY}{{{job}}}[{r}]))",
        ),
        Query("dev_util", "utilization per device", f"avg by ({IDENT}) (avg_over_time({util}[{r}]))"),
        Query(
            "hoard_steps",
            "hoarders",
            f"sum by (namespace, owner) (count_over_time(({idle_dev} + on (node, uuid) group_right () {held}){sub}))",
        ),
        Query(
            "hoard_mem",
            "memory hoarded",
            f"sum by (namespace, owner) (sum_over_time(({idle_mem} + on (node, uuid) group_right () {held}){sub}))",
        ),
        Query(
            "nb_idle",
            "idle notebooks",
            f'sum by (namespace, pod, owner) (count_over_time(({idle_dev} + on (node, uuid) group_right () 0 * ({c.ALLOCATED}{{{job}, workload_kind="notebook"}} == 1)){sub}))',
        ),
        Query(
            "nb_held",
            "notebooks held",
            f'sum by (namespace, pod, owner) (count_over_time(({c.ALLOCATED}{{{job}, workload_kind="notebook"}} == 1){sub}))',
        ),
        Query("slice_mem", "slice memory", f"avg by ({SLICE_IDENT}) (avg_over_time(({slice_ratio}){sub}))"),
        Query(
            "slice_compute",
            "slice compute",
            f"avg by ({SLICE_IDENT}) (avg_over_time(({c.SLICE_SM_ACTIVE}{{{job}}} or {c.SLICE_UTILIZATION}{{{job}}}){sub}))",
        ),
        Query(
            "part_mem",
            "partition memory",
            f"avg by ({PART_IDENT}) (avg_over_time(({used_ratio} {part}){sub}))",
        ),
        Query(
            "part_compute",
            "partition compute",
            f"avg by ({PART_IDENT}) (avg_over_time(({util} {part}){sub}))",
        ),
        Query(
            "slice_seen",
            "slices present",
            f"count by ({SLICE_IDENT}) (count_over_time({c.SLICE_INFO}{{{job}}}[{r}]))",
        ),
        Query(
            "pods_waited",
            "jobs waited",
            f"count(count by (cluster, namespace, pod) (count_over_time(({pods}){sub})))",
        ),
        Query(
            "ksm_seen",
            "kube-state-metrics",
            f"count(count_over_time({queue.KSM_PHASE}{{{queue.ksm_selector(spec)}}}[{r}]))",
        ),
        Query(
            "wait_by_ns",
            "queue time",
            f"max by (namespace, resource) (max_over_time(({queue.pending_age_expr(spec, pods)}){sub}))",
        ),
        Query(
            "pods_by_ns",
            "jobs waited per namespace",
            f"count by (namespace, resource) (count by (namespace, pod, resource) (count_over_time(({pods}){sub})))",
        ),
        Query(
            "idle_while_waiting",
            "idle capacity while jobs waited",
            f"avg_over_time((sum(1 - {util}) and on () (count({pods}) > 0)){sub})",
        ),
        Query("idle_cards", "idle capacity", f"avg_over_time((sum(1 - {util})){sub})"),
        Query(
            "alerts",
            "alerts fired",
            f'count by (category, alertname) (max_over_time(ALERTS{{alertstate="firing", category=~"hardware|performance"}}[{r}]))',
        ),
    )


def curve_step(w: Window) -> int:
    """Step of the plotted curves: about 400 points, never finer than the subquery step."""
    return max(w.step, math.ceil(w.seconds / 400 / w.step) * w.step)


def range_queries(spec: Spec) -> Mapping[str, str]:
    job = spec.exporter_job_selector
    return {
        "pool_curve": f"avg by (vendor, model) ({c.UTILIZATION}{{{job}}})",
        "pending_curve": f"sum({queue.pod_pending_expr(spec)})",
    }


Answers = Mapping[str, Sequence[Series]]


def collect(
    prom: Prometheus,
    spec: Spec,
    w: Window,
    progress: Callable[[str], None] = lambda _: None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Answers:
    """Run every query, at most ``concurrency`` at a time (``prom.gather``); ``progress(title)`` is called as
    each answer arrives. The device count goes first, alone: an empty Prometheus fails fast. Raises
    ReportError when Prometheus is unreachable or holds no xpuwatch series in the window."""
    step = curve_step(w)
    requests = [Request(q.key, q.expr, w.end, title=q.title) for q in queries(spec, w)] + [
        Request(key, expr, w.end, w.start + step, step, title=key.replace("_", " "))
        for key, expr in range_queries(spec).items()
    ]
    first = [r for r in requests if r.key == "devices"]
    out: dict[str, Sequence[Series]] = {}
    out |= prom.gather(first, 1, lambda r: progress(r.title))
    if not out["devices"]:
        raise ReportError(
            f"no xpuwatch series ({c.UP}{{{spec.exporter_job_selector}}}) in the {span(w.seconds)} "
            f"before {_iso(w.end)} at {prom.url}: is this Prometheus scraping the exporter under that job?"
        )
    rest = [r for r in requests if r.key != "devices"]
    out |= prom.gather(rest, concurrency, lambda r: progress(r.title))
    return out


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _v(s: Series) -> float:
    return s.values[-1][1]


def _by(answers: Answers, key: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.get(k, "") for k in labels): _v(s) for s in answers.get(key, ())}


def _scalar(answers: Answers, key: str) -> float | None:
    got = answers.get(key, ())
    return _v(got[0]) if got else None


def _advice(mem: float, comp: float, spec: Spec) -> str:
    if mem > spec.rec("bottleneck_memory_high") and comp < spec.rec("bottleneck_compute_low"):
        return "memory-bound: a profile with more memory (or fewer tenants per card)"
    if comp > spec.rec("bottleneck_compute_high") and mem < spec.rec("bottleneck_memory_low"):
        return "compute-bound: a profile with more compute, or fewer concurrent tasks"
    if mem < 0.3 and comp < 0.1:
        return "oversized: a smaller profile frees capacity"
    return "fits"


_PARTITION_ADVICE = {
    "memory-bound": "memory-bound: fewer, larger partitions (DPX or SPX), or NPS1 so each gets more memory",
    "compute-bound": "compute-bound: fewer partitions, more XCDs each (CPX -> QPX/DPX)",
    "oversized": "oversized: more partitions (DPX -> QPX/CPX) serve more tenants per card",
}


def _partition_advice(advice: str) -> str:
    """The slice advice in an AMD partition's terms: the knob is the card's compute/memory mode."""
    return _PARTITION_ADVICE.get(advice.split(":")[0], advice)


def _grid(points: Sequence[tuple[float, float]], w: Window) -> tuple[tuple[float, float], ...]:
    """A range query's points on the full grid of the window, 0 where the query had no value (nothing
    waited): a step plot must drop to 0 between waits, not hold the last value across the gap."""
    step = curve_step(w)
    have = dict(points)
    t, out = w.start + step, []
    while t <= w.end:
        out.append((t, have.get(t, 0.0)))
        t += step
    return tuple(out)


def figures(answers: Answers, spec: Spec, w: Window) -> Baseline:
    """The baseline from the query answers (pure)."""
    hours = w.step / 3600
    counts = _by(answers, "devices", "vendor", "model")
    avg = _by(answers, "pool_avg", "vendor", "model")
    p95 = _by(answers, "pool_p95", "vendor", "model")
    sm_pool = _by(answers, "pool_sm", "vendor", "model")
    pools = tuple(
        PoolUtil(k[0], k[1], int(n), avg.get(k, math.nan), p95.get(k, math.nan), sm_pool.get(k, math.nan))
        for k, n in sorted(counts.items())
    )
    fleet_sm = _scalar(answers, "fleet_sm")
    fleet = PoolUtil(
        "all",
        "fleet",
        int(sum(counts.values())),
        _scalar(answers, "fleet_avg") or 0.0,
        _scalar(answers, "fleet_p95") or 0.0,
        math.nan if fleet_sm is None else fleet_sm,
    )
    waits = [_v(s) for s in answers.get("wait_by_pod", ())]
    team = ("namespace", "owner", "vendor", "model")
    steps, idle_steps = _by(answers, "cb_steps", *team), _by(answers, "cb_idle", *team)
    mem_steps = _by(answers, "cb_mem", *team)
    joules = {k: v * w.step for k, v in _by(answers, "cb_energy", *team).items()}
    from_power = {k: v * w.step for k, v in _by(answers, "cb_power", *team).items()}
    usage = tuple(
        Usage(
            k[0],
            k[1],
            k[2],
            k[3],
            device_hours=n * hours,
            idle_hours=idle_steps.get(k, 0.0) * hours,
            memory_gib_hours=mem_steps.get(k, 0.0) * hours / GIB,
            energy_kwh=(joules.get(k, 0.0) + from_power.get(k, 0.0)) / 3.6e6,
            energy_kwh_from_power=from_power.get(k, 0.0) / 3.6e6,
        )
        for k, n in sorted(steps.items())
    )
    ident = ("node", "vendor", "model", "device", "uuid")
    mem, sm, du = (_by(answers, k, *ident) for k in ("mem_ratio", "sm_occ", "dev_util"))
    devices = tuple(
        DevicePoint(
            k[0],
            k[1],
            k[2],
            k[3],
            k[4],
            memory_ratio=m,
            compute_ratio=sm.get(k, du.get(k, math.nan)),
            compute_source="sm_occupancy" if k in sm else "utilization",
        )
        for k, m in sorted(mem.items())
    )
    hoard_mem = _by(answers, "hoard_mem", "namespace", "owner")
    hoarders = tuple(
        sorted(
            (
                Hoarder(k[0], k[1], n * hours, hoard_mem.get(k, 0.0) * hours / GIB, n * w.step / w.seconds)
                for k, n in _by(answers, "hoard_steps", "namespace", "owner").items()
                if n
            ),
            key=lambda h: (-h.device_hours, h.namespace, h.owner),  # ties in a fixed order
        )
    )
    held = _by(answers, "nb_held", "namespace", "pod", "owner")
    notebooks = tuple(
        sorted(
            (
                IdleNotebook(k[0], k[1], k[2], idle_hours=n * hours, held_hours=held.get(k, n) * hours)
                for k, n in _by(answers, "nb_idle", "namespace", "pod", "owner").items()
                if n
            ),
            key=lambda nb: (-nb.idle_hours, nb.namespace, nb.pod, nb.owner),
        )
    )
    slice_ident = ("node", "device", "slice_id", "profile")
    s_mem, s_comp = _by(answers, "slice_mem", *slice_ident), _by(answers, "slice_compute", *slice_ident)
    # Slices whose tool reports their size but no usage (Ascend vNPUs: npu-smi info -t info-vnpu and DCMI
    # give template, memory and AI-core share only) are listed too, with no ratio rather than a guess.
    seen = set(_by(answers, "slice_seen", *slice_ident)) - set(s_mem)
    slices = tuple(
        SliceAdvice(
            k[0],
            k[1],
            k[2],
            k[3],
            memory_ratio=s_mem.get(k, math.nan),
            compute_ratio=s_comp.get(k, math.nan),
            advice=(
                _advice(s_mem[k], s_comp.get(k, math.nan), spec)
                if k in s_mem
                else "no usage reading for this slice (size only, e.g. an Ascend vNPU): judge by its device"
            ),
        )
        for k in sorted({*s_mem, *seen})
    )
    part_ident = ("node", "device", "partition_id", "compute_partition", "memory_partition")
    p_mem, p_comp = _by(answers, "part_mem", *part_ident), _by(answers, "part_compute", *part_ident)
    slices += tuple(
        SliceAdvice(
            k[0],
            k[1],
            f"partition {k[2]}",
            f"{k[3] or '?'}/{k[4] or '?'}",
            memory_ratio=m,
            compute_ratio=p_comp.get(k, math.nan),
            advice=_partition_advice(_advice(m, p_comp.get(k, math.nan), spec)),
        )
        for k, m in sorted(p_mem.items())
    )
    pods_ns = _by(answers, "pods_by_ns", "namespace", "resource")
    waiting = tuple(
        Waiting(k[0], resource_name(k[1]), int(pods_ns.get(k, 0)), age)
        for k, age in sorted(_by(answers, "wait_by_ns", "namespace", "resource").items())
    )
    ksm_seen = bool(answers.get("ksm_seen"))
    waited = _scalar(answers, "pods_waited")
    curves: dict[str, tuple[tuple[float, float], ...]] = {
        f"{s.labels.get('vendor', '')} {s.labels.get('model', '')}": s.values
        for s in answers.get("pool_curve", ())
    }
    pending = answers.get("pending_curve", ())
    under, over = (
        spec.alert(a).value("threshold") for a in ("AcceleratorPoolUnderused", "AcceleratorPoolSaturated")
    )
    return Baseline(
        window=w,
        band=(under, over),
        fleet=fleet,
        pools=pools,
        curves=curves,
        devices=devices,
        hoarders=hoarders,
        idle_notebooks=notebooks,
        slices=slices,
        waiting=waiting,
        pending_curve=_grid(pending[0].values if pending else (), w),
        pods_waited=int(waited) if waited is not None else (0 if ksm_seen else None),
        max_wait_seconds=max((x.max_wait_seconds for x in waiting), default=0.0),
        idle_cards_while_waiting=_scalar(answers, "idle_while_waiting"),
        idle_cards=_scalar(answers, "idle_cards") or 0.0,
        alerts={
            (s.labels.get("category", ""), s.labels.get("alertname", "")): int(_v(s))
            for s in answers.get("alerts", ())
        },
        # GiB-hours held by idle notebooks over the window's hours: their mean over the whole window
        usage=usage,
        notebook_memory_gib=(_scalar(answers, "nb_mem") or 0.0) * w.step / w.seconds / GIB,
        wait_p95_seconds=float(np.quantile(waits, 0.95)) if waits else 0.0,
    )
