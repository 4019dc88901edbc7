"""Rule builder: spec -> Prometheus recording and alerting rules (rules.yml and a PrometheusRule), pure.

Metric names come from ``exporter.catalog``; every threshold, window and duration from the spec. Each alert
is one small function below returning its expression and annotations; the labels ``category``, ``severity``
and ``action`` and the ``runbook_url`` are added in one pass (the monitoring-mixin convention). Expressions
never read a missing series as healthy: device-level performance alerts are joined onto the holders in
``accelerator_allocated``, absence of a hardware signal fires ``AcceleratorTelemetryMissing``, the ECC
summary records -1 (not reported) instead of 0 for devices without ECC counters, and a node with no devices
left still counts as 0, not as nothing.

Several clusters: every aggregation and join carries the ``cluster`` label (``by (cluster, node, ...)``,
``on (cluster, node, uuid)``), so one ruler over many clusters never mixes nodes of the same name, and a
Prometheus that sees one cluster (no such label) gives the same results as without it. Every exporter series
is read through :func:`series` (the spec's job and cluster selectors), recorded series through
:func:`recorded` (the cluster selector).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from xpuwatch.alerts import queue
from xpuwatch.alerts.selectors import matchers as _matchers
from xpuwatch.alerts.selectors import recorded, series, team_of
from xpuwatch.alerts.spec import AlertSpec, Spec, SpecError
from xpuwatch.exporter import catalog as c

GROUP_RECORDING = "xpuwatch.recording"
# Records no alert reads, in groups of their own (Prometheus and vmalert evaluate groups concurrently, so no
# group holds every record's cost): per-node dashboard aggregates and per-team chargeback.
GROUP_RECORDING_NODE = "xpuwatch.recording.node"
GROUP_RECORDING_TEAM = "xpuwatch.recording.team"
# Per-holder judgements (idle notebooks, starved cards, memory hoarders): each device condition joined onto its
# holders once, in each cluster; AcceleratorIdleNotebook and AcceleratorPowerStarved read them (at most one
# interval old, as the device records of xpuwatch.recording) and the waste dashboard's tables read the few
# series they yield instead of joining every device's raw series with every holder at each refresh (at 16,384
# devices on the central store: 0.4-0.5 s each, the board 2.0 s against its 2 s target; docs/deploy.md).
GROUP_RECORDING_HOLDER = "xpuwatch.recording.holder"
RECORDING_GROUPS = (GROUP_RECORDING, GROUP_RECORDING_NODE, GROUP_RECORDING_TEAM, GROUP_RECORDING_HOLDER)
# The recording groups whose records alerts may read from another group (at most one interval old).
ALERT_READ_GROUPS = (GROUP_RECORDING, GROUP_RECORDING_HOLDER)
GROUP_HARDWARE = "xpuwatch.hardware"
GROUP_PERFORMANCE = "xpuwatch.performance"
# The per-card utilization findings: in a badly used fleet they hold an alert for a large share of the cards
# at once, and an alert's state costs more than its query (every label and annotation template expanded,
# ALERTS written, per active alert and evaluation: 163 ms for 295 alerts against a 12 ms query at 2,048
# devices), so they get a group of their own, evaluated concurrently with the other findings.
GROUP_PERFORMANCE_DEVICE = "xpuwatch.performance.device"
PERFORMANCE_GROUPS = (GROUP_PERFORMANCE_DEVICE, GROUP_PERFORMANCE)
GROUP_META = "xpuwatch.meta"

# The label that tells clusters apart: the external label a Prometheus adds on remote_write/federation, or a
# target label; absent in a single-cluster Prometheus, where `by (cluster, ...)` simply yields no such label.
CLUSTER = "cluster"
DEVICE_ID = f"{CLUSTER}, node, vendor, model, device, uuid"
_ON_DEV = f"on ({CLUSTER}, node, uuid)"
_ON_SLICE = f"on ({CLUSTER}, node, uuid, slice_id)"
_POOL = f"{CLUSTER}, vendor, model"
NOTEBOOK = 'workload_kind="notebook"'
# Idle clocks are not a fault: the throttle reasons that count exclude gpu_idle.
NOT_IDLE = 'reason!="gpu_idle"'
UNCORRECTED, CORRECTED = 'type="uncorrected"', 'type="corrected"'
_DEV = "{{ $labels.vendor }} device {{ $labels.device }} ({{ $labels.model }}, {{ $labels.uuid }}) on {{ $labels.node }}"
_SLICE = "slice {{ $labels.slice_id }} ({{ $labels.slice_kind }} {{ $labels.profile }}) of device {{ $labels.device }} ({{ $labels.uuid }}) on {{ $labels.node }}"
_HOLDER = "{{ $labels.namespace }}/{{ $labels.pod }}"
# Who holds a device that a device-level alert joined onto accelerator_allocated: a pod, or a Slurm job.
_HELD_BY = (
    "{{ if $labels.job_id }}Slurm job {{ $labels.job_id }} of {{ $labels.job_user }} in partition "
    "{{ $labels.job_partition }}{{ else }}" + _HOLDER + "{{ end }}"
)
_PCT = "{{ $value | humanizePercentage }}"
_COUNT = '{{ $value | printf "%.0f" }}'


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class AlertingRule:
    alert: str
    expr: str
    for_: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class RuleGroup:
    name: str
    rules: tuple[RecordingRule | AlertingRule, ...]


@dataclass(frozen=True)
class Records:
    """Names of the recording rules (``level:metric:operation``), for alerts, dashboards and tests."""

    utilization_p95: str
    pool_utilization: str
    pool_allocated: str
    memory_used: str
    slice_memory_used: str
    slice_compute: str
    device_bottleneck: str
    slice_bottleneck: str
    node_devices: str
    instance_node: str
    ecc_uncorrected: str
    # Series of each watched hardware signal per device (label ``metric``), recorded in the hardware group just
    # before AcceleratorTelemetryMissing reads an hour of it: one series per device and signal instead of an
    # hour of every raw sensor, subsystem and ECC type series.
    telemetry_series: str
    # Pre-aggregated for the fleet dashboards (per pool and per node): a refresh reads a few series per
    # node instead of every device's (docs/dashboards.md, benchmarks/dashboard_queries.py).
    pool_devices: str
    node_p95_avg: str
    node_p95_min: str
    node_p95_max: str
    node_temperature: str
    node_throttled: str
    node_throttled_devices: str
    node_ecc: str
    # The fault counters that are not 0 (the exporter seeds every code a driver knows at 0: 11 per NVIDIA
    # card), in the node group before node_faults: it and the faults table read the few that ever counted.
    faults_nonzero: str
    node_faults: str
    node_pcie_replays: str
    node_link_errors: str
    # Card-wide readings summed per node with each physical card counted once (AMD MI300 partitions: one
    # card listed as 2-8 logical GPUs, see ``node_card_sum``).
    node_power: str
    node_memory_used: str
    node_memory_total: str
    # Holders per device (containers with accelerator_allocated == 1), at the head of the team group: the
    # four chargeback records divide by it instead of counting the holders of every device four times.
    device_holders: str
    team_cards: str
    team_idle_cards: str
    team_memory: str
    team_power: str
    # Per holder (group xpuwatch.recording.holder): a device condition repeated for each holder, with the
    # holder's labels and the device's value (``_held_by``).
    holder_idle_notebook: str
    holder_starved: str
    holder_hoarded: str


def _eq(label: str, value: str, op: str = "=") -> str:
    """One label matcher, ``label="value"`` (or another operator)."""
    return f'{label}{op}"{value}"'


def records(spec: Spec) -> Records:
    """The recording-rule names; windows from the spec appear in the names (``p95_1h``)."""
    w = spec.rec("dashboard_window")
    return Records(
        utilization_p95=f"device:{c.UTILIZATION}:p95_{spec.rec('p95_window')}",
        pool_utilization=f"vendor_model:{c.UTILIZATION}:avg",
        pool_allocated=f"vendor_model:{c.ALLOCATED}:ratio",
        memory_used=f"device:{c.MEMORY_USED.removesuffix('_bytes')}:ratio",
        slice_memory_used=f"slice:{c.SLICE_MEMORY_USED.removesuffix('_bytes')}:ratio",
        slice_compute=f"slice:{c.SLICE_SM_ACTIVE}:or_utilization",
        device_bottleneck="device:accelerator_bottleneck:class",
        slice_bottleneck="slice:accelerator_bottleneck:class",
        node_devices=f"node:{c.UP}:count",
        instance_node=f"instance_node:{c.UP}:count",
        ecc_uncorrected=f"device:{c.ECC_ERRORS.removesuffix('_total')}:uncorrected_increase_{spec.rec('ecc_status_window')}",
        telemetry_series="device:accelerator_telemetry_series:count",
        pool_devices=f"vendor_model:{c.UP}:count",
        node_p95_avg=f"node:{c.UTILIZATION}_p95_{spec.rec('p95_window')}:avg",
        node_p95_min=f"node:{c.UTILIZATION}_p95_{spec.rec('p95_window')}:min",
        node_p95_max=f"node:{c.UTILIZATION}_p95_{spec.rec('p95_window')}:max",
        node_temperature=f"node:{c.TEMPERATURE}:max",
        node_throttled=f"node:{c.CLOCK_THROTTLED}:count",
        node_throttled_devices=f"node:{c.CLOCK_THROTTLED}:devices",
        node_ecc=f"node:{c.ECC_ERRORS.removesuffix('_total')}:increase_{w}",
        faults_nonzero=f"device:{c.FAULT_EVENTS}:nonzero",
        node_faults=f"node:{c.FAULT_EVENTS.removesuffix('_total')}:increase_{w}",
        node_pcie_replays=f"node:{c.PCIE_REPLAY.removesuffix('_total')}:increase_{w}",
        node_link_errors=f"node:{c.LINK_ERRORS.removesuffix('_total')}:increase_{w}",
        node_power=f"node:{c.POWER}:sum",
        node_memory_used=f"node:{c.MEMORY_USED}:sum",
        node_memory_total=f"node:{c.MEMORY_TOTAL}:sum",
        device_holders=f"device:{c.ALLOCATED}:holders",
        team_cards=f"namespace_owner:{c.ALLOCATED}:cards",
        team_idle_cards=f"namespace_owner:{c.ALLOCATED}:idle_cards",
        team_memory=f"namespace_owner:{c.MEMORY_USED}:held",
        team_power=f"namespace_owner:{c.POWER}:held",
        holder_idle_notebook=f"holder:{c.UTILIZATION}:idle_notebook",
        holder_starved="holder:accelerator_power_limit_ratio:starved",
        holder_hoarded=f"holder:{c.MEMORY_USED}:hoarded",
    )


def _pct(ratio: float) -> str:
    return f"{ratio:.0%}"


def _bottleneck(level_on: str, mem: str, compute: str, classified: str, spec: Spec) -> dict[str, str]:
    """The four class expressions, in evaluation order. ``classified`` is the class record narrowed to
    memory|compute: balanced reads the two classes just recorded before it in the same group instead of
    joining memory and compute over every device twice more (same series, same evaluation timestamp)."""
    mh, cl = spec.rec("bottleneck_memory_high"), spec.rec("bottleneck_compute_low")
    ch, ml = spec.rec("bottleneck_compute_high"), spec.rec("bottleneck_memory_low")
    memory = f"({mem} > {mh}) and {level_on} ({compute} < {cl})"
    comp = f"({mem} < {ml}) and {level_on} ({compute} > {ch})"
    return {
        "memory": f"clamp({memory}, 1, 1)",
        "compute": f"clamp({comp}, 1, 1)",
        "balanced": f"clamp(\n  {mem} and {level_on} {compute}\n  unless {level_on} {classified},\n  1, 1\n)",
        "unknown": f"clamp({mem} unless {level_on} {compute}, 1, 1)",
    }


def recording_rules(spec: Spec) -> tuple[RecordingRule, ...]:
    """Recording rules dashboards and alerts reuse. Bottleneck classes are 1-valued series labelled
    ``bottleneck=memory|compute|balanced|unknown`` (unknown: no SM activity metric for this device)."""
    r = records(spec)

    def s(metric: str, extra: str = "") -> str:
        return series(spec, metric, extra)

    devices = f"count by ({_POOL}) (count by ({_POOL}, node, uuid) ({s(c.UP)}))"
    uncorrected = s(c.ECC_ERRORS, 'type="uncorrected"')
    out = [
        RecordingRule(
            r.utilization_p95, f"quantile_over_time(0.95, {s(c.UTILIZATION)}[{spec.rec('p95_window')}])"
        ),
        RecordingRule(r.pool_utilization, f"avg by ({_POOL}) ({s(c.UTILIZATION)})"),
        RecordingRule(
            r.pool_allocated,
            f"count by ({_POOL}) (count by ({_POOL}, node, uuid) ({s(c.ALLOCATED)} == 1))\n"
            f"  / {devices}\nor\n  0 * {devices}\n",
        ),
        # Devices whose tool prints only a percentage (Hygon hy-smi VRAM%) export the ratio itself.
        RecordingRule(
            r.memory_used,
            f"{s(c.MEMORY_USED)} / ({s(c.MEMORY_TOTAL)} > 0)\nor {_ON_DEV}\n  {s(c.MEMORY_USED_RATIO)}\n",
        ),
        RecordingRule(r.slice_memory_used, f"{s(c.SLICE_MEMORY_USED)} / ({s(c.SLICE_MEMORY_LIMIT)} > 0)"),
        RecordingRule(r.slice_compute, f"{s(c.SLICE_SM_ACTIVE)} or {_ON_SLICE} {s(c.SLICE_UTILIZATION)}"),
    ]
    device_classes = recorded(spec, r.device_bottleneck, _eq("bottleneck", "memory|compute", "=~"))
    for cls, expr in _bottleneck(
        _ON_DEV, recorded(spec, r.memory_used), s(c.SM_ACTIVE), device_classes, spec
    ).items():
        out.append(RecordingRule(r.device_bottleneck, expr, MappingProxyType({"bottleneck": cls})))
    slice_mem, slice_compute = recorded(spec, r.slice_memory_used), recorded(spec, r.slice_compute)
    slice_classes = recorded(spec, r.slice_bottleneck, _eq("bottleneck", "memory|compute", "=~"))
    for cls, expr in _bottleneck(_ON_SLICE, slice_mem, slice_compute, slice_classes, spec).items():
        out.append(RecordingRule(r.slice_bottleneck, expr, MappingProxyType({"bottleneck": cls})))
    out += [
        RecordingRule(
            r.node_devices, f"count by ({CLUSTER}, node) (count by ({CLUSTER}, node, uuid) ({s(c.UP)}))"
        ),
        RecordingRule(
            r.instance_node,
            f"count by ({CLUSTER}, instance, node) (count by ({CLUSTER}, instance, node, uuid) ({s(c.UP)}))",
        ),
        RecordingRule(
            r.ecc_uncorrected,
            f"sum by ({DEVICE_ID}) (increase({uncorrected}[{spec.rec('ecc_status_window')}]))\n"
            f"or {_ON_DEV}\n  (-1 * group by ({DEVICE_ID}) ({s(c.UP)}))\n",
        ),
    ]
    out += [
        RecordingRule(name, expr)
        for name, expr in queue.recording_rules(spec, recorded(spec, r.utilization_p95))
    ]
    return tuple(out)


def node_card_sum(spec: Spec, metric: str) -> str:
    """``metric`` summed ``by (cluster, node)`` with each physical card counted once: a device that
    ``accelerator_partition_info`` does not list contributes its own value (``max by (cluster, node, uuid)``,
    so a device scraped twice still counts once), the partitions of one card (same ``parent_uuid``) their
    maximum.

    Why max: amd-smi prints a partitioned MI300X's power on partition 0 only (N/A on the others) and the
    whole card's VRAM total on partition 0 (ROCm/amdsmi#132: 196592 MB beside 98296 MB on partition 1 in
    DPX); rocm-smi repeats the whole card's total and used VRAM on every one of 64 CPX partitions
    (ROCm/legacy-rocm-build#4750). A sum over logical GPUs counts one card 2-8 times; the max counts it
    once (for used memory printed per partition, the max is a lower bound: docs/vendors/amd.md).

    No ``label_replace`` on the per-device path: the two branches keep ``uuid`` and ``parent_uuid`` apart
    (their label sets never collide, so ``or`` is their union) and the outer sum drops both; relabelling
    every device into a ``card`` label cost most of the rule at fleet scale."""
    info = series(spec, c.PARTITION_INFO)
    value = series(spec, metric)
    own = f"max by ({CLUSTER}, node, uuid) ({value} unless {_ON_DEV} {info})"
    shared = f"max by ({CLUSTER}, node, parent_uuid) ({value} * {_ON_DEV} group_left (parent_uuid) {info})"
    return f"sum by ({CLUSTER}, node) (\n  {own}\n  or\n  {shared}\n)"


def counted_since(nonzero: str, window: str) -> str:
    """Events of a counter recorded only while not 0 (``nonzero``, a selector) in the last ``window``: its
    value less its value ``window`` ago, or all of it where it has no value then. Exact, not extrapolated:
    a counter starts at 0, so a series that appeared within the window counted all its events in it
    (after a counter restart, the events since). Until the record has ``window`` of history, every counter
    counts whole."""
    return f"{nonzero} - {nonzero} offset {window} >= 0\nor\n{nonzero}"


def dashboard_rules(spec: Spec) -> tuple[RecordingRule, ...]:
    """Per-pool and per-node aggregates the fleet dashboards draw (raw series stay on the device dashboard)."""
    r, w = records(spec), spec.rec("dashboard_window")
    node = f"{CLUSTER}, node"
    p95 = recorded(spec, r.utilization_p95)

    def increase(metric: str, by: str) -> str:
        return f"sum by ({by}) (increase({series(spec, metric)}[{w}]))"

    return (
        RecordingRule(
            r.pool_devices, f"count by ({_POOL}) (count by ({_POOL}, node, uuid) ({series(spec, c.UP)}))"
        ),
        RecordingRule(r.node_p95_avg, f"avg by ({node}) ({p95})"),
        RecordingRule(r.node_p95_min, f"min by ({node}) ({p95})"),
        RecordingRule(r.node_p95_max, f"max by ({node}) ({p95})"),
        RecordingRule(r.node_temperature, f"max by ({node}, sensor) ({series(spec, c.TEMPERATURE)})"),
        RecordingRule(r.node_throttled, f"sum by ({node}, reason) ({series(spec, c.CLOCK_THROTTLED)})"),
        RecordingRule(
            r.node_throttled_devices,
            f"sum by ({node}) (max by ({node}, uuid) ({series(spec, c.CLOCK_THROTTLED, NOT_IDLE)}))",
        ),
        RecordingRule(r.node_ecc, increase(c.ECC_ERRORS, f"{node}, type")),
        RecordingRule(r.faults_nonzero, f"{series(spec, c.FAULT_EVENTS)} > 0"),
        RecordingRule(
            r.node_faults,
            f"sum by ({node}, vendor, code) (\n{counted_since(recorded(spec, r.faults_nonzero), w)}\n)",
        ),
        RecordingRule(r.node_pcie_replays, increase(c.PCIE_REPLAY, node)),
        RecordingRule(r.node_link_errors, increase(c.LINK_ERRORS, node)),
        RecordingRule(r.node_power, node_card_sum(spec, c.POWER)),
        RecordingRule(r.node_memory_used, node_card_sum(spec, c.MEMORY_USED)),
        RecordingRule(r.node_memory_total, node_card_sum(spec, c.MEMORY_TOTAL)),
    )


def chargeback_rules(spec: Spec) -> tuple[RecordingRule, ...]:
    """Who uses what, per (cluster, namespace, owner, vendor, model), now (a Slurm job counts for its
    partition as namespace and its user as owner): cards held (a card held by N holders counts 1/N for each), of them idle (utilization at most the AcceleratorIdleNotebook
    ``utilization_max``), device memory and power on them. Averaged over a range and multiplied by its
    length they give the report's device-hours, GiB-hours and kWh (power: the energy counter's rate over
    ``dashboard_window``, the power gauge for cards with no counter)."""
    r, w = records(spec), spec.rec("dashboard_window")
    team = f"{CLUSTER}, namespace, owner, vendor, model"
    alloc = f"({team_of(series(spec, c.ALLOCATED))} == 1)"  # a Slurm job's team: its partition
    share = f"{alloc}\n  / {_ON_DEV} group_left ()\n{recorded(spec, r.device_holders)}"
    u_max = spec.alert("AcceleratorIdleNotebook").value("utilization_max")
    energy = series(spec, c.ENERGY)
    power = f"rate({energy}[{w}])\nor {_ON_DEV}\n  {series(spec, c.POWER)}"

    def held(device: str) -> str:
        return f"sum by ({team}) (\n  ({share})\n  * {_ON_DEV} group_left ()\nmax by ({CLUSTER}, node, uuid) ({device})\n)"

    return (
        RecordingRule(r.device_holders, f"count by ({CLUSTER}, node, uuid) {alloc}"),
        RecordingRule(r.team_cards, f"sum by ({team}) (\n{share}\n)"),
        RecordingRule(
            r.team_idle_cards,
            f"sum by ({team}) (\n  ({share})\n  and {_ON_DEV}\n  ({series(spec, c.UTILIZATION)} <= {u_max})\n)",
        ),
        RecordingRule(r.team_memory, held(series(spec, c.MEMORY_USED))),
        RecordingRule(r.team_power, held(power)),
    )


# ----------------------------------------------------------------------------------------- alert bodies
# Each returns (expr, summary, description); `a` is the alert's spec entry, `spec` the whole spec.
Body = tuple[str, str, str]


def _codes_expr(a: AlertSpec, spec: Spec) -> str:
    codes: Mapping[str, Mapping[str, str]] = a.value("codes")
    parts = []
    for vendor, table in codes.items():
        # Case-insensitive only where a code has letters (Ascend hex codes): digits have no case, and a
        # plain alternation of literals is a set lookup in Prometheus and VictoriaMetrics, where (?i)
        # matches the regex against every value (fleet-bench: FaultCritical 1,280 ms at 8,192 devices).
        alternation = "|".join(map(str, table))
        fold = "(?i)" if any(ch.isalpha() for ch in alternation) else ""
        matchers = f"{_eq('vendor', vendor)}, {_eq('code', fold + alternation, '=~')}"
        parts.append(f"increase({series(spec, c.FAULT_EVENTS, matchers)}[{a.value('window')}]) > 0")
    return "\nor\n".join(parts)


def _with_node(expr: str, spec: Spec) -> str:
    """``expr`` (a series with an ``instance`` label) with the ``node`` that instance last reported."""
    node_of = (
        f"topk by ({CLUSTER}, instance) (1, last_over_time("
        f"{recorded(spec, records(spec).instance_node)}[{spec.node_memory_lookback}]))"
    )
    on = f"on ({CLUSTER}, instance)"
    return f"({expr})\n  * {on} group_left (node)\n    {node_of}\nor {on}\n  ({expr})\n"


def _held_by(device_expr: str, allocated_selector: str, spec: Spec) -> str:
    """A per-device condition repeated for each holder in accelerator_allocated, keeping the value.

    The left side is reduced to one series per (node, uuid), so shared devices (several holders) give one
    alert per holder with the holder's namespace/pod/container/workload_kind/owner labels.
    """
    return (
        f"max by ({CLUSTER}, node, uuid) ({device_expr})\n"
        f"  + {_ON_DEV} group_right\n"
        f"    0 * ({series(spec, c.ALLOCATED, allocated_selector)} == 1)\n"
    )


def ecc_uncorrectable(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    return (
        f"increase({series(spec, c.ECC_ERRORS, UNCORRECTED)}[{w}]) > 0",
        "Uncorrectable ECC errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} new uncorrectable ECC errors in the last {w} on {_DEV}.",
    )


def ecc_correctable_storm(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"increase({series(spec, c.ECC_ERRORS, CORRECTED)}[{w}]) > {t}",
        "Storm of corrected ECC errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} corrected ECC errors in the last {w} (threshold {t}) on {_DEV}.",
    )


def temperature_high(a: AlertSpec, spec: Spec) -> Body:
    t, h = a.value("core_celsius"), a.value("hotspot_celsius")
    value = '{{ $value | printf "%.0f" }}'
    core, hotspot = (
        series(spec, c.TEMPERATURE, _eq("sensor", "core")),
        series(spec, c.TEMPERATURE, _eq("sensor", "hotspot")),
    )
    return (
        # A device without a core sensor is judged by its hotspot, so it never looks cool by absence.
        f"{core} >= {t}\nor\n({hotspot} >= {h} unless {_ON_DEV} {core})",
        "Hot accelerator on {{ $labels.node }} device {{ $labels.device }}",
        f'{{{{ if eq $labels.sensor "hotspot" }}}}Hotspot temperature {value} °C (threshold {h} °C for {a.for_};'
        f" the device reports no core temperature){{{{ else }}}}Core temperature {value} °C (threshold {t} °C"
        f" for {a.for_}){{{{ end }}}} on {_DEV}.",
    )


def temperature_critical(a: AlertSpec, spec: Spec) -> Body:
    core, mem = a.value("core_celsius"), a.value("memory_celsius")
    return (
        f"{series(spec, c.TEMPERATURE, _eq('sensor', 'core'))} >= {core}\nor\n"
        f"{series(spec, c.TEMPERATURE, _eq('sensor', 'memory'))} >= {mem}",
        "Critical temperature on {{ $labels.node }} device {{ $labels.device }}",
        f'{{{{ $labels.sensor }}}} temperature {{{{ $value | printf "%.0f" }}}} °C (limits: core {core} °C, memory {mem} °C) on {_DEV}.',
    )


def fault_critical(a: AlertSpec, spec: Spec) -> Body:
    return (
        _codes_expr(a, spec),
        "Hardware fault {{ $labels.code }} on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} driver fault events with hardware-class code {{{{ $labels.code }}}} in the last {a.value('window')} on {_DEV}.",
    )


def fault_application(a: AlertSpec, spec: Spec) -> Body:
    return (
        _codes_expr(a, spec),
        "Application fault {{ $labels.code }} on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} application-class driver faults (code {{{{ $labels.code }}}}) in the last {a.value('window')} on {_DEV}; the device is healthy, the job crashed.",
    )


def lost(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{series(spec, c.UP)} == 0",
        "Accelerator lost on {{ $labels.node }} device {{ $labels.device }}",
        f"{_DEV} is known but has not answered for {a.for_} (accelerator_up = {{{{ $value }}}}).",
    )


def health_failed(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{series(spec, c.HEALTH)} == 0",
        "Health check failing on {{ $labels.node }} device {{ $labels.device }}",
        f"The vendor health check of subsystem {{{{ $labels.subsystem }}}} reports {{{{ $value }}}} (1 = healthy) for {a.for_} on {_DEV}.",
    )


def row_remap_failed(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{series(spec, c.REMAP_FAILED)} == 1",
        "Row remapping failed on {{ $labels.node }} device {{ $labels.device }}",
        f"Memory row remapping failed (flag = {{{{ $value }}}}) on {_DEV}; reset or replace the device.",
    )


def row_remap_pending(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{series(spec, c.REMAP_PENDING)} == 1",
        "Row remap pending a reset on {{ $labels.node }} device {{ $labels.device }}",
        f"A memory row remap has waited {a.for_} for a GPU reset (flag = {{{{ $value }}}}) on {_DEV}.",
    )


def pcie_replay_storm(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"increase({series(spec, c.PCIE_REPLAY)}[{w}]) > {t}",
        "PCIe replay storm on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} PCIe replays in the last {w} (threshold {t}) on {_DEV}.",
    )


def link_errors(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"sum without (link, type) (increase({series(spec, c.LINK_ERRORS)}[{w}])) > {t}",
        "Interconnect link errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} link errors (CRC, replay, recovery) in the last {w} on {_DEV}.",
    )


def thermal_throttling(a: AlertSpec, spec: Spec) -> Body:
    reasons = "|".join(a.value("reasons"))
    return (
        f"max without (reason) ({series(spec, c.CLOCK_THROTTLED, _eq('reason', reasons, '=~'))}) == 1",
        "Thermal throttling on {{ $labels.node }} device {{ $labels.device }}",
        f"Clocks slowed down for heat ({reasons}) for {a.for_} (flag = {{{{ $value }}}}) on {_DEV}.",
    )


def _telemetry_metrics(a: AlertSpec) -> tuple[str, ...]:
    """The catalog names of ``a``'s ``metrics`` (catalog constant names); SpecError names a bad one."""
    names = []
    for const in a.value("metrics"):
        name = getattr(c, const, None)
        if not isinstance(name, str) or name not in {m.name for m in c.catalog()}:
            raise SpecError(
                f"alerts.{a.name}.metrics: {const!r} is not a metric constant of exporter/catalog.py"
            )
        names.append(name)
    return tuple(names)


