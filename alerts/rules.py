"""Rule builder: spec -> Prometheus recording and alerting rules (rules.yml and a PrometheusRule), pure.

Metric names come from ``exporter.catalog``; every threshold, window and duration from the spec. Each alert
is one small function below returning its expression and annotations; the labels ``category``, ``severity``
and ``action`` and the ``runbook_url`` are added in one pass (the monitoring-mixin convention). Expressions
never read a missing series as healthy: device-level performance alerts are joined onto the holders in
``accelerator_allocated``, absence of a hardware signal fires ``AcceleratorTelemetryMissing``, the ECC
summary records -1 (not reported) instead of 0 for devices without ECC counters, and a node with no devices
left still counts as 0, not as nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from alerts import queue
from alerts.spec import AlertSpec, Spec, SpecError
from exporter import catalog as c

GROUP_RECORDING = "xpuwatch.recording"
GROUP_HARDWARE = "xpuwatch.hardware"
GROUP_PERFORMANCE = "xpuwatch.performance"

DEVICE_ID = "node, vendor, model, device, uuid"
_ON_DEV = "on (node, uuid)"
_ON_SLICE = "on (node, uuid, slice_id)"
_DEV = "{{ $labels.vendor }} device {{ $labels.device }} ({{ $labels.model }}, {{ $labels.uuid }}) on {{ $labels.node }}"
_SLICE = "slice {{ $labels.slice_id }} ({{ $labels.slice_kind }} {{ $labels.profile }}) of device {{ $labels.device }} ({{ $labels.uuid }}) on {{ $labels.node }}"
_HOLDER = "{{ $labels.namespace }}/{{ $labels.pod }}"
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


def records(spec: Spec) -> Records:
    """The recording-rule names; windows from the spec appear in the names (``p95_1h``)."""
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
    )


def _pct(ratio: float) -> str:
    return f"{ratio:.0%}"


def _bottleneck(level_on: str, mem: str, compute: str, spec: Spec) -> dict[str, str]:
    mh, cl = spec.rec("bottleneck_memory_high"), spec.rec("bottleneck_compute_low")
    ch, ml = spec.rec("bottleneck_compute_high"), spec.rec("bottleneck_memory_low")
    memory = f"({mem} > {mh}) and {level_on} ({compute} < {cl})"
    comp = f"({mem} < {ml}) and {level_on} ({compute} > {ch})"
    return {
        "memory": f"clamp({memory}, 1, 1)",
        "compute": f"clamp({comp}, 1, 1)",
        "balanced": (
            f"clamp(\n  {mem} and {level_on} {compute}\n  unless {level_on} ({memory})\n"
            f"  unless {level_on} ({comp}),\n  1, 1\n)"
        ),
        "unknown": f"clamp({mem} unless {level_on} {compute}, 1, 1)",
    }


def recording_rules(spec: Spec) -> tuple[RecordingRule, ...]:
    """Recording rules dashboards and alerts reuse. Bottleneck classes are 1-valued series labelled
    ``bottleneck=memory|compute|balanced|unknown`` (unknown: no SM activity metric for this device)."""
    r = records(spec)
    devices = f"count by (vendor, model) (count by (node, vendor, model, uuid) ({c.UP}))"
    out = [
        RecordingRule(
            r.utilization_p95, f"quantile_over_time(0.95, {c.UTILIZATION}[{spec.rec('p95_window')}])"
        ),
        RecordingRule(r.pool_utilization, f"avg by (vendor, model) ({c.UTILIZATION})"),
        RecordingRule(
            r.pool_allocated,
            f"count by (vendor, model) (count by (node, vendor, model, uuid) ({c.ALLOCATED} == 1))\n"
            f"  / {devices}\nor\n  0 * {devices}\n",
        ),
        # Devices whose tool prints only a percentage (Hygon hy-smi VRAM%) export the ratio itself.
        RecordingRule(
            r.memory_used,
            f"{c.MEMORY_USED} / ({c.MEMORY_TOTAL} > 0)\nor {_ON_DEV}\n  {c.MEMORY_USED_RATIO}\n",
        ),
        RecordingRule(r.slice_memory_used, f"{c.SLICE_MEMORY_USED} / ({c.SLICE_MEMORY_LIMIT} > 0)"),
        RecordingRule(r.slice_compute, f"{c.SLICE_SM_ACTIVE} or {_ON_SLICE} {c.SLICE_UTILIZATION}"),
    ]
    for cls, expr in _bottleneck(_ON_DEV, r.memory_used, c.SM_ACTIVE, spec).items():
        out.append(RecordingRule(r.device_bottleneck, expr, MappingProxyType({"bottleneck": cls})))
    for cls, expr in _bottleneck(_ON_SLICE, r.slice_memory_used, r.slice_compute, spec).items():
        out.append(RecordingRule(r.slice_bottleneck, expr, MappingProxyType({"bottleneck": cls})))
    out += [
        RecordingRule(r.node_devices, f"count by (node) (count by (node, uuid) ({c.UP}))"),
        RecordingRule(
            r.instance_node, f"count by (instance, node) (count by (instance, node, uuid) ({c.UP}))"
        ),
        RecordingRule(
            r.ecc_uncorrected,
            f'sum by ({DEVICE_ID}) (increase({c.ECC_ERRORS}{{type="uncorrected"}}[{spec.rec("ecc_status_window")}]))\n'
            f"or {_ON_DEV}\n  (-1 * group by ({DEVICE_ID}) ({c.UP}))\n",
        ),
    ]
    out += [RecordingRule(name, expr) for name, expr in queue.recording_rules(spec, r.utilization_p95)]
    return tuple(out)


# ----------------------------------------------------------------------------------------- alert bodies
# Each returns (expr, summary, description); `a` is the alert's spec entry, `spec` the whole spec.
Body = tuple[str, str, str]


def _codes_expr(a: AlertSpec) -> str:
    codes: Mapping[str, Mapping[str, str]] = a.value("codes")
    parts = [
        f'increase({c.FAULT_EVENTS}{{vendor="{vendor}", code=~"(?i){"|".join(str(k) for k in table)}"}}[{a.value("window")}]) > 0'
        for vendor, table in codes.items()
    ]
    return "\nor\n".join(parts)


def _with_node(expr: str, spec: Spec) -> str:
    """``expr`` (a series with an ``instance`` label) with the ``node`` that instance last reported."""
    node_of = (
        f"topk by (instance) (1, last_over_time({records(spec).instance_node}[{spec.node_memory_lookback}]))"
    )
    return f"({expr})\n  * on (instance) group_left (node)\n    {node_of}\nor on (instance)\n  ({expr})\n"


def _held_by(device_expr: str, allocated_selector: str) -> str:
    """A per-device condition repeated for each holder in accelerator_allocated, keeping the value.

    The left side is reduced to one series per (node, uuid), so shared devices (several holders) give one
    alert per holder with the holder's namespace/pod/container/workload_kind/owner labels.
    """
    return (
        f"max by (node, uuid) ({device_expr})\n"
        f"  + {_ON_DEV} group_right\n"
        f"    0 * ({c.ALLOCATED}{{{allocated_selector}}} == 1)\n"
    )


def ecc_uncorrectable(a: AlertSpec, spec: Spec) -> Body:
    w = a.value("window")
    return (
        f'increase({c.ECC_ERRORS}{{type="uncorrected"}}[{w}]) > 0',
        "Uncorrectable ECC errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} new uncorrectable ECC errors in the last {w} on {_DEV}.",
    )


def ecc_correctable_storm(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f'increase({c.ECC_ERRORS}{{type="corrected"}}[{w}]) > {t}',
        "Storm of corrected ECC errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} corrected ECC errors in the last {w} (threshold {t}) on {_DEV}.",
    )


def temperature_high(a: AlertSpec, spec: Spec) -> Body:
    t, h = a.value("core_celsius"), a.value("hotspot_celsius")
    value = '{{ $value | printf "%.0f" }}'
    return (
        # A device without a core sensor is judged by its hotspot, so it never looks cool by absence.
        f'{c.TEMPERATURE}{{sensor="core"}} >= {t}\nor\n({c.TEMPERATURE}{{sensor="hotspot"}} >= {h}'
        f' unless on (node, uuid) {c.TEMPERATURE}{{sensor="core"}})',
        "Hot accelerator on {{ $labels.node }} device {{ $labels.device }}",
        f'{{{{ if eq $labels.sensor "hotspot" }}}}Hotspot temperature {value} °C (threshold {h} °C for {a.for_};'
        f" the device reports no core temperature){{{{ else }}}}Core temperature {value} °C (threshold {t} °C"
        f" for {a.for_}){{{{ end }}}} on {_DEV}.",
    )


def temperature_critical(a: AlertSpec, spec: Spec) -> Body:
    core, mem = a.value("core_celsius"), a.value("memory_celsius")
    return (
        f'{c.TEMPERATURE}{{sensor="core"}} >= {core}\nor\n{c.TEMPERATURE}{{sensor="memory"}} >= {mem}',
        "Critical temperature on {{ $labels.node }} device {{ $labels.device }}",
        f'{{{{ $labels.sensor }}}} temperature {{{{ $value | printf "%.0f" }}}} °C (limits: core {core} °C, memory {mem} °C) on {_DEV}.',
    )


def fault_critical(a: AlertSpec, spec: Spec) -> Body:
    return (
        _codes_expr(a),
        "Hardware fault {{ $labels.code }} on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} driver fault events with hardware-class code {{{{ $labels.code }}}} in the last {a.value('window')} on {_DEV}.",
    )


def fault_application(a: AlertSpec, spec: Spec) -> Body:
    return (
        _codes_expr(a),
        "Application fault {{ $labels.code }} on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} application-class driver faults (code {{{{ $labels.code }}}}) in the last {a.value('window')} on {_DEV}; the device is healthy, the job crashed.",
    )


def lost(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{c.UP} == 0",
        "Accelerator lost on {{ $labels.node }} device {{ $labels.device }}",
        f"{_DEV} is known but has not answered for {a.for_} (accelerator_up = {{{{ $value }}}}).",
    )


def health_failed(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{c.HEALTH} == 0",
        "Health check failing on {{ $labels.node }} device {{ $labels.device }}",
        f"The vendor health check of subsystem {{{{ $labels.subsystem }}}} reports {{{{ $value }}}} (1 = healthy) for {a.for_} on {_DEV}.",
    )


def row_remap_failed(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{c.REMAP_FAILED} == 1",
        "Row remapping failed on {{ $labels.node }} device {{ $labels.device }}",
        f"Memory row remapping failed (flag = {{{{ $value }}}}) on {_DEV}; reset or replace the device.",
    )


def row_remap_pending(a: AlertSpec, spec: Spec) -> Body:
    return (
        f"{c.REMAP_PENDING} == 1",
        "Row remap pending a reset on {{ $labels.node }} device {{ $labels.device }}",
        f"A memory row remap has waited {a.for_} for a GPU reset (flag = {{{{ $value }}}}) on {_DEV}.",
    )


def pcie_replay_storm(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"increase({c.PCIE_REPLAY}[{w}]) > {t}",
        "PCIe replay storm on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} PCIe replays in the last {w} (threshold {t}) on {_DEV}.",
    )


def link_errors(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"sum without (link, type) (increase({c.LINK_ERRORS}[{w}])) > {t}",
        "Interconnect link errors on {{ $labels.node }} device {{ $labels.device }}",
        f"{_COUNT} link errors (CRC, replay, recovery) in the last {w} on {_DEV}.",
    )


def thermal_throttling(a: AlertSpec, spec: Spec) -> Body:
    reasons = "|".join(a.value("reasons"))
    return (
        f'max without (reason) ({c.CLOCK_THROTTLED}{{reason=~"{reasons}"}}) == 1',
        "Thermal throttling on {{ $labels.node }} device {{ $labels.device }}",
        f"Clocks slowed down for heat ({reasons}) for {a.for_} (flag = {{{{ $value }}}}) on {_DEV}.",
    )


def telemetry_missing(a: AlertSpec, spec: Spec) -> Body:
    lb = a.value("lookback")
    parts = []
    for const in a.value("metrics"):
        name = getattr(c, const, None)
        if not isinstance(name, str) or name not in {m.name for m in c.catalog()}:
            raise SpecError(
                f"alerts.{a.name}.metrics: {const!r} is not a metric constant of exporter/catalog.py"
            )
        parts.append(
            f"label_replace(\n  count by ({DEVICE_ID}) (max_over_time({name}[{lb}]))\n"
            f'    unless {_ON_DEV} {name},\n  "metric", "{name}", "", ""\n)'
        )
    return (
        "(\n" + "\nor\n".join(parts) + f"\n)\nand {_ON_DEV} ({c.UP} == 1)",
        "{{ $labels.metric }} missing on {{ $labels.node }} device {{ $labels.device }}",
        f"{_DEV} answers but stopped reporting {{{{ $labels.metric }}}} ({{{{ $value }}}} series seen in the last {lb}, none now).",
    )


def missing(a: AlertSpec, spec: Spec) -> Body:
    n, lb = records(spec).node_devices, spec.node_memory_lookback
    return (
        f"max_over_time({n}[{lb}]) - ({n} or 0 * max_over_time({n}[{lb}])) > 0",
        "Accelerators missing on {{ $labels.node }}",
        f"{{{{ $labels.node }}}} reports {_COUNT} fewer devices than the most it had in the last {lb}.",
    )


def exporter_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _with_node(f"up{{{spec.exporter_job_selector}}} == 0", spec),
        "xpuwatch exporter {{ $labels.instance }} down",
        f"Scrapes of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) have failed for {a.for_} (up = {{{{ $value }}}}); its device alerts are blind.",
    )


def backend_down(a: AlertSpec, spec: Spec) -> Body:
    return (
        _with_node(f"{c.BACKEND_UP} == 0", spec),
        "xpuwatch backend {{ $labels.backend }} failing on {{ $labels.instance }}",
        f"Backend {{{{ $labels.backend }}}} of {{{{ $labels.instance }}}} (node {{{{ $labels.node }}}}) has failed its polls for {a.for_} (xpuwatch_backend_up = {{{{ $value }}}}).",
    )


def low_utilization(a: AlertSpec, spec: Spec) -> Body:
    t, p95 = a.value("threshold"), records(spec).utilization_p95
    return (
        _held_by(f"{p95} < {t}", a.value("workload_selector")),
        "Allocated accelerator barely used on {{ $labels.node }} device {{ $labels.device }}",
        f"{spec.rec('p95_window')} P95 utilization {_PCT} (threshold {_pct(t)}) on {_DEV}, held by {_HOLDER}.",
    )


def low_sm_occupancy(a: AlertSpec, spec: Spec) -> Body:
    t, busy = a.value("threshold"), a.value("busy_utilization")
    return (
        f"{c.SM_OCCUPANCY} < {t}\nand {_ON_DEV}\n{c.UTILIZATION} >= {busy}",
        "Busy accelerator with low SM occupancy on {{ $labels.node }} device {{ $labels.device }}",
        f"SM occupancy {_PCT} (threshold {_pct(t)}) while utilization is at least {_pct(busy)} on {_DEV}; check batching.",
    )


def memory_near_full(a: AlertSpec, spec: Spec) -> Body:
    t = a.value("threshold")
    return (
        f"{records(spec).memory_used} > {t}",
        "Accelerator memory nearly full on {{ $labels.node }} device {{ $labels.device }}",
        f"Device memory {_PCT} used (threshold {_pct(t)}) on {_DEV}.",
    )


def power_starved(a: AlertSpec, spec: Spec) -> Body:
    t = a.value("threshold")
    return (
        _held_by(f"{c.POWER} / ({c.POWER_LIMIT} > 0) < {t}", a.value("workload_selector")),
        "Allocated accelerator starved of work on {{ $labels.node }} device {{ $labels.device }}",
        f"Power draw {_PCT} of the power limit (threshold {_pct(t)}) for {a.for_} on {_DEV}, held by {_HOLDER}.",
    )


def idle_notebook(a: AlertSpec, spec: Spec) -> Body:
    """Slice-level first (a notebook on a MIG/vGPU slice: the slice series carry the holder's pod labels and
    a MIG parent has no device utilization), then device-level for notebooks holding whole devices."""
    u, mem = a.value("utilization_max"), a.value("memory_min_bytes")
    holder = "node, uuid, namespace, pod, container"
    notebook = f'0 * ({c.ALLOCATED}{{workload_kind="notebook"}} == 1)'
    on_slice_holder = (
        f"max by ({holder}) (\n"
        f"  ({records(spec).slice_compute} <= {u})\n"
        f"  and {_ON_SLICE} ({c.SLICE_MEMORY_USED} >= {mem})\n"
        f")\n  + on ({holder}) group_right\n    {notebook}\n"
    )
    return (
        f"(\n{on_slice_holder})\nor on ({holder})\n(\n"
        + _held_by(
            f"({c.UTILIZATION} <= {u}) and {_ON_DEV} ({c.MEMORY_USED} >= {mem})", 'workload_kind="notebook"'
        )
        + ")",
        "Idle notebook {{ $labels.namespace }}/{{ $labels.pod }} holds an accelerator",
        f"Notebook {_HOLDER} of {{{{ $labels.owner }}}} has held memory on {_DEV} at {_PCT} utilization (at most {_pct(u)}) for {a.for_}.",
    )


def container_memory_hog(a: AlertSpec, spec: Spec) -> Body:
    """One container's share of a shared card's memory, from the per-process lists mapped to containers.
    Processes of no named container (``container=""``) are neither a tenant nor counted as one."""
    share, tenants = a.value("share"), a.value("tenants_min")
    held = f'{c.CONTAINER_MEMORY_USED}{{container!=""}}'
    return (
        f"(\n  {held}\n  / {_ON_DEV} group_left\n  max by (node, uuid) ({c.MEMORY_TOTAL} > 0)\n) > {share}\n"
        f"and {_ON_DEV}\ncount by (node, uuid) ({held} > 0) >= {tenants}",
        "Container {{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} holds most of a shared card",
        f"Container {_HOLDER}/{{{{ $labels.container }}}} holds {_PCT} of the memory of shared {_DEV} "
        f"(threshold {_pct(share)}, at least {tenants} containers on it) for {a.for_}; the others are about to OOM.",
    )


def slice_memory_bound(a: AlertSpec, spec: Spec) -> Body:
    r = records(spec)
    mh, cl = spec.rec("bottleneck_memory_high"), spec.rec("bottleneck_compute_low")
    return (
        f'{r.slice_memory_used}\nand {_ON_SLICE}\n{r.slice_bottleneck}{{bottleneck="memory"}}',
        "Slice {{ $labels.slice_id }} short of memory on {{ $labels.node }}",
        f"Memory {_PCT} of the {_SLICE} is used (above {_pct(mh)}) while compute is below {_pct(cl)}; give the slice more memory.",
    )


def slice_compute_bound(a: AlertSpec, spec: Spec) -> Body:
    r = records(spec)
    ch, ml = spec.rec("bottleneck_compute_high"), spec.rec("bottleneck_memory_low")
    return (
        f'{r.slice_compute}\nand {_ON_SLICE}\n{r.slice_bottleneck}{{bottleneck="compute"}}',
        "Slice {{ $labels.slice_id }} short of compute on {{ $labels.node }}",
        f"Compute {_PCT} busy (above {_pct(ch)}) in the {_SLICE} while memory is below {_pct(ml)}; give the slice more compute or run fewer tasks in it.",
    )


def pool_underused(a: AlertSpec, spec: Spec) -> Body:
    w, t = a.value("window"), a.value("threshold")
    return (
        f"avg_over_time({records(spec).pool_utilization}[{w}]) < {t}",
        "{{ $labels.vendor }} {{ $labels.model }} pool underused",
        f"The {{{{ $labels.model }}}} pool averaged {_PCT} utilization over {w}, below the {_pct(t)} floor of the healthy band, for {a.for_}.",
    )


def pool_saturated(a: AlertSpec, spec: Spec) -> Body:
    w, t, alloc = a.value("window"), a.value("threshold"), a.value("allocated_min")
    r = records(spec)
    return (
        f"avg_over_time({r.pool_utilization}[{w}]) > {t}\nand on (vendor, model)\n{r.pool_allocated} >= {alloc}",
        "{{ $labels.vendor }} {{ $labels.model }} pool saturated",
        f"The {{{{ $labels.model }}}} pool averaged {_PCT} utilization over {w} (above {_pct(t)}) with at least {_pct(alloc)} of its devices allocated; tasks will queue.",
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
        "AcceleratorLowUtilization": (GROUP_PERFORMANCE, low_utilization),
        "AcceleratorLowSmOccupancy": (GROUP_PERFORMANCE, low_sm_occupancy),
        "AcceleratorMemoryNearFull": (GROUP_PERFORMANCE, memory_near_full),
        "AcceleratorPowerStarved": (GROUP_PERFORMANCE, power_starved),
        "AcceleratorIdleNotebook": (GROUP_PERFORMANCE, idle_notebook),
        "AcceleratorContainerMemoryHog": (GROUP_PERFORMANCE, container_memory_hog),
        "AcceleratorSliceMemoryBound": (GROUP_PERFORMANCE, slice_memory_bound),
        "AcceleratorSliceComputeBound": (GROUP_PERFORMANCE, slice_compute_bound),
        "AcceleratorFaultApplication": (GROUP_PERFORMANCE, fault_application),
        "AcceleratorPoolUnderused": (GROUP_PERFORMANCE, pool_underused),
        "AcceleratorPoolSaturated": (GROUP_PERFORMANCE, pool_saturated),
        "AcceleratorJobsQueuedWhileIdle": (GROUP_PERFORMANCE, queue.jobs_queued_while_idle),
        "AcceleratorQueueTimeHigh": (GROUP_PERFORMANCE, queue.queue_time_high),
    }
)


class RuleBuildError(ValueError):
    """The spec and the builder disagree (an alert without a body, a body without a spec entry)."""


def alerting_rule(a: AlertSpec, spec: Spec) -> AlertingRule:
    """One alert: its body plus the category/severity/action labels and the runbook link."""
    _, body = ALERTS[a.name]
    expr, summary, description = body(a, spec)
    return AlertingRule(
        alert=a.name,
        expr=expr.strip("\n"),
        for_=a.for_,
        labels=MappingProxyType({"category": a.category, "severity": a.severity, "action": a.action}),
        annotations=MappingProxyType(
            {
                "summary": summary,
                "description": description,
                "runbook_url": f"{spec.runbook_base_url}/{a.name}.md",
            }
        ),
    )


def build_groups(spec: Spec) -> tuple[RuleGroup, ...]:
    """Recording, hardware and performance groups, alerts in spec order. Raises RuleBuildError on a
    mismatch between spec and builder, or when a spec category contradicts the builder's group."""
    names = {a.name for a in spec.alerts}
    if names != set(ALERTS):
        raise RuleBuildError(
            f"spec and builder disagree: only in spec {sorted(names - set(ALERTS))}, "
            f"only in builder {sorted(set(ALERTS) - names)}"
        )
    by_group: dict[str, list[RecordingRule | AlertingRule]] = {GROUP_HARDWARE: [], GROUP_PERFORMANCE: []}
    for a in spec.alerts:
        group = ALERTS[a.name][0]
        if group != f"xpuwatch.{a.category}":
            raise RuleBuildError(f"{a.name}: category {a.category} but built in group {group}")
        by_group[group].append(alerting_rule(a, spec))
    return (
        RuleGroup(GROUP_RECORDING, tuple(recording_rules(spec))),
        RuleGroup(GROUP_HARDWARE, tuple(by_group[GROUP_HARDWARE])),
        RuleGroup(GROUP_PERFORMANCE, tuple(by_group[GROUP_PERFORMANCE])),
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
