"""Baseline figures: the field report's one-week baseline as PromQL over raw series -> frozen dataclasses.

The field report's first step of any improvement: a week per node of P95 (not average) utilization, memory,
SM occupancy, task counts and queue time; memory allocated against SM occupancy shows whether a pool lacks
memory or compute; a healthy pool sits at 70-85 %. ``queries`` are the instant queries that give those
figures over a window; ``collect`` runs them (and two range queries for the curves) and ``figures`` turns
the answers into a :class:`Baseline` — pure, so tests can feed it answers.

Every query reads raw exporter series (``exporter.catalog``) and raw kube-state-metrics series
(``alerts.queue``), never the recording rules: a baseline of last week must not depend on rules that were
deployed yesterday (one query only asks whether a recorded series exists, to tell "no alert fired" from "the
rules never ran"). Thresholds come from alerts/spec.yaml (idle = the IdleNotebook alert's
``utilization_max`` and ``memory_min_bytes``; cards that could have run a waiting job = the
AcceleratorJobsQueuedWhileIdle definition, ``queue_idle_utilization`` over ``p95_window``; slice advice = the
recording bottleneck thresholds; the healthy band = PoolUnderused/PoolSaturated thresholds).

The figures that need every step (subqueries ``[window:step]``) are the cost; each query reads its series
once more, so figures that can come from one answer do (pool and fleet means from the per-device means,
hoarders and idle notebooks from one per-pod answer, metered and estimated energy from one join).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xpuwatch.alerts import queue
from xpuwatch.alerts.promapi import DEFAULT_CONCURRENCY, Prometheus, Request, Series
from xpuwatch.alerts.selectors import recorded, team_of
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


MIN_STEP_S = 60
"""The shortest default subquery step: a minute, whatever the scrape interval. Steps at the scrape interval
(15 s) would cost the store 16 times as much in the nested P95 of the queue figure (``[p95_window:step]`` at
each step) for the same figures (issue 36: 39 s instead of 3 s for a day at 2,048 devices)."""


def default_step(seconds: int) -> int:
    """Subquery step for a window of ``seconds``: about 2,016 steps (a week at 5 minutes), whole minutes, at
    least ``MIN_STEP_S``."""
    return max(MIN_STEP_S, seconds // 2016 // 60 * 60)


ENERGY_RATE_MIN_S = 300
"""Shortest window for the energy counter's rate() (``Window.energy_window``): two samples at scrape intervals
up to 2.5 minutes, whether range windows are closed (Prometheus 2) or left-open (Prometheus 3)."""


@dataclass(frozen=True)
class Window:
    """The report's time range: ``end`` Unix seconds, ``seconds`` long, subqueries every ``step`` seconds."""

    end: float
    seconds: int
    step: int

    @classmethod
    def ending(cls, end: float, seconds: int, step: int | None = None) -> Window:
        """The window ``xpuwatch report`` reads: ``seconds`` before ``end`` rounded down to the step;
        ``step`` by default ``default_step(seconds)``."""
        step = step or default_step(seconds)
        return cls(end=end - end % step, seconds=seconds, step=step)

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
    memory_ratio: float  # mean device memory (framebuffer, HBM, VRAM) used / its mean total
    compute_ratio: float  # mean SM occupancy, else mean utilization
    compute_source: str  # "sm_occupancy" | "utilization"


@dataclass(frozen=True)
class Hoarder:
    namespace: str
    owner: str
    device_hours: float  # device-hours held with memory allocated and compute ~0
    memory_gib_hours: float
    cards: float = 0.0  # device_hours / the hours with data: 336 h in a week = 2 cards all week


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


@dataclass(frozen=True)
class CardHours:
    """Where one pool's card-hours went over the window: the hours its devices were present (an
    ``accelerator_up`` series), of them held by a workload at utilization at most the idle threshold at the
    step (IdleNotebook's ``utilization_max``: the chargeback's idle hours), and held above it. A card held
    by several containers counts once. ``busy_utilization``: mean utilization over the held-busy hours."""

    vendor: str
    model: str
    total: float
    held_idle: float
    held_busy: float
    busy_utilization: float = math.nan

    @property
    def unheld(self) -> float:
        """Hours present and held by nobody."""
        return max(0.0, self.total - self.held_idle - self.held_busy)

    def share(self, part: str) -> float:
        """``unheld``, ``held_idle`` or ``held_busy`` as a share of ``total`` (0 when nothing was present)."""
        return float(getattr(self, part)) / self.total if self.total else 0.0