def telemetry_records(spec: Spec) -> tuple[RecordingRule, ...]:
    """The per-device count of each watched hardware signal's series (``metric`` label: the family),
    recorded at the head of the hardware group so AcceleratorTelemetryMissing, evaluated after it in the
    same group at the same timestamp, reads this evaluation's value (no staleness). None when the alert is
    disabled."""
    a = spec.alert("AcceleratorTelemetryMissing")
    if a.name in spec.disabled_alerts:
        return ()
    parts = [
        f'label_replace(count by ({DEVICE_ID}) ({series(spec, name)}), "metric", "{name}", "", "")'
        for name in _telemetry_metrics(a)
    ]
    return (RecordingRule(records(spec).telemetry_series, "\nor\n".join(parts)),)


def telemetry_missing(a: AlertSpec, spec: Spec) -> Body:
    """A signal a device reported within the lookback and reports no more, while the device answers.

    Reads the ``telemetry_series`` record (one series per device and signal, written just before in the same
    group) instead of an hour of every raw series: the value is the most series of the signal the device had
    at once within the lookback (before: the distinct series seen, the same for a device whose sensors,
    subsystems and ECC types are reported together). The record has history only from when the rules were
    loaded, so a signal lost before that does not fire."""
    lb = a.value("lookback")
    _telemetry_metrics(a)
    rec = recorded(spec, records(spec).telemetry_series)
    return (
        f"(\n  max_over_time({rec}[{lb}])\n    unless on ({CLUSTER}, node, uuid, metric) {rec}\n)\n"
        f"and {_ON_DEV} ({series(spec, c.UP)} == 1)",
        "{{ $labels.metric }} missing on {{ $labels.node }} device {{ $labels.device }}",
        f"{_DEV} answers but stopped reporting {{{{ $labels.metric }}}} ({{{{ $value }}}} series seen in the last {lb}, none now).",
    )


