"""Hardware health dashboard: which cards are failing, and how (ECC, driver faults, heat, throttling, loss)?

Answers: uncorrectable ECC per device over the recorded window (-1 where the device reports no ECC),
corrected/uncorrected ECC rates, driver faults by vendor code, temperature by sensor, active throttle
reasons, lost devices (known but not answering), vendor health per subsystem, row remapping and
PCIe/NVLink errors. Each panel reads the series the hardware alerts of alerts/spec.yaml read.
"""

from __future__ import annotations

from xpuwatch.alerts.rules import counted_since
from xpuwatch.dashboards.board import Board
from xpuwatch.dashboards.layout import Row
from xpuwatch.dashboards.panel import Panel, Query, Threshold
from xpuwatch.dashboards.sources import (
    DEVICE_ID,
    NODE_VARS,
    RECORDS,
    SPEC,
    TABLE_ROWS,
    TOP_NODES,
    selector,
    top_nodes,
    worst,
)
from xpuwatch.exporter import catalog as c

UID = "xpuwatch-health"

HOT = float(SPEC.alert("AcceleratorTemperatureHigh").value("core_celsius"))
CRITICAL = float(SPEC.alert("AcceleratorTemperatureCritical").value("core_celsius"))
WINDOW = SPEC.rec("dashboard_window")
_HIDE = {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}}
# Fault counters are seeded at 0 for every code a driver knows (11 XIDs per NVIDIA card), so an increase()
# over the range read every sample of thousands of zero series (323 ms for 0 rows at 2,048 devices on a
# 2 min history, growing with the range); the record of the counters that are not 0 holds the few that
# ever counted, and two instant reads of it (now, and at the range's start) give the exact event count.
_FAULTS = selector(RECORDS.faults_nonzero)

lost_count = Panel(
    "Lost devices",
    "stat",
    (Query(f"sum({selector(c.UP)} == bool 0)", instant=True),),
    "Devices the exporters know but that did not answer their last poll (accelerator_up == 0).",
    width=6,
    height=4,
    thresholds=(Threshold(None, "green"), Threshold(1, "red")),
    options={"graphMode": "none"},
)

failing_count = Panel(
    "Failing health checks",
    "stat",
    (Query(f"sum({selector(c.HEALTH)} == bool 0)", instant=True),),
    "Device subsystems whose vendor health check reports failed or warning.",
    width=6,
    height=4,
    thresholds=(Threshold(None, "green"), Threshold(1, "red")),
    options={"graphMode": "none"},
)

ecc_devices = Panel(
    f"Devices with uncorrectable ECC in the last {SPEC.rec('ecc_status_window')}",
    "stat",
    (Query(f"sum({selector(RECORDS.ecc_uncorrected)} > bool 0)", instant=True),),
    "Devices whose uncorrected ECC counter rose within the recorded window.",
    width=6,
    height=4,
    thresholds=(Threshold(None, "green"), Threshold(1, "red")),
    options={"graphMode": "none"},
)

throttled_count = Panel(
    "Devices throttling for heat or power",
    "stat",
    (
        Query(
            f"sum({selector(RECORDS.node_throttled_devices, NODE_VARS)})",
            instant=True,
        ),
    ),
    "Devices with at least one active throttle reason other than gpu_idle (idle clocks are not a fault); "
    "each device counts once however many reasons are active (recorded per node).",
    width=6,
    height=4,
    thresholds=(Threshold(None, "green"), Threshold(1, "orange")),
    options={"graphMode": "none"},
)

lost = Panel(
    "Devices lost",
    "table",
    (Query(worst(f"{selector(c.UP)} == 0"), instant=True, table=True),),
    "Each device known but not answering (lost, fallen off the bus, timed out), with its identity labels "
    f"({TABLE_ROWS} at most; the stat counts them all).",
    width=12,
    height=6,
    transformations=(_HIDE,),
)

failing = Panel(
    "Health checks failing",
    "table",
    (Query(worst(f"{selector(c.HEALTH)} == 0"), instant=True, table=True),),
    f"Each device subsystem whose vendor health check fails ({TABLE_ROWS} at most; the stat counts them all).",
    width=12,
    height=6,
    transformations=(_HIDE,),
)

health = Panel(
    "Health per subsystem",
    "bargauge",
    (
        Query(
            f"avg by (cluster, vendor, subsystem) ({selector(c.HEALTH)})",
            "{{vendor}} {{subsystem}}",
            instant=True,
        ),
    ),
    "Share of devices whose subsystem reports healthy, per vendor and subsystem (1 = all healthy).",
    unit="percentunit",
    width=24,
    height=7,
    min=0,
    max=1,
    thresholds=(Threshold(None, "red"), Threshold(0.999, "green")),
)