def fleet_hours(pools: Sequence[CardHours]) -> CardHours:
    """Every pool's card-hours summed; the busy hours' mean utilization weighted by them."""
    busy = sum(p.held_busy for p in pools)
    weighted = sum(p.held_busy * p.busy_utilization for p in pools if p.held_busy)
    return CardHours(
        "all",
        "fleet",
        sum(p.total for p in pools),
        sum(p.held_idle for p in pools),
        busy,
        weighted / busy if busy else math.nan,
    )


@dataclass(frozen=True)
class WaitCapacity:
    """Cards that could have run the pods waiting for one vendor's cards in one cluster, by the
    AcceleratorJobsQueuedWhileIdle definition: that vendor's devices (of the models the requested resource
    names, where it names one: ``huawei.com/Ascend910``), up and held by no pod (``free``), or held by a
    pod whose utilization P95 over the hour before (``recording.p95_window``; of the readings at the
    report's steps) stayed under ``recording.queue_idle_utilization`` (``held_idle``). Both are time-weighted means over the ``waited_seconds`` at least one such pod waited.
    Cards of other vendors or models and busy cards are not counted: they could not have run the pods."""

    cluster: str
    vendor: str
    resources: tuple[str, ...]  # as pods request them: nvidia.com/gpu
    models: tuple[str, ...]  # the models counted
    requested: Mapping[str, float]  # namespace -> most accelerators its waiting pods requested at once
    waited_seconds: float
    free: float
    held_idle: float

    @property
    def cards(self) -> float:
        return self.free + self.held_idle


_GENERIC_MODEL = re.compile(r"^[A-Za-z]+$")


def resource_models(resource: str, models: Sequence[str]) -> tuple[str, ...]:
    """The models of ``models`` a resource name asks for: ``huawei.com/Ascend910`` -> the models whose name
    holds ``Ascend910`` (``Ascend910B``), when some do; a name of no model number (``nvidia.com/gpu``,
    ``nvidia.com/mig-1g.10gb``, ``hygon.com/dcu``) asks for any model of its vendor: all of ``models``."""
    token = re.split(r"[-_.]", resource.rpartition("/")[2])[0]
    if _GENERIC_MODEL.match(token) or not token:
        return tuple(models)

    def norm(x: str) -> str:
        return re.sub(r"[^a-z0-9]", "", x.lower())

    named = tuple(m for m in models if norm(token) in norm(m))
    return named or tuple(models)


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
    alerts: Mapping[tuple[str, str], int]  # (category, alertname) -> alert series that fired
    usage: tuple[Usage, ...] = ()  # chargeback per (namespace, owner, vendor, model)
    notebook_memory_gib: float = 0.0  # mean device memory (GiB) held by idle notebooks over the window
    wait_p95_seconds: float = 0.0  # P95 over the pods that waited of each pod's longest wait
    card_hours: tuple[CardHours, ...] = ()  # per pool (vendor, model)
    wait_capacity: tuple[WaitCapacity, ...] = ()  # per cluster and vendor that pods waited for
    coverage: float = 1.0  # share of the window's steps at which any device reported
    data_span: tuple[float, float] | None = None  # first and last time with a reading (None: none)
    rules_ran: bool = False  # the xpuwatch recording rules wrote series in the window (ALERTS can be trusted)
    idle_utilization: float = 0.05  # held idle at a step: utilization at most this (IdleNotebook's)
    queue_idle_utilization: float = 0.05  # held idle for a waiting job: P95 under this (the queue alert's)
    p95_window: str = "1h"  # ... over this window before the moment

    @property
    def alerts_by_category(self) -> dict[str, int]:
        """Alert series that fired, per category."""
        out: dict[str, int] = {}
        for (category, _name), n in self.alerts.items():
            out[category] = out.get(category, 0) + n
        return out

    @property
    def covered_seconds(self) -> float:
        """The seconds of the window with readings (the whole window when nothing reported at all)."""
        return self.coverage * self.window.seconds or float(self.window.seconds)

    @property
    def fleet_hours(self) -> CardHours:
        """Every pool's card-hours summed."""
        return fleet_hours(self.card_hours)

    @property
    def could_have_run(self) -> float | None:
        """Cards that could have run the waiting pods, summed over the clusters and vendors they waited for
        (each a time-weighted mean while its pods waited); None without kube-state-metrics data."""
        if self.pods_waited is None:
            return None
        return sum(c.cards for c in self.wait_capacity)

    @property
    def hours_answer(self) -> str:
        """Where the card-hours went, in one line: ``Of 10,752 card-hours, 12.5 % were held by nobody, 25.0 %
        held but idle and 62.5 % held and busy (at 34 % mean utilization).``"""
        f = self.fleet_hours
        if not f.total:
            return "No device reported in the window."
        busy = "" if math.isnan(f.busy_utilization) else f" (at {f.busy_utilization:.0%} mean utilization)"
        hours = f"{f.total:,.0f}" if f.total >= 10 else f"{f.total:.1f}"
        return (
            f"Of {hours} card-hours, {f.share('unheld'):.1%} were held by nobody, "
            f"{f.share('held_idle'):.1%} held but idle and {f.share('held_busy'):.1%} held and busy{busy}."
        )

    @property
    def headline(self) -> str:
        """The sentence to repeat: per vendor that pods waited for, the cards that could have run them."""
        if self.pods_waited is None:
            return f"{self.hours_answer} Queue time unknown: no kube-state-metrics data."
        if not self.pods_waited:
            return f"No job waited for a card. {self.hours_answer}"
        return " ".join([f"{self.jobs_waited}.", *(wait_sentence(c) for c in self.wait_capacity)])

    @property
    def jobs_waited(self) -> str:
        """``14 jobs waited for cards (longest 3h 45m)``."""
        n = self.pods_waited or 0
        return f"{n} job{'' if n == 1 else 's'} waited for cards (longest {_duration(self.max_wait_seconds)})"