def missing(a: AlertSpec, spec: Spec) -> Body:
    """Devices gone from a node, but not nodes gone on purpose.

    Fires (value: devices missing) while the node still reports fewer devices than its most in the lookback
    (a card fell off the bus or lost its driver). A node that reports nothing at all any more fires only
    while kube-state-metrics says Kubernetes still has it (``kube_node_info``), so a node that was removed or
    scaled down is silent. A node cordoned on purpose (``kube_node_spec_unschedulable == 1``, what drain
    sets) is silent either way. Without kube-state-metrics (no ``kube_node_info`` in the node's cluster) a
    node that stopped reporting entirely is left to XpuwatchExporterDown (its target is still scraped) or to
    node-level alerts, and only the partial loss fires.
    """
    n, lb = recorded(spec, records(spec).node_devices), spec.node_memory_lookback
    ksm = _matchers(spec.kube_state_metrics_selector, spec.cluster_selector)
    on_node = f"on ({CLUSTER}, node)"
    return (
        f"(\n  max_over_time({n}[{lb}]) - {n} > 0\n"
        f"  or\n  (max_over_time({n}[{lb}]) unless {on_node} {n})\n"
        f"    and {on_node} kube_node_info{{{ksm}}}\n)\n"
        f"unless {on_node}\n  kube_node_spec_unschedulable{{{ksm}}} == 1",
        "Accelerators missing on {{ $labels.node }}",
        f"{{{{ $labels.node }}}} reports {_COUNT} fewer devices than the most it had in the last {lb}.",
    )


