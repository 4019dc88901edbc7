"""Fleet dashboard: is each accelerator pool used inside its healthy band, and where is the bottleneck?

Answers: pool utilization by vendor/model against the 70-85 % band (the thresholds of the
AcceleratorPoolUnderused / AcceleratorPoolSaturated alerts in alerts/spec.yaml), allocated vs free cards per
pool, the 1 h P95 utilization per node (the field report reads P95, not averages) and memory used vs SM
activity per device and slice (memory-bound cards sit top-left, compute-bound bottom-right).
"""

from __future__ import annotations

from xpuwatch.dashboards.board import Board
from xpuwatch.dashboards.layout import Row
from xpuwatch.dashboards.panel import Panel, Query, Threshold
from xpuwatch.dashboards.sources import (
    DEVICE_ID,
    FLEET,
    NODE_VARS,
    ON_DEVICE,
    POOL,
    RECORDS,
    SLICE_ID,
    SPEC,
    selector,
)
from xpuwatch.exporter import catalog as c

UID = "xpuwatch-fleet"

LOW = float(SPEC.alert("AcceleratorPoolUnderused").value("threshold"))
HIGH = float(SPEC.alert("AcceleratorPoolSaturated").value("threshold"))
LOW_P95 = float(SPEC.alert("AcceleratorLowUtilization").value("threshold"))
BAND = (Threshold(None, "blue"), Threshold(LOW, "green"), Threshold(HIGH, "red"))
POOL_VARS = ("cluster", "vendor", "model")

_devices = selector(RECORDS.pool_devices, POOL_VARS)
_allocated_ratio = selector(RECORDS.pool_allocated, POOL_VARS)

pool_utilization = Panel(
    "Pool utilization by vendor/model",
    "timeseries",
    (Query(selector(RECORDS.pool_utilization, POOL_VARS), "{{vendor}} {{model}}"),),
    f"Mean utilization of each pool (vendor, model). The green band is healthy ({LOW:.0%}-{HIGH:.0%}): "
    "below it cards were bought and not used, above it tasks queue (alerts AcceleratorPoolUnderused and "
    "AcceleratorPoolSaturated, same thresholds).",
    unit="percentunit",
    width=16,
    min=0,
    max=1,
    thresholds=BAND,
    thresholds_style="line+area",
)

pool_now = Panel(
    "Pool utilization now",
    "bargauge",
    (Query(selector(RECORDS.pool_utilization, POOL_VARS), "{{vendor}} {{model}}", instant=True),),
    f"Current mean utilization per pool; blue below {LOW:.0%}, green in the band, red above {HIGH:.0%}.",
    unit="percentunit",
    width=8,
    min=0,
    max=1,
    thresholds=BAND,
)

allocation = Panel(
    "Allocated vs free cards per pool",
    "bargauge",
    (
        Query(
            f"{_allocated_ratio} * on ({POOL}) {_devices}",
            "{{cluster}} {{vendor}} {{model}} allocated",
            instant=True,
        ),
        Query(
            f"(1 - {_allocated_ratio}) * on ({POOL}) {_devices}",
            "{{cluster}} {{vendor}} {{model}} free",
            instant=True,
        ),
    ),
    "Cards held by at least one container (kubelet PodResources) and cards nobody holds, per pool. "
    "A shared card (vGPU, MIG) counts once.",
    unit="short",
    width=12,
    decimals=0,
    options={"displayMode": "basic"},
)

allocated_idle = Panel(
    f"Allocated cards with 1h P95 utilization below {LOW_P95:.0%}",
    "stat",
    (
        Query(
            f"count by ({POOL}) (\n  {selector(RECORDS.utilization_p95)} < {LOW_P95}\n"
            f"  and {ON_DEVICE} {selector(c.ALLOCATED, (*FLEET, 'namespace'))} == 1\n)",
            "{{vendor}} {{model}}",
            instant=True,
        ),
    ),
    "Held but barely used: the AcceleratorLowUtilization condition (P95 over the last hour below the "
    "spec's threshold), counted per pool.",
    width=12,
    no_value="0",
    thresholds=(Threshold(None, "green"), Threshold(1, "orange")),
)