def _cards(x: float) -> str:
    r = round(x, 1)
    return f"{r:.0f}" if r == int(r) else f"{r:.1f}"


def wait_sentence(c: WaitCapacity) -> str:
    """``While ml waited for 8 nvidia.com/gpu: 4 free and 12 held idle nvidia cards could have run them
    (mean over the 28 h they waited).``"""
    asked = sorted(c.requested.items(), key=lambda kv: (-kv[1], kv[0]))
    what = " / ".join(c.resources)
    if len(asked) == 1:
        who = f"{asked[0][0]} waited for {_cards(asked[0][1])} {what}"
    else:
        who = ", ".join(f"{ns} ({_cards(n)})" for ns, n in asked) + f" waited for {what}"
    where = f" in {c.cluster}" if c.cluster else ""
    models = f"{c.models[0]} cards" if len(c.models) == 1 else f"{c.vendor} cards"
    if not c.cards:
        could = f"no {models[:-1]}{where} was free or held idle"
    else:
        could = (
            f"{_cards(c.free)} free and {_cards(c.held_idle)} held idle {models}{where} could have run them"
        )
    return f"While {who}: {could} (mean over the {span(c.waited_seconds)} they waited)."


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
    created = f"max by (cluster, namespace, pod) ({queue.KSM_CREATED}{{{queue.ksm_selector(spec)}}})"
    pod_age = f"(time() - {created}) + on (cluster, namespace, pod) group_right () (0 * (({pods}) > 0))"
    # a held card's share per holder at each step (1/N for N holders), labelled with the holder
    share = f"(({alloc} == 1) / on (node, uuid) group_left () count by (node, uuid) ({alloc} == 1))"
    team = "namespace, owner, vendor, model"
    holder = "namespace, owner, pod, workload_kind"
    # AcceleratorJobsQueuedWhileIdle's idle capacity (alerts/queue.py, vendor:accelerator_idle_devices:count)
    # per model, from the raw series: devices up and held by nobody, and held devices whose utilization P95
    # over the recording window stayed under queue_idle_utilization; 0 where a model has none, so the mean
    # over the moments its vendor's pods waited counts those moments too.
    dev = "cluster, node, uuid, vendor, model"
    pool = "cluster, vendor, model"
    free = f"group by ({dev}) ({up} == 1 unless on (cluster, node, uuid) ({alloc} == 1))"
    # The P95 of the readings at the report's steps over the window before each step ([1h:5m] for a week):
    # the alert reads every scrape, but recomputing that for each of a week's 2,016 steps cost
    # VictoriaMetrics 7.4 s of CPU at 2,048 devices scraped once a minute (4x that at 15 s), the readings at
    # each 5 minutes 1.6 s; for devices that sit near 0 (notebooks, stuck jobs) the two agree.
    p95 = f"quantile_over_time(0.95, {util}[{spec.rec('p95_window')}:{w.step}s])"
    idle_held = f"group by ({dev}) ({p95} < {spec.rec('queue_idle_utilization')} and on (cluster, node, uuid) ({alloc} == 1))"
    none = f"0 * count by ({pool}) ({up})"
    by_state = (
        f'(label_replace(count by ({pool}) ({free}), "state", "free", "", "")\n'
        f' or label_replace(count by ({pool}) ({idle_held}), "state", "held idle", "", "")\n'
        f' or label_replace({none}, "state", "free", "", "")\n'
        f' or label_replace({none}, "state", "held idle", "", ""))'
    )
    waiting_vendor = f"(sum by (cluster, vendor) ({pods}) > 0)"
    energy, power = f"{c.ENERGY}{{{job}}}", f"{c.POWER}{{{job}}}"
    # each card's draw at the step, in watts, labelled with where it comes from: the energy counter's rate
    # where the card has one, else its power reading (issue 34: the two parts add up, neither holds the other)
    watts = (
        f'(label_replace(max by (node, uuid) (rate({energy}[{w.energy_window}s])), "source", "counter", "", "")\n'
        f' or on (node, uuid) label_replace(max by (node, uuid) ({power} unless on (node, uuid) {energy}), "source", "power", "", ""))'
    )

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
        Query(
            "cb_energy",
            "energy",
            # one join for both sources: the counter's rate where the card has one, else its power
            f"sum by ({team}, source) (sum_over_time(({share} * on (node, uuid) group_left (source) {watts}){sub}))",
        ),
        Query(
            "devices",
            "devices seen",
            f"count by (vendor, model) (count by ({IDENT}) (count_over_time({up}[{r}])))",
        ),
        Query("pool_p95", "pool P95", f"quantile_over_time(0.95, (avg by (vendor, model) ({util})){sub})"),
        Query("fleet_p95", "fleet P95", f"quantile_over_time(0.95, (avg({util})){sub})"),
        Query(
            "wait_by_pod",
            "wait per pod",
            f"max by (cluster, namespace, pod) (max_over_time(({pod_age}){sub}))",
        ),
        Query(
            "mem_ratio",
            "memory per device",
            # mean memory used over the card's capacity (constant: no step-by-step ratio needed, a third of
            # the cost of one)
            f"avg by ({IDENT}) (avg_over_time({used}[{r}]) / (avg_over_time({total}[{r}]) > 0))",
        ),
        Query(
            "sm_occ",
            "SM occupancy per device",
            f"avg by ({IDENT}) (avg_over_time({c.SM_OCCUPANCY}{{{job}}}[{r}]))",
        ),
        Query("dev_util", "utilization per device", f"avg by ({IDENT}) (avg_over_time({util}[{r}]))"),
        # hoarders and idle notebooks from the same two queries, per holding pod and its kind
        Query(
            "idle_pods",
            "hoarders and idle notebooks",
            f"sum by ({holder}) (count_over_time(({idle_dev} + on (node, uuid) group_right () {held}){sub}))",
        ),
        Query(
            "idle_pod_mem",
            "memory hoarded",
            f"sum by ({holder}) (sum_over_time(({idle_mem} + on (node, uuid) group_right () {held}){sub}))",
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
            "wait_capacity",
            "cards that could have run waiting jobs",
            f"avg_over_time(({by_state}\nand on (cluster, vendor)\n{waiting_vendor}){sub})",
        ),
        Query("wait_steps", "time jobs waited", f"count_over_time(({waiting_vendor}){sub})"),
        Query(
            "wait_peak",
            "accelerators requested",
            f"max_over_time((sum by (cluster, namespace, resource, vendor) ({pods})){sub})",
        ),
        Query("hours_seen", "card-hours", f"sum_over_time((count by (vendor, model) ({up})){sub})"),
        Query("steps_seen", "data coverage", f"count_over_time((count({up})){sub})"),
        Query(
            "busy_util",
            "utilization while held and busy",
            f"sum_over_time((sum by (vendor, model) (({util} > {u_max}) and on (node, uuid) ({alloc} == 1))){sub})",
        ),
        Query(
            "rules_seen",
            "recording rules",
            f"count(count_over_time({recorded(spec, queue.QUEUE.idle)}[{r}]))",
        ),
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