def exporter_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _with_node(f"{series(spec, 'up')} == 0", spec),
        "xpuwatch exporter {{ $labels.instance }} down",
        f"Scrapes of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) have failed for {a.for_} (up = {{{{ $value }}}}); its device alerts are blind.",
    )


def backend_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _with_node(f"{series(spec, c.BACKEND_UP)} == 0", spec),
        "xpuwatch backend {{ $labels.backend }} failing on {{ $labels.instance }}",
        f"Backend {{{{ $labels.backend }}}} of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) has failed its polls for {a.for_} (xpuwatch_backend_up = {{{{ $value }}}}).",
    )


def low_utilization(a: AlertSpec, spec: Spec) -> Body:
    t, p95 = a.value("threshold"), records(spec).utilization_p95
    return (
        _held_by(f"{recorded(spec, p95)} < {t}", a.value("workload_selector"), spec),
        "Allocated accelerator barely used on {{ $labels.node }} device {{ $labels.device }}",
        f"{spec.rec('p95_window')} P95 utilization {_PCT} (threshold {_pct(t)}) on {_DEV}, held by {_HELD_BY}.",
    )


def low_sm_occupancy(a: AlertSpec, spec: Spec) -> Body:
    t, busy = a.value("threshold"), a.value("busy_utilization")
    return (
        f"{series(spec, c.SM_OCCUPANCY)} < {t}\nand {_ON_DEV}\n{series(spec, c.UTILIZATION)} >= {busy}",
        "Busy accelerator with low SM occupancy on {{ $labels.node }} device {{ $labels.device }}",
        f"SM occupancy {_PCT} (threshold {_pct(t)}) while utilization is at least {_pct(busy)} on {_DEV}; check batching.",
    )