ecc_status = Panel(
    f"Uncorrectable ECC errors, last {SPEC.rec('ecc_status_window')}",
    "table",
    (Query(worst(f"{selector(RECORDS.ecc_uncorrected)} != 0"), instant=True, table=True),),
    "Devices with uncorrected ECC errors within the window (recording rule), and with -1 those that report no "
    "ECC counters (not 0: not reported is not healthy); clean devices are left out and at most "
    f"{TABLE_ROWS} rows shown, most errors first, so the table stays short on a large fleet.",
    width=12,
    height=8,
    decimals=0,
    thresholds=(Threshold(None, "text"), Threshold(-0.5, "green"), Threshold(0.5, "red")),
    custom={"cellOptions": {"type": "color-text"}},
    transformations=(_HIDE, {"id": "sortBy", "options": {"sort": [{"desc": True, "field": "Value"}]}}),
)

ecc_rate = Panel(
    "ECC errors",
    "timeseries",
    (
        Query(
            top_nodes(selector(RECORDS.node_ecc, NODE_VARS), "type"),
            "{{cluster}} {{node}} {{type}}",
        ),
    ),
    f"ECC errors in the last {WINDOW} per node and type (corrected, uncorrected), recorded per node, for the "
    f"{TOP_NODES} nodes with the most of each type at each moment; the device dashboard shows each card.",
    width=12,
    height=8,
    min=0,
)

faults = Panel(
    "Driver faults by code",
    "table",
    (
        Query(
            f"sum by ({DEVICE_ID}, code) (\n{counted_since(_FAULTS, '$__range')}\n) > 0",
            instant=True,
            table=True,
        ),
    ),
    "Driver fault events in the selected time range by device and vendor code (NVIDIA XID, Ascend error "
    "code): the counter now less its value at the start of the range (all of it where it counted its first "
    "event within the range or restarted since), read from the record of the counters that are not 0; "
    "codes that did not occur are hidden.",
    width=12,
    height=8,
    decimals=0,
    transformations=(_HIDE, {"id": "organize", "options": {"renameByName": {"Value": "events"}}}),
)

faults_rate = Panel(
    "Driver faults over time",
    "timeseries",
    (
        Query(
            f"sum by (vendor, code) ({selector(RECORDS.node_faults, NODE_VARS)})",
            "{{vendor}} {{code}}",
        ),
    ),
    f"Driver fault events in the last {WINDOW} by vendor and code, summed over devices (recorded per node).",
    width=12,
    height=8,
    min=0,
)

temperature = Panel(
    "Temperature",
    "timeseries",
    (
        Query(
            top_nodes(selector(RECORDS.node_temperature, NODE_VARS), "sensor"),
            "{{cluster}} {{node}} {{sensor}}",
        ),
    ),
    f"Hottest device per node and sensor, for the {TOP_NODES} hottest nodes per sensor at each moment "
    f"(recorded per node; the device dashboard shows each card). Lines: {HOT:.0f} °C (AcceleratorTemperatureHigh) and "
    f"{CRITICAL:.0f} °C (AcceleratorTemperatureCritical, core sensor).",
    unit="celsius",
    thresholds=(Threshold(None, "green"), Threshold(HOT, "orange"), Threshold(CRITICAL, "red")),
    thresholds_style="line",
)

throttle = Panel(
    "Throttle reasons active",
    "timeseries",
    (
        Query(
            f"sum by (reason) ({selector(RECORDS.node_throttled, NODE_VARS)})",
            "{{reason}}",
        ),
    ),
    "Number of devices with each throttle (clock-event) reason active. gpu_idle is normal on idle cards; "
    "sw_thermal / hw_thermal / hw_slowdown point to cooling or power delivery.",
    stack=True,
    min=0,
)

remap = Panel(
    "Row remapping",
    "table",
    (
        Query(selector(c.REMAP_PENDING), instant=True, table=True),
        Query(selector(c.REMAP_FAILED), instant=True, table=True),
        Query(
            f"sum by ({DEVICE_ID}) ({selector(c.REMAPPED_ROWS)})",
            instant=True,
            table=True,
        ),
    ),
    "Per device with row remapping: remap pending a reset, remap failed, rows remapped so far.",
    width=12,
    height=8,
    transformations=(
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "__name__": True},
                "renameByName": {"Value #A": "pending", "Value #B": "failed", "Value #C": "rows remapped"},
            },
        },
    ),
)

links = Panel(
    "PCIe replays and link errors",
    "timeseries",
    (
        Query(
            top_nodes(selector(RECORDS.node_pcie_replays, NODE_VARS)),
            "{{cluster}} {{node}} PCIe replays",
        ),
        Query(
            top_nodes(selector(RECORDS.node_link_errors, NODE_VARS)),
            "{{cluster}} {{node}} link errors",
        ),
    ),
    f"PCIe replays and interconnect (NVLink) errors in the last {WINDOW} per node, for the {TOP_NODES} nodes "
    "with the most of each at each moment (recorded per node; the device dashboard shows each card and link).",
    width=12,
    height=8,
    min=0,
)

BOARD = Board(
    UID,
    "xpuwatch / Hardware health",
    "ECC, driver faults, temperature, throttling, lost devices and vendor health per subsystem.",
    (
        Row("Now", (lost_count, failing_count, ecc_devices, throttled_count, lost, failing, health)),
        Row("Memory errors and faults", (ecc_status, ecc_rate, faults, faults_rate, remap, links)),
        Row("Heat", (temperature, throttle)),
    ),
)