def requests(spec: Spec, w: Window) -> list[Request]:
    """Every query of the report over ``w``: the instant queries at its end, then the range queries of the
    curves (``curve_step`` apart)."""
    step = curve_step(w)
    return [Request(q.key, q.expr, w.end, title=q.title) for q in queries(spec, w)] + [
        Request(key, expr, w.end, w.start + step, step, title=key.replace("_", " "))
        for key, expr in range_queries(spec).items()
    ]


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
    every = requests(spec, w)
    first = [r for r in every if r.key == "devices"]
    out: dict[str, Sequence[Series]] = {}
    out |= prom.gather(first, 1, lambda r: progress(r.title))
    if not out["devices"]:
        raise ReportError(
            f"no xpuwatch series ({c.UP}{{{spec.exporter_job_selector}}}) in the {span(w.seconds)} "
            f"before {_iso(w.end)} at {prom.url}: is this Prometheus scraping the exporter under that job?"
        )
    rest = [r for r in every if r.key != "devices"]
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
    # coverage: the share of the window's steps at which any device reported (a 1 h window over 5 min of
    # data: 0.1); the first and last reading from the curves (their coarser step is enough to say when)
    stamps = sorted({t for c in answers.get("pool_curve", ()) for t, _ in c.values})
    coverage = min(1.0, (_scalar(answers, "steps_seen") or 0.0) * w.step / w.seconds)
    covered = coverage * w.seconds or w.seconds
    counts = _by(answers, "devices", "vendor", "model")
    ident = ("node", "vendor", "model", "device", "uuid")
    mem, sm, du = (_by(answers, k, *ident) for k in ("mem_ratio", "sm_occ", "dev_util"))
    # a pool's and the fleet's mean utilization and SM occupancy: the mean of their devices' means (every
    # device reports at every step, so this is the mean over devices and steps)
    avg, sm_pool = _means(du), _means(sm)
    p95 = _by(answers, "pool_p95", "vendor", "model")
    pools = tuple(
        PoolUtil(k[0], k[1], int(n), avg.get(k, math.nan), p95.get(k, math.nan), sm_pool.get(k, math.nan))
        for k, n in sorted(counts.items())
    )
    fleet = PoolUtil(
        "all",
        "fleet",
        int(sum(counts.values())),
        float(np.mean(list(du.values()))) if du else 0.0,
        _scalar(answers, "fleet_p95") or 0.0,
        float(np.mean(list(sm.values()))) if sm else math.nan,
    )
    waits = [_v(s) for s in answers.get("wait_by_pod", ())]
    team = ("namespace", "owner", "vendor", "model")
    steps, idle_steps = _by(answers, "cb_steps", *team), _by(answers, "cb_idle", *team)
    mem_steps = _by(answers, "cb_mem", *team)
    energy = _by(answers, "cb_energy", *team, "source")
    joules = {k[:4]: v * w.step for k, v in energy.items() if k[4] == "counter"}
    from_power = {k[:4]: v * w.step for k, v in energy.items() if k[4] == "power"}
    usage = tuple(
        Usage(
            k[0],
            k[1],
            k[2],
            k[3],
            device_hours=n * hours,
            idle_hours=idle_steps.get(k, 0.0) * hours,
            memory_gib_hours=mem_steps.get(k, 0.0) * hours / GIB,
            energy_kwh_counter=joules.get(k, 0.0) / 3.6e6,
            energy_kwh_from_power=from_power.get(k, 0.0) / 3.6e6,
        )
        for k, n in sorted(steps.items())
    )
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
    # per holding pod (namespace, owner, pod, kind): steps and memory held idle; a team's hoarding is its pods'
    pod_steps = _by(answers, "idle_pods", "namespace", "owner", "pod", "workload_kind")
    pod_mem = _by(answers, "idle_pod_mem", "namespace", "owner", "pod", "workload_kind")
    team_steps: dict[tuple[str, str], float] = {}
    team_mem: dict[tuple[str, str], float] = {}
    for k, n in pod_steps.items():
        team_steps[k[0], k[1]] = team_steps.get((k[0], k[1]), 0.0) + n
        team_mem[k[0], k[1]] = team_mem.get((k[0], k[1]), 0.0) + pod_mem.get(k, 0.0)
    hoarders = tuple(
        sorted(
            (
                Hoarder(k[0], k[1], n * hours, team_mem[k] * hours / GIB, n * w.step / covered)
                for k, n in team_steps.items()
                if n
            ),
            key=lambda h: (-h.device_hours, h.namespace, h.owner),  # ties in a fixed order
        )
    )
    held = _by(answers, "nb_held", "namespace", "pod", "owner")
    nb_idle: dict[tuple[str, ...], float] = {}
    for (ns, owner, pod, kind), n in pod_steps.items():
        if kind == "notebook":
            nb_idle[ns, pod, owner] = nb_idle.get((ns, pod, owner), 0.0) + n
    notebooks = tuple(
        sorted(
            (
                IdleNotebook(k[0], k[1], k[2], idle_hours=n * hours, held_hours=held.get(k, n) * hours)
                for k, n in nb_idle.items()
                if n
            ),
            key=lambda nb: (-nb.idle_hours, nb.namespace, nb.pod, nb.owner),
        )
    )
    notebook_mem = sum(v for k, v in pod_mem.items() if k[3] == "notebook")
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
        alerts={
            (s.labels.get("category", ""), s.labels.get("alertname", "")): int(_v(s))
            for s in answers.get("alerts", ())
        },
        # GiB-hours held by idle notebooks over the window's hours: their mean over the whole window
        usage=usage,
        notebook_memory_gib=notebook_mem * w.step / w.seconds / GIB,
        wait_p95_seconds=float(np.quantile(waits, 0.95)) if waits else 0.0,
        card_hours=_card_hours(answers, usage, hours, spec),
        wait_capacity=_wait_capacity(answers, w, [m for _, m in counts]),
        coverage=coverage,
        data_span=(min(stamps), max(stamps)) if stamps else None,
        rules_ran=bool(answers.get("rules_seen")),
        idle_utilization=spec.alert("AcceleratorIdleNotebook").value("utilization_max"),
        queue_idle_utilization=spec.rec("queue_idle_utilization"),
        p95_window=spec.rec("p95_window"),
    )