def memory_near_full(a: AlertSpec, spec: Spec) -> Body:
    # A ratio above 1 (used above total) is a reading no device can have: the exporter counts it in
    # xpuwatch_implausible_readings{reason="used_above_total"} (exporter/plausibility.py) and it says nothing
    # about how full the memory is, so it is left out rather than paged as "memory full".
    t = a.value("threshold")
    return (
        f"({recorded(spec, records(spec).memory_used)} > {t}) <= 1",
        "Accelerator memory nearly full on {{ $labels.node }} device {{ $labels.device }}",
        f"Device memory {_PCT} used (threshold {_pct(t)}) on {_DEV}.",
    )


def holder_rules(spec: Spec) -> tuple[RecordingRule, ...]:
    """Per-holder judgements, each a device condition joined onto its holders (``_held_by``: one series per
    holder with the holder's labels and the device's value), recorded in every cluster whatever alerts are
    disabled (the waste dashboard reads them):

    - idle notebooks: utilization at most the AcceleratorIdleNotebook ``utilization_max`` while at least its
      ``memory_min_bytes`` are held, for notebook holders of whole devices; value the utilization (ratio);
    - starved cards: power below the AcceleratorPowerStarved ``threshold`` of the power limit, for its
      ``workload_selector`` holders; value power / limit (ratio);
    - memory hoarders: at least ``memory_min_bytes`` held while the 1 h P95 utilization record is below the
      AcceleratorLowUtilization ``threshold``, any holder; value the memory used (bytes).
    """
    r = records(spec)
    notebook, starved = spec.alert("AcceleratorIdleNotebook"), spec.alert("AcceleratorPowerStarved")
    u, mem = notebook.value("utilization_max"), notebook.value("memory_min_bytes")
    low = spec.alert("AcceleratorLowUtilization").value("threshold")
    return (
        RecordingRule(
            r.holder_idle_notebook,
            _held_by(
                f"({series(spec, c.UTILIZATION)} <= {u}) and {_ON_DEV} ({series(spec, c.MEMORY_USED)} >= {mem})",
                NOTEBOOK,
                spec,
            ),
        ),
        RecordingRule(
            r.holder_starved,
            _held_by(
                f"{series(spec, c.POWER)} / ({series(spec, c.POWER_LIMIT)} > 0) < {starved.value('threshold')}",
                starved.value("workload_selector"),
                spec,
            ),
        ),
        RecordingRule(
            r.holder_hoarded,
            _held_by(
                f"{series(spec, c.MEMORY_USED)} >= {mem}\n  and {_ON_DEV}\n  "
                f"{recorded(spec, r.utilization_p95)} < {low}",
                "",
                spec,
            ),
        ),
    )


def power_starved(a: AlertSpec, spec: Spec) -> Body:
    """The starved-card record of xpuwatch.recording.holder (``holder_rules``: the same threshold and holders)."""
    t = a.value("threshold")
    return (
        recorded(spec, records(spec).holder_starved),
        "Allocated accelerator starved of work on {{ $labels.node }} device {{ $labels.device }}",
        f"Power draw {_PCT} of the power limit (threshold {_pct(t)}) for {a.for_} on {_DEV}, held by {_HELD_BY}.",
    )


def idle_notebook(a: AlertSpec, spec: Spec) -> Body:
    """Slice-level first (a notebook on a MIG/vGPU slice: the slice series carry the holder's pod labels and
    a MIG parent has no device utilization), then device-level for notebooks holding whole devices: the idle
    notebook record of xpuwatch.recording.holder (``holder_rules``)."""
    u, mem = a.value("utilization_max"), a.value("memory_min_bytes")
    holder = f"{CLUSTER}, node, uuid, namespace, pod, container"
    notebook = f"0 * ({series(spec, c.ALLOCATED, NOTEBOOK)} == 1)"
    on_slice_holder = (
        f"max by ({holder}) (\n"
        f"  ({recorded(spec, records(spec).slice_compute)} <= {u})\n"
        f"  and {_ON_SLICE} ({series(spec, c.SLICE_MEMORY_USED)} >= {mem})\n"
        f")\n  + on ({holder}) group_right\n    {notebook}\n"
    )
    return (
        f"(\n{on_slice_holder})\nor on ({holder})\n  {recorded(spec, records(spec).holder_idle_notebook)}",
        "Idle notebook {{ $labels.namespace }}/{{ $labels.pod }} holds an accelerator",
        f"Notebook {_HOLDER} of {{{{ $labels.owner }}}} has held memory on {_DEV} at {_PCT} utilization (at most {_pct(u)}) for {a.for_}.",
    )


