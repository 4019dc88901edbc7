"""Waste dashboard: who holds accelerators without using them, by namespace and owner?

Answers: idle notebooks (the AcceleratorIdleNotebook condition), memory hoarders (memory held while the 1 h
P95 utilization is below the AcceleratorLowUtilization threshold), starved cards (power far below the limit:
the AcceleratorPowerStarved condition), wrongly sized slices (recorded slice bottleneck class memory or
compute), and utilization and memory of held devices per namespace. Thresholds come from alerts/spec.yaml.
Jobs waiting: pods pending for an accelerator (kube-state-metrics, via the alerts.queue records) next to the
devices of the same vendor that idle. Holders come from ``accelerator_allocated`` (one series per container holding a device), so shared devices
show every holder.
"""

from __future__ import annotations

from xpuwatch.alerts.queue import QUEUE
from xpuwatch.dashboards.board import Board
from xpuwatch.dashboards.layout import Row
from xpuwatch.dashboards.panel import Panel, Query, Threshold
from xpuwatch.dashboards.sources import ON_DEVICE, RECORDS, SLICE_ID, SPEC, TABLE_ROWS, selector, worst
from xpuwatch.exporter import catalog as c

UID = "xpuwatch-waste"

_notebook = SPEC.alert("AcceleratorIdleNotebook")
IDLE_UTIL = float(_notebook.value("utilization_max"))
CONTEXT_BYTES = int(_notebook.value("memory_min_bytes"))
LOW_P95 = float(SPEC.alert("AcceleratorLowUtilization").value("threshold"))
STARVED = float(SPEC.alert("AcceleratorPowerStarved").value("threshold"))

HOLDER = ("cluster", "node", "vendor", "model", "namespace")
TEAM_VARS = ("cluster", "vendor", "model", "namespace")  # the chargeback records keep no node label
_HIDE = {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}}


def _holders(extra: str = "") -> str:
    return f"({selector(c.ALLOCATED, HOLDER, extra)} == 1)"


def held_by(device_expr: str, extra: str = "") -> str:
    """``device_expr`` (one value per device) repeated for each holder of the device, with the holder's
    labels (namespace, pod, container, workload_kind, owner) and the device's value."""
    return f"max by (cluster, node, uuid) (\n  {device_expr}\n)\n  + {ON_DEVICE} group_right\n0 * {_holders(extra)}"


_table = {"cellOptions": {"type": "color-text"}}

idle_notebooks = Panel(
    "Idle notebooks",
    "table",
    (Query(worst(selector(RECORDS.holder_idle_notebook, HOLDER), "bottomk"), instant=True, table=True),),
    f"Notebooks holding device memory (at least {CONTEXT_BYTES // 2**20} MiB, more than an initialised "
    f"context) at utilization of at most {IDLE_UTIL:.0%}, now (the idle-notebook record of "
    f"xpuwatch.recording.holder, at most one evaluation old). AcceleratorIdleNotebook fires when this "
    f"lasts {_notebook.for_}; the remediation controller then reclaims the notebook. The {TABLE_ROWS} least "
    "used are listed.",
    unit="percentunit",
    width=24,
    height=6,
    transformations=(_HIDE, {"id": "organize", "options": {"renameByName": {"Value": "utilization"}}}),
)

hoarders = Panel(
    f"Memory hoarders (1h P95 utilization below {LOW_P95:.0%})",
    "table",
    (Query(worst(selector(RECORDS.holder_hoarded, HOLDER)), instant=True, table=True),),
    "Holders of devices that keep memory allocated while their 95th-percentile utilization over the last "
    "hour stays below the AcceleratorLowUtilization threshold: capacity others queue for (the hoarder "
    "record of xpuwatch.recording.holder). The "
    f"{TABLE_ROWS} holding the most memory are listed.",
    unit="bytes",
    width=12,
    height=8,
    transformations=(
        _HIDE,
        {"id": "organize", "options": {"renameByName": {"Value": "memory used"}}},
        {"id": "sortBy", "options": {"sort": [{"desc": True, "field": "memory used"}]}},
    ),
)

starved = Panel(
    f"Starved cards (power below {STARVED:.0%} of the limit)",
    "table",
    (Query(worst(selector(RECORDS.holder_starved, HOLDER), "bottomk"), instant=True, table=True),),
    "Held devices drawing less than the AcceleratorPowerStarved share of their power limit: the task is "
    "not fed (data loading, CPU preprocessing), from the starved-card record of xpuwatch.recording.holder. "
    "Notebooks are listed under idle notebooks instead. The "
    f"{TABLE_ROWS} most starved are listed.",
    unit="percentunit",
    width=12,
    height=8,
    transformations=(_HIDE, {"id": "organize", "options": {"renameByName": {"Value": "power / limit"}}}),
)