def _means(per_device: Mapping[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
    """(node, vendor, model, device, uuid) -> value, averaged per (vendor, model)."""
    groups: dict[tuple[str, ...], list[float]] = {}
    for k, v in per_device.items():
        groups.setdefault((k[1], k[2]), []).append(v)
    return {k: float(np.mean(vs)) for k, vs in groups.items()}


def _card_hours(answers: Answers, usage: Sequence[Usage], hours: float, spec: Spec) -> tuple[CardHours, ...]:
    """Per pool: card-hours present, held idle and held busy (the chargeback's hours summed over teams), and
    the mean utilization of the busy hours."""
    seen = _by(answers, "hours_seen", "vendor", "model")
    busy_util = _by(answers, "busy_util", "vendor", "model")
    held: dict[tuple[str, ...], list[float]] = {}
    for u in usage:
        h = held.setdefault((u.vendor, u.model), [0.0, 0.0])
        h[0] += u.idle_hours
        h[1] += u.device_hours - u.idle_hours
    out = []
    for k in sorted(seen.keys() | held.keys()):
        idle, busy = held.get(k, [0.0, 0.0])
        total = max(seen.get(k, 0.0) * hours, idle + busy)  # a card held while its exporter was down
        out.append(
            CardHours(
                k[0], k[1], total, idle, busy, busy_util.get(k, 0.0) * hours / busy if busy else math.nan
            )
        )
    return tuple(out)


def _wait_capacity(answers: Answers, w: Window, models: Sequence[str]) -> tuple[WaitCapacity, ...]:
    """Per (cluster, vendor) pods waited for: the free and held-idle cards of the models the requested
    resources name (``resource_models``), time-weighted over the moments they waited."""
    steps = _by(answers, "wait_steps", "cluster", "vendor")
    by_state = _by(answers, "wait_capacity", "cluster", "vendor", "model", "state")
    asked: dict[tuple[str, ...], dict[str, float]] = {}
    resources: dict[tuple[str, ...], set[str]] = {}
    for (cluster, ns, resource, vendor), n in _by(
        answers, "wait_peak", "cluster", "namespace", "resource", "vendor"
    ).items():
        per_ns = asked.setdefault((cluster, vendor), {})
        per_ns[ns] = per_ns.get(ns, 0.0) + n
        resources.setdefault((cluster, vendor), set()).add(resource_name(resource))
    out = []
    for key, n in sorted(steps.items()):
        cluster, vendor = key
        present = sorted({m for (cl, v, m, _state) in by_state if (cl, v) == key})
        named: set[str] = set()
        for r in resources.get(key, ()):
            named |= set(resource_models(r, present))
        counted = tuple(sorted(named or present))

        out.append(
            WaitCapacity(
                cluster,
                vendor,
                tuple(sorted(resources.get(key, ()))),
                counted,
                asked.get(key, {}),
                n * w.step,
                sum(by_state.get((cluster, vendor, m, "free"), 0.0) for m in counted),
                sum(by_state.get((cluster, vendor, m, "held idle"), 0.0) for m in counted),
            )
        )
    return tuple(out)