def container_memory_hog(a: AlertSpec, spec: Spec) -> Body:
    """One container's share of a shared card's memory, from the per-process lists mapped to containers.
    Processes of no named container (``container=""``) are neither a tenant nor counted as one."""
    share, tenants = a.value("share"), a.value("tenants_min")
    held = series(spec, c.CONTAINER_MEMORY_USED, 'container!=""')
    # Shared cards first, then the division: the join with the totals runs over the containers of shared
    # cards only, not every container (the same series and values as dividing first).
    shared = f"{held}\n    and {_ON_DEV}\n    count by ({CLUSTER}, node, uuid) ({held} > 0) >= {tenants}"
    return (
        f"(\n  (\n    {shared}\n  )\n  / {_ON_DEV} group_left\n"
        f"  max by ({CLUSTER}, node, uuid) ({series(spec, c.MEMORY_TOTAL)} > 0)\n) > {share}",
        "Container {{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} holds most of a shared card",
        f"Container {_HOLDER}/{{{{ $labels.container }}}} holds {_PCT} of the memory of shared {_DEV} "
        f"(threshold {_pct(share)}, at least {tenants} containers on it) for {a.for_}; the others are about to OOM.",
    )


def slice_memory_bound(a: AlertSpec, spec: Spec) -> Body:
    r = records(spec)
    mh, cl = spec.rec("bottleneck_memory_high"), spec.rec("bottleneck_compute_low")
    return (
        f"{recorded(spec, r.slice_memory_used)}\nand {_ON_SLICE}\n"
        f"{recorded(spec, r.slice_bottleneck, _eq('bottleneck', 'memory'))}",
        "Slice {{ $labels.slice_id }} short of memory on {{ $labels.node }}",
        f"Memory {_PCT} of the {_SLICE} is used (above {_pct(mh)}) while compute is below {_pct(cl)}; give the slice more memory.",
    )


def slice_compute_bound(a: AlertSpec, spec: Spec) -> Body:
    r = records(spec)
    ch, ml = spec.rec("bottleneck_compute_high"), spec.rec("bottleneck_memory_low")
    return (
        f"{recorded(spec, r.slice_compute)}\nand {_ON_SLICE}\n"
        f"{recorded(spec, r.slice_bottleneck, _eq('bottleneck', 'compute'))}",
        "Slice {{ $labels.slice_id }} short of compute on {{ $labels.node }}",
        f"Compute {_PCT} busy (above {_pct(ch)}) in the {_SLICE} while memory is below {_pct(ml)}; give the slice more compute or run fewer tasks in it.",
    )


def pool_underused(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"avg_over_time({recorded(spec, records(spec).pool_utilization)}[{w}]) < {t}",
        "{{ $labels.vendor }} {{ $labels.model }} pool underused",
        f"The {{{{ $labels.model }}}} pool averaged {_PCT} utilization over {w}, below the {_pct(t)} floor of the healthy band, for {a.for_}.",
    )


def pool_saturated(a: AlertSpec, spec: Spec) -> Body:
    w, t, alloc = a.value("window"), a.value("threshold"), a.value("allocated_min")
    r = records(spec)
    return (
        f"avg_over_time({recorded(spec, r.pool_utilization)}[{w}]) > {t}\nand on ({_POOL})\n"
        f"{recorded(spec, r.pool_allocated)} >= {alloc}",
        "{{ $labels.vendor }} {{ $labels.model }} pool saturated",
        f"The {{{{ $labels.model }}}} pool averaged {_PCT} utilization over {w} (above {_pct(t)}) with at least {_pct(alloc)} of its devices allocated; tasks will queue.",
    )


def backend_empty(a: AlertSpec, spec: Spec) -> Body:
    devices = series(spec, c.BACKEND_DEVICES)
    return (
        _with_node(
            f"{devices} == 0\nand on ({CLUSTER}, instance, backend)\n{series(spec, c.BACKEND_UP)} == 1", spec
        ),
        "xpuwatch backend {{ $labels.backend }} reads no device on {{ $labels.instance }}",
        f"Backend {{{{ $labels.backend }}}} of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) polls fine but has listed {{{{ $value }}}} devices for {a.for_}; every card of its vendor is unwatched.",
    )


def fields_unread(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        _with_node(f"increase({series(spec, c.BACKEND_ERRORS, _eq('reason', 'field'))}[{w}]) > {t}", spec),
        "xpuwatch backend {{ $labels.backend }} cannot read some fields on {{ $labels.instance }}",
        f"Backend {{{{ $labels.backend }}}} of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) could not read {_COUNT} cells in the last {w} (threshold {t}), for {a.for_}; those readings are missing.",
    )


# ------------------------------------------------------------------------------------ meta: the paging path
def _component(spec: Spec, metric: str, selector: str, extra: str = "") -> str:
    """A series of the relay, the controller or Alertmanager: their own job selector, the cluster selector."""
    return f"{metric}{{{_matchers(selector, spec.cluster_selector, extra)}}}"


def _new_or_increased(counter: str, window: str) -> str:
    """Events of a labelled counter in ``window``, including its first: a series created at its first event
    (``xpuwatch_relay_messages_failed_total{reason="93000"}`` starts at 1) has no increase() until a second one,
    so a series that did not exist ``window`` ago counts with its value. Set operators ignore the metric name,
    so a series in both halves gives one alert."""
    return f"increase({counter}[{window}]) > 0\nor\n({counter} unless {counter} offset {window})"


# _down's value: 0 from up == 0, 1 from absent() (no target of the job at all).
_UP_OR_ABSENT = (
    "{{ if eq $value 1.0 }}no target of its job is scraped at all{{ else }}up = {{ $value }}{{ end }}"
)


def _down(spec: Spec, selector: str) -> str:
    up = _component(spec, "up", selector)
    return f"{up} == 0\nor\nabsent({up})"


def relay_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _down(spec, a.value("relay_selector")),
        "xpuwatch relay down{{ with $labels.instance }} ({{ . }}){{ end }}",
        f"The relay has not been scraped successfully for {a.for_} ({_UP_OR_ABSENT}): no alert reaches the chat groups through it.",
    )