_SLICE_HOLDER = f"{SLICE_ID}, namespace, pod"
_CLASS_COLOURS = {"memory": "red", "compute": "orange", "balanced": "green", "unknown": "text"}

slice_sizing = Panel(
    "Slice sizing (wrongly sized: bottleneck memory or compute)",
    "table",
    (
        Query(
            f"max by ({_SLICE_HOLDER}, bottleneck) ({selector(RECORDS.slice_bottleneck, HOLDER)})",
            instant=True,
            table=True,
        ),
        Query(
            f"max by ({_SLICE_HOLDER}) ({selector(RECORDS.slice_memory_used, HOLDER)})",
            instant=True,
            table=True,
        ),
        Query(
            f"max by ({_SLICE_HOLDER}) ({selector(RECORDS.slice_compute, HOLDER)})", instant=True, table=True
        ),
    ),
    "Every MIG instance and vGPU share with its holder, its recorded bottleneck class, memory used / limit "
    "and SM activity (engine utilization for vGPU shares). Bottleneck memory (memory full, compute idle): "
    "give the slice more memory; compute (compute saturated, memory spare): more compute per slice. "
    "AcceleratorSliceMemoryBound / AcceleratorSliceComputeBound fire when it lasts.",
    unit="percentunit",
    width=24,
    height=8,
    custom=_table,
    thresholds=(Threshold(None, "green"), Threshold(0.9, "red")),
    transformations=(
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "Value #A": True},
                "renameByName": {"Value #B": "memory used", "Value #C": "SM activity"},
            },
        },
        {"id": "sortBy", "options": {"sort": [{"field": "bottleneck"}]}},
    ),
    overrides=(
        {
            "matcher": {"id": "byName", "options": "bottleneck"},
            "properties": [
                {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                {
                    "id": "mappings",
                    "value": [
                        {
                            "type": "value",
                            "options": {
                                cls: {"color": colour, "index": i}
                                for i, (cls, colour) in enumerate(_CLASS_COLOURS.items())
                            },
                        }
                    ],
                },
            ],
        },
    ),
)

idle_by_owner = Panel(
    f"Allocated but idle (1h P95 below {LOW_P95:.0%}) by namespace and owner",
    "bargauge",
    (
        Query(
            f"count by (cluster, namespace, workload_kind, owner) (\n"
            f"{held_by(f'{selector(RECORDS.utilization_p95)} < {LOW_P95}')}\n)",
            "{{namespace}} {{workload_kind}} {{owner}}",
            instant=True,
        ),
    ),
    "Devices per namespace, workload kind and owner whose 95th-percentile utilization over the last hour "
    "is below the AcceleratorLowUtilization threshold (owner is set for notebooks).",
    width=12,
    height=8,
    decimals=0,
    thresholds=(Threshold(None, "orange"),),
)

utilization_by_namespace = Panel(
    "Utilization of held devices by namespace",
    "bargauge",
    (
        Query(
            f"avg by (cluster, namespace) (\n  max by (cluster, node, uuid) ({selector(c.UTILIZATION)})\n"
            f"  * {ON_DEVICE} group_right ()\n{_holders()}\n)",
            "{{namespace}}",
            instant=True,
        ),
    ),
    "Mean utilization of the devices each namespace holds (a shared device counts for each holder).",
    unit="percentunit",
    width=12,
    height=8,
    min=0,
    max=1,
    thresholds=(Threshold(None, "red"), Threshold(LOW_P95, "orange"), Threshold(0.7, "green")),
)

memory_by_namespace = Panel(
    "Device memory held by namespace and owner",
    "bargauge",
    (
        Query(
            f"sum by (cluster, namespace, owner) ({selector(RECORDS.team_memory, TEAM_VARS)})",
            "{{namespace}} {{owner}}",
            instant=True,
        ),
    ),
    "Device memory in use on the devices each namespace/owner holds; a shared device's memory is split "
    "evenly among its holders. Read from the chargeback record (per namespace, owner, vendor and model: the "
    "node variable does not apply), not joined over every device at each refresh.",
    unit="bytes",
    width=24,
    height=8,
)

_queued = SPEC.alert("AcceleratorJobsQueuedWhileIdle")