p95_table = Panel(
    "1h P95 utilization per node",
    "table",
    (
        Query(selector(RECORDS.node_p95_avg, NODE_VARS), instant=True, table=True),
        Query(selector(RECORDS.node_p95_min, NODE_VARS), instant=True, table=True),
        Query(selector(RECORDS.node_p95_max, NODE_VARS), instant=True, table=True),
        Query(selector(RECORDS.node_devices, NODE_VARS), instant=True, table=True),
    ),
    "Per node: mean, lowest and highest of the devices' 95th-percentile utilization over the last hour "
    "(recording rule), and the number of devices the node reports.",
    unit="percentunit",
    width=24,
    transformations=(
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {
                    "Value #A": "mean device P95",
                    "Value #B": "lowest device P95",
                    "Value #C": "highest device P95",
                    "Value #D": "devices",
                },
            },
        },
        {"id": "sortBy", "options": {"sort": [{"field": "mean device P95"}]}},
    ),
    overrides=(
        {
            "matcher": {"id": "byName", "options": "devices"},
            "properties": [
                {"id": "unit", "value": "short"},
                {"id": "decimals", "value": 0},
                {"id": "custom.cellOptions", "value": {"type": "auto"}},
            ],
        },
    ),
    custom={"cellOptions": {"type": "color-text"}},
    thresholds=BAND,
)

_SCATTER_AXES = {
    "Value #A": "memory used",
    "Value #B": "SM activity",
}


def _scatter(title: str, memory: str, compute: str, by: str, description: str) -> Panel:
    return Panel(
        title,
        "xychart",
        (
            Query(f"max by ({by}) ({memory})", instant=True, table=True),
            Query(f"max by ({by}) ({compute})", instant=True, table=True),
        ),
        description,
        unit="percentunit",
        width=12,
        height=10,
        min=0,
        max=1,
        transformations=(
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"renameByName": _SCATTER_AXES}},
        ),
        options={
            "dims": {"frame": 0, "x": "SM activity"},
            "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True},
            "series": [
                {
                    "pointColor": {"fixed": "orange"},
                    "pointSize": {"fixed": 8, "max": 20, "min": 1},
                    "x": "SM activity",
                    "y": "memory used",
                }
            ],
            "seriesMapping": "manual",
            "tooltip": {"mode": "single", "sort": "none"},
        },
        custom={"show": "points", "axisPlacement": "auto", "pointSize": {"fixed": 8, "max": 20, "min": 1}},
    )


device_scatter = _scatter(
    "Memory used vs SM activity (devices)",
    selector(RECORDS.memory_used),
    f"{selector(c.SM_ACTIVE)}\n  or {ON_DEVICE}\n{selector(c.UTILIZATION)}",
    DEVICE_ID,
    "One point per device: x = SM activity (DCGM SM active; engine utilization where the vendor has no "
    "SM counter), y = memory used / capacity. Top-left: memory-bound (full memory, idle SMs); bottom-right: "
    "compute-bound; bottom-left: idle.",
)

slice_scatter = _scatter(
    "Memory used vs SM activity (MIG and vGPU slices)",
    selector(RECORDS.slice_memory_used),
    selector(RECORDS.slice_compute),
    SLICE_ID,
    "One point per slice: x = SM activity inside the slice (engine utilization for vGPU shares), y = slice "
    "memory used / slice limit. A slice in a corner is sized wrongly (see the Waste dashboard).",
)

bottleneck = Panel(
    "Where the bottleneck is (devices)",
    "piechart",
    (
        Query(
            f"count by (bottleneck) ({selector(RECORDS.device_bottleneck)})",
            "{{bottleneck}}",
            instant=True,
        ),
    ),
    "Devices per bottleneck class (recording rule device:accelerator_bottleneck:class): memory, compute, "
    "balanced, or unknown where the device reports no SM activity.",
    width=12,
    height=8,
)

slice_bottleneck = Panel(
    "Where the bottleneck is (slices)",
    "piechart",
    (
        Query(
            f"count by (bottleneck) ({selector(RECORDS.slice_bottleneck)})",
            "{{bottleneck}}",
            instant=True,
        ),
    ),
    "Slices per bottleneck class (recording rule slice:accelerator_bottleneck:class).",
    width=12,
    height=8,
)

BOARD = Board(
    UID,
    "xpuwatch / Fleet",
    "Pool utilization against the healthy band, allocation, per-node P95 and where the bottleneck is.",
    (
        Row("Pools", (pool_utilization, pool_now, allocation, allocated_idle)),
        Row("Nodes", (p95_table,)),
        Row("Bottlenecks", (device_scatter, slice_scatter, bottleneck, slice_bottleneck)),
    ),
)