def relay_messages_failing(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    failed = _component(spec, c.RELAY_FAILED.name, a.value("relay_selector"))
    return (
        _new_or_increased(failed, w),
        "Relay gave up messages to channel {{ $labels.channel }} ({{ $labels.reason }})",
        f"{_COUNT} messages to channel {{{{ $labels.channel }}}} failed permanently in the last {w} with reason {{{{ $labels.reason }}}} "
        "(a bot code such as WeCom 93000 bad key, Feishu 19021 bad signature, DingTalk 310000 keyword or signature, "
        "or expired / unconfirmed / render_failed / channel_removed); nobody saw them.",
    )


def relay_backlog(a: AlertSpec, spec: Spec) -> Body:
    t = a.value("max_age_seconds")
    age = _component(spec, c.RELAY_OLDEST_AGE.name, a.value("relay_selector"))
    return (
        f"{age} > {t}",
        "Relay messages to channel {{ $labels.channel }} are waiting",
        f"The oldest pending message to channel {{{{ $labels.channel }}}} is {{{{ $value | humanizeDuration }}}} old (threshold {t} s) for {a.for_}: the bot is refusing, rate-limiting or not answering.",
    )


def relay_outbox_failing(a: AlertSpec, spec: Spec) -> Body:
    w, sel = a.value("window"), a.value("relay_selector")
    up = _component(spec, c.RELAY_OUTBOX_UP.name, sel)
    errors = _component(spec, c.RELAY_OUTBOX_ERRORS.name, sel)
    store = _component(spec, c.RELAY_REJECTED.name, sel, _eq("reason", "store_failed"))
    return (
        f"{up} == 0\nor\nincrease({errors}[{w}]) > 0\nor\n({_new_or_increased(store, w)})",
        "Relay outbox failing{{ with $labels.instance }} on {{ . }}{{ end }}",
        f"The relay's outbox cannot be read or written (value {{{{ $value }}}}: 0 = unreadable at scrape, else failed reads/writes or refused notifications in the last {w}) for {a.for_}: disk full or corrupt pages; notifications are refused (503) or not delivered.",
    )


def remediation_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _down(spec, a.value("remediation_selector")),
        "xpuwatch remediation controller down{{ with $labels.instance }} ({{ . }}){{ end }}",
        f"The remediation controller has not been scraped successfully for {a.for_} ({_UP_OR_ABSENT}): drain, reclaim and resize actions stop.",
    )