queue_requests = Panel(
    "Accelerators requested by waiting pods",
    "timeseries",
    (
        Query(
            f"sum by (namespace, resource) ({selector(QUEUE.pending, ('cluster', 'vendor'))})",
            "{{namespace}} {{resource}}",
        ),
    ),
    "Accelerators requested by pods that are Pending and not scheduled (kube-state-metrics), by namespace and "
    "resource. Next to the idle devices on the right this is the field report's contradiction: jobs queue "
    "while cards idle.",
    width=12,
    height=8,
    decimals=0,
    stack=True,
)

queue_age = Panel(
    "Oldest waiting pod",
    "bargauge",
    (
        Query(
            f"max by (namespace, resource) ({selector(QUEUE.pending_age, ('cluster', 'vendor'))})",
            "{{namespace}} {{resource}}",
            instant=True,
        ),
    ),
    f"How long the oldest waiting pod of each namespace has been waiting for its resource. "
    f"AcceleratorJobsQueuedWhileIdle fires past {_queued.value('pending_seconds'):.0f} s while idle devices of "
    "that vendor exist; AcceleratorQueueTimeHigh when none exist (a capacity signal).",
    unit="s",
    width=6,
    height=8,
    thresholds=(Threshold(None, "green"), Threshold(float(_queued.value("pending_seconds")), "orange")),
)

queue_idle = Panel(
    "Idle devices per vendor",
    "bargauge",
    (Query(f"sum by (vendor) ({selector(QUEUE.idle, ('cluster', 'vendor'))})", "{{vendor}}", instant=True),),
    "Devices a waiting pod could have had: up and held by nobody, or held with a 1h P95 utilization below "
    "the queue's idle threshold (recording.queue_idle_utilization in alerts/spec.yaml).",
    width=6,
    height=8,
    decimals=0,
    thresholds=(Threshold(None, "green"), Threshold(1, "orange")),
)


def _usage(by: str, legend_cols: str) -> tuple[Query, ...]:
    """Device-hours, idle share, memory GiB-hours and kWh over the dashboard's range from the chargeback
    records (as ``xpuwatch report`` computes them from raw series)."""
    hours = "$__range_s / 3600"

    def avg(record: str) -> str:
        return f"sum by ({by}) (avg_over_time({selector(record, ('cluster',))}[$__range]))"

    return (
        Query(f"{avg(RECORDS.team_cards)} * {hours}", instant=True, table=True),
        Query(f"{avg(RECORDS.team_idle_cards)}\n/ ({avg(RECORDS.team_cards)} > 0)", instant=True, table=True),
        Query(f"{avg(RECORDS.team_memory)} * {hours} / 2^30", instant=True, table=True),
        Query(f"{avg(RECORDS.team_power)} * $__range_s / 3.6e6", instant=True, table=True),
    )


_USAGE_NAMES = {
    "Value #A": "device-hours",
    "Value #B": "idle share",
    "Value #C": "memory GiB-hours",
    "Value #D": "energy kWh",
}
_USAGE_OVERRIDES = (
    {
        "matcher": {"id": "byName", "options": "idle share"},
        "properties": [{"id": "unit", "value": "percentunit"}],
    },
)


def _usage_panel(title: str, by: str, description: str) -> Panel:
    return Panel(
        title,
        "table",
        _usage(by, by),
        description,
        width=12,
        height=8,
        decimals=1,
        transformations=(
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": _USAGE_NAMES}},
            {"id": "sortBy", "options": {"sort": [{"desc": True, "field": "device-hours"}]}},
        ),
        overrides=_USAGE_OVERRIDES,
    )


_USAGE_HOW = (
    "over the dashboard's time range, from the namespace_owner:* recording rules: a card held by several "
    "containers counts in equal shares; idle = utilization at most the AcceleratorIdleNotebook threshold; "
    "energy from the energy counter, power x time for cards with none. `xpuwatch report --csv` gives the "
    "same figures from raw series."
)
usage_by_team = _usage_panel(
    "Who used what: by namespace and owner",
    "cluster, namespace, owner",
    f"Device-hours, idle share, memory GiB-hours and kWh per namespace and owner {_USAGE_HOW}",
)
usage_by_model = _usage_panel(
    "Who used what: by vendor and model",
    "cluster, vendor, model",
    f"The same per vendor and model {_USAGE_HOW}",
)

BOARD = Board(
    UID,
    "xpuwatch / Waste",
    "Idle notebooks, memory hoarders, starved cards and wrongly sized slices, by namespace and owner.",
    (
        Row("Held and idle", (idle_notebooks, hoarders, starved, idle_by_owner, utilization_by_namespace)),
        Row("Jobs waiting", (queue_requests, queue_age, queue_idle)),
        Row("Slices", (slice_sizing,)),
        Row("By namespace", (memory_by_namespace,)),
        Row("Chargeback", (usage_by_team, usage_by_model)),
    ),
)