def remediation_actions_failing(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    failed = _component(
        spec, c.REMEDIATION_ACTIONS.name, a.value("remediation_selector"), _eq("result", "failed")
    )
    # The rule's own label action="none" replaces the series' action label (the controller must not act on
    # its own failures); remediation_action keeps which one failed, so two failing actions stay two alerts.
    return (
        f'label_replace(\n{_new_or_increased(failed, w)},\n"remediation_action", "$1", "action", "(.+)")',
        "Remediation action {{ $labels.action }} failing",
        f"{_COUNT} {{{{ $labels.action }}}} steps ({{{{ $labels.mode }}}}) failed in the last {w}; the fault they answer is still in place.",
    )


def remediation_cap_reached(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    refused = _component(
        spec, c.REMEDIATION_REFUSALS.name, a.value("remediation_selector"), _eq("reason", "cap")
    )
    return (
        _new_or_increased(refused, w),
        "Remediation blast-radius cap reached",
        f"The guard refused {_COUNT} actions in the last {w} because the cap of disrupted nodes is reached (circuit open); new faults wait for a human.",
    )


def remediation_recheck_failing(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    failed = _component(
        spec,
        c.REMEDIATION_RECHECKS.name,
        a.value("remediation_selector"),
        _eq("result", "unreachable|unreadable", "=~"),
    )
    return (
        f'label_replace(\n{_new_or_increased(failed, w)},\n"remediation_action", "$1", "action", "(.+)")',
        "Remediation cannot confirm alerts in Prometheus; {{ $labels.action }} not acting",
        f"{_COUNT} {{{{ $labels.action }}}} {{{{ $labels.step }}}} steps were not run in the last {w}: the controller could not ask Prometheus (recheck.prometheus_url) whether the alert still fires, or could not read its answer ({{{{ $labels.result }}}}), and does not act unconfirmed.",
    )


def remediation_node_held_too_long(a: AlertSpec, spec: Spec) -> Body:
    sel = a.value("remediation_selector")
    age = _component(spec, c.REMEDIATION_HELD_AGE.name, sel)
    limit = _component(spec, c.REMEDIATION_MAX_HOLD.name, sel)
    return (
        f"label_replace(\n  {age}\n  > on ({CLUSTER}, job, instance) group_left ()\n  {limit},\n"
        '"remediation_action", "$1", "action", "(.+)")',
        "Node {{ $labels.node }} held by xpuwatch ({{ $labels.action }}) too long",
        "xpuwatch has held node {{ $labels.node }} ({{ $labels.action }}: tainted or cordoned) for "
        "{{ $value | humanizeDuration }}, longer than its guard.max_hold_seconds: repair it and acknowledge or release it.",
    )


def alertmanager_notifications_failing(a: AlertSpec, spec: Spec) -> Body:
    # receiver_name exists from Alertmanager 0.27 with --enable-feature=receiver-name-in-metrics, reason
    # (clientError = a 4xx, serverError = a 5xx, other = unreachable or timed out) from 0.26; 0.25 (Debian 12)
    # has integration alone. Grouping by a label a version lacks yields no such label, so one rule serves all.
    w = a.value("window")
    failed = _component(spec, "alertmanager_notifications_failed_total", a.value("alertmanager_selector"))
    return (
        f"sum by ({CLUSTER}, instance, integration, receiver_name, reason) (increase({failed}[{w}])) > 0",
        "Alertmanager {{ $labels.instance }} fails to send {{ with $labels.receiver_name }}to receiver {{ . }}"
        "{{ else }}{{ $labels.integration }} notifications{{ end }}",
        f"Alertmanager {{{{ $labels.instance }}}} gave up {_COUNT} {{{{ $labels.integration }}}} notifications"
        "{{ with $labels.receiver_name }} to receiver {{ . }}{{ end }}"
        f" in the last {w}, for {a.for_}: "
        '{{ if eq $labels.reason "clientError" }}the receiver answered 4xx (relay: unknown channel 404, '
        'wrong token 401; not retried){{ else if eq $labels.reason "serverError" }}the receiver answered 5xx'
        '{{ else if eq $labels.reason "other" }}the receiver was unreachable or too slow'
        "{{ else }}a receiver (the relay, the controller) refuses, is unreachable or too slow{{ end }}. "
        "{{ if not $labels.receiver_name }}This Alertmanager does not name the receiver in its metrics "
        "(0.27+ with --enable-feature=receiver-name-in-metrics does): its log line 'Notify for alerts failed' "
        "names it and the error. {{ end }}`xpuwatch rules test-page` shows each hop's answer.",
    )


def exporter_absent(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"absent({series(spec, 'up')})",
        "No xpuwatch exporter target is scraped",
        f"No target matches exporter_job_selector ({spec.exporter_job_selector}) for {a.for_} (absent = {{{{ $value }}}}): no exporter is "
        "deployed, or its scrape job has another name; every device alert is blind. Set exporter_job_selector "
        "in a site spec to your job name (`xpuwatch rules generate --scrape-config prometheus.yml` checks it).",
    )


ALERTS: Mapping[str, tuple[str, Callable[[AlertSpec, Spec], Body]]] = MappingProxyType(
    {
        "AcceleratorEccUncorrectable": (GROUP_HARDWARE, ecc_uncorrectable),
        "AcceleratorEccCorrectableStorm": (GROUP_HARDWARE, ecc_correctable_storm),
        "AcceleratorTemperatureHigh": (GROUP_HARDWARE, temperature_high),
        "AcceleratorTemperatureCritical": (GROUP_HARDWARE, temperature_critical),
        "AcceleratorFaultCritical": (GROUP_HARDWARE, fault_critical),
        "AcceleratorLost": (GROUP_HARDWARE, lost),
        "AcceleratorHealthFailed": (GROUP_HARDWARE, health_failed),
        "AcceleratorRowRemapFailed": (GROUP_HARDWARE, row_remap_failed),
        "AcceleratorRowRemapPending": (GROUP_HARDWARE, row_remap_pending),
        "AcceleratorPcieReplayStorm": (GROUP_HARDWARE, pcie_replay_storm),
        "AcceleratorLinkErrors": (GROUP_HARDWARE, link_errors),
        "AcceleratorThermalThrottling": (GROUP_HARDWARE, thermal_throttling),
        "AcceleratorTelemetryMissing": (GROUP_HARDWARE, telemetry_missing),
        "AcceleratorMissing": (GROUP_HARDWARE, missing),
        "XpuwatchExporterDown": (GROUP_HARDWARE, exporter_down),
        "XpuwatchBackendDown": (GROUP_HARDWARE, backend_down),
        "XpuwatchBackendEmpty": (GROUP_HARDWARE, backend_empty),
        "XpuwatchFieldsUnread": (GROUP_HARDWARE, fields_unread),
        "AcceleratorLowUtilization": (GROUP_PERFORMANCE_DEVICE, low_utilization),
        "AcceleratorLowSmOccupancy": (GROUP_PERFORMANCE_DEVICE, low_sm_occupancy),
        "AcceleratorMemoryNearFull": (GROUP_PERFORMANCE_DEVICE, memory_near_full),
        "AcceleratorPowerStarved": (GROUP_PERFORMANCE_DEVICE, power_starved),
        "AcceleratorIdleNotebook": (GROUP_PERFORMANCE, idle_notebook),
        "AcceleratorContainerMemoryHog": (GROUP_PERFORMANCE, container_memory_hog),
        "AcceleratorSliceMemoryBound": (GROUP_PERFORMANCE, slice_memory_bound),
        "AcceleratorSliceComputeBound": (GROUP_PERFORMANCE, slice_compute_bound),
        "AcceleratorFaultApplication": (GROUP_PERFORMANCE, fault_application),
        "AcceleratorPoolUnderused": (GROUP_PERFORMANCE, pool_underused),
        "AcceleratorPoolSaturated": (GROUP_PERFORMANCE, pool_saturated),
        "AcceleratorJobsQueuedWhileIdle": (GROUP_PERFORMANCE, queue.jobs_queued_while_idle),
        "AcceleratorQueueTimeHigh": (GROUP_PERFORMANCE, queue.queue_time_high),
        "XpuwatchRelayDown": (GROUP_META, relay_down),
        "XpuwatchRelayMessagesFailing": (GROUP_META, relay_messages_failing),
        "XpuwatchRelayBacklog": (GROUP_META, relay_backlog),
        "XpuwatchRelayOutboxFailing": (GROUP_META, relay_outbox_failing),
        "XpuwatchRemediationDown": (GROUP_META, remediation_down),
        "XpuwatchRemediationActionsFailing": (GROUP_META, remediation_actions_failing),
        "XpuwatchRemediationCapReached": (GROUP_META, remediation_cap_reached),
        "XpuwatchRemediationRecheckFailing": (GROUP_META, remediation_recheck_failing),
        "XpuwatchRemediationNodeHeldTooLong": (GROUP_META, remediation_node_held_too_long),
        "XpuwatchAlertmanagerNotificationsFailing": (GROUP_META, alertmanager_notifications_failing),
        "XpuwatchExporterAbsent": (GROUP_META, exporter_absent),
    }
)


class RuleBuildError(ValueError):
    """The spec and the builder disagree (an alert without a body, a body without a spec entry)."""


def alerting_rule(a: AlertSpec, spec: Spec) -> AlertingRule:
    """One alert: its body plus the category/severity/action labels and the runbook link."""
    _, body = ALERTS[a.name]
    expr, summary, description = body(a, spec)
    labels = {**spec.alert_labels, "category": a.category, "severity": a.severity, "action": a.action}
    return AlertingRule(
        alert=a.name,
        expr=expr.strip("\n"),
        for_=a.for_,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(
            {
                "summary": summary,
                "description": description,
                "runbook_url": f"{spec.runbook_base_url}/{a.name}.md",
            }
        ),
    )


def build_groups(spec: Spec) -> tuple[RuleGroup, ...]:
    """Recording (device records the alerts read; node and team aggregates in groups of their own; the
    per-holder judgements the performance alerts and the waste board read), hardware (headed by the telemetry presence record its
    TelemetryMissing reads), performance and meta groups, alerts in spec order (less ``disabled_alerts`` and, without a remediation
    controller, its own alerts: ``Spec.enabled``).

    Prometheus and vmalert evaluate groups concurrently and the rules of one group in order, so an alert
    reading a record of another group sees the value of that group's last evaluation (at most one
    interval old); records an alert needs fresh sit before it in its own group. Raises RuleBuildError on a
    mismatch between spec and builder, or when a spec category contradicts the builder's group."""
    names = {a.name for a in spec.alerts}
    if names != set(ALERTS):
        raise RuleBuildError(
            f"spec and builder disagree: only in spec {sorted(names - set(ALERTS))}, "
            f"only in builder {sorted(set(ALERTS) - names)}"
        )
    by_group: dict[str, list[RecordingRule | AlertingRule]] = {
        GROUP_HARDWARE: [],
        GROUP_PERFORMANCE_DEVICE: [],
        GROUP_PERFORMANCE: [],
        GROUP_META: [],
    }
    for a in spec.alerts:
        group = ALERTS[a.name][0]
        if group.split(".")[:2] != ["xpuwatch", a.category]:
            raise RuleBuildError(f"{a.name}: category {a.category} but built in group {group}")
        if spec.enabled(a):
            by_group[group].append(alerting_rule(a, spec))
    return (
        RuleGroup(GROUP_RECORDING, tuple(recording_rules(spec))),
        RuleGroup(GROUP_RECORDING_NODE, dashboard_rules(spec)),
        RuleGroup(GROUP_RECORDING_TEAM, chargeback_rules(spec)),
        RuleGroup(GROUP_RECORDING_HOLDER, holder_rules(spec)),
        RuleGroup(GROUP_HARDWARE, telemetry_records(spec) + tuple(by_group[GROUP_HARDWARE])),
        RuleGroup(GROUP_PERFORMANCE_DEVICE, tuple(by_group[GROUP_PERFORMANCE_DEVICE])),
        RuleGroup(GROUP_PERFORMANCE, tuple(by_group[GROUP_PERFORMANCE])),
        RuleGroup(GROUP_META, tuple(by_group[GROUP_META])),
    )


def _rule_dict(rule: RecordingRule | AlertingRule) -> dict[str, Any]:
    if isinstance(rule, RecordingRule):
        d: dict[str, Any] = {"record": rule.record, "expr": rule.expr.strip("\n")}
        if rule.labels:
            d["labels"] = dict(rule.labels)
        return d
    return {
        "alert": rule.alert,
        "expr": rule.expr,
        "for": rule.for_,
        "labels": dict(rule.labels),
        "annotations": dict(rule.annotations),
    }


def groups_dict(groups: tuple[RuleGroup, ...]) -> list[dict[str, Any]]:
    return [{"name": g.name, "rules": [_rule_dict(r) for r in g.rules]} for g in groups]


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings so PromQL stays readable in the generated files; no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)

HEADER = "# Generated by `xpuwatch rules generate` from alerts/spec.yaml. Do not edit; edit the spec.\n"


def dump_yaml(data: Any) -> str:
    """YAML as the generated files are written: keys in insertion order, unicode kept, no wrapping."""
    return HEADER + yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100000)


def render_rules(spec: Spec) -> str:
    """The Prometheus rule file (``rule_files:``) for the spec."""
    return dump_yaml({"groups": groups_dict(build_groups(spec))})


def render_prometheusrule(spec: Spec) -> str:
    """The same groups as a prometheus-operator ``monitoring.coreos.com/v1`` PrometheusRule."""
    return dump_yaml(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {"name": spec.prometheusrule_name, "labels": dict(spec.prometheusrule_labels)},
            "spec": {"groups": groups_dict(build_groups(spec))},
        }
    )
