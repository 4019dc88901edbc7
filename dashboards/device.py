"""Device drill-down dashboard: every reading of one card (chosen by uuid) and of its slices, over time.

Answers "what is this card doing and is it healthy?": who holds it, its compute and memory activity, memory,
temperature, power, clocks and throttle reasons, ECC, driver faults, PCIe/NVLink errors, row remapping,
vendor health per subsystem, and each MIG instance or vGPU share carved from it. Panels that group several
readings match the catalog names with a ``__name__`` regex, so a vendor that lacks one reading still shows
the others.
"""

from __future__ import annotations

from xpuwatch.dashboards.board import STANDARD, Board, Variable
from xpuwatch.dashboards.layout import Row
from xpuwatch.dashboards.panel import Panel, Query, Threshold
from xpuwatch.dashboards.sources import RECORDS, any_of, selector
from xpuwatch.exporter import catalog as c

UID = "xpuwatch-device"

UUID = Variable("uuid", "Device (uuid)", c.UP, ("cluster", "node", "vendor", "model"), multi=False)
_ONE = 'uuid="$uuid"'


def _one(metric: str) -> str:
    return selector(metric, ("cluster",), _ONE)


def _named(*metrics: str) -> str:
    return f'{{__name__=~"{any_of(*metrics)}", cluster=~"$cluster", {_ONE}}}'


identity = Panel(
    "Identity",
    "table",
    (Query(_one(c.INFO), instant=True, table=True),),
    "Node, vendor, model, index, driver version, PCI bus id and serial of the device (accelerator_info).",
    width=16,
    height=4,
    transformations=(
        {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}},
    ),
)

up = Panel(
    "Answering",
    "stat",
    (Query(_one(c.UP), instant=True),),
    "1 if the device answered at the last poll; 0 if it is known but lost or timing out.",
    width=8,
    height=4,
    thresholds=(Threshold(None, "red"), Threshold(1, "green")),
    options={"graphMode": "none"},
)

holders = Panel(
    "Held by",
    "table",
    (Query(_one(c.ALLOCATED), instant=True, table=True),),
    "Containers holding the device (kubelet PodResources): namespace, pod, container, workload kind, owner.",
    width=24,
    height=5,
    transformations=(
        {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}},
    ),
)

activity = Panel(
    "Compute and memory activity",
    "timeseries",
    (
        Query(
            _named(c.UTILIZATION, c.SM_ACTIVE, c.SM_OCCUPANCY, c.TENSOR_ACTIVE, c.MEMORY_BANDWIDTH),
            "{{__name__}}",
        ),
    ),
    "Engine utilization, SM active, SM occupancy, tensor-pipe activity and memory-bandwidth utilization, "
    "as far as the vendor reports them (0..1).",
    unit="percentunit",
    min=0,
    max=1,
)

memory = Panel(
    "Memory",
    "timeseries",
    (Query(_named(c.MEMORY_USED, c.MEMORY_TOTAL), "{{__name__}}"),),
    "Device memory used and capacity.",
    unit="bytes",
    min=0,
)

memory_share = Panel(
    "Memory used share",
    "timeseries",
    (Query(_one(RECORDS.memory_used), "memory used / capacity"),),
    "Share of device memory in use (0..1): used / capacity, or accelerator_memory_used_ratio for devices "
    "whose tool prints only a percentage (Hygon hy-smi VRAM%).",
    unit="percentunit",
    min=0,
    max=1,
)

temperature = Panel(
    "Temperature",
    "timeseries",
    (Query(_one(c.TEMPERATURE), "{{sensor}}"),),
    "Temperature by sensor (core, memory, hotspot).",
    unit="celsius",
)

power = Panel(
    "Power",
    "timeseries",
    (
        Query(_named(c.POWER, c.POWER_LIMIT), "{{__name__}}"),
        Query(f"rate({_one(c.ENERGY)}[$__rate_interval])", "mean power from the energy counter"),
    ),
    "Power draw and enforced limit, and the mean power derived from the energy counter.",
    unit="watt",
    min=0,
)

clocks = Panel(
    "Clocks",
    "timeseries",
    (Query(_one(c.CLOCK), "{{clock}}"),),
    "Current clock frequency by domain.",
    unit="hertz",
)

throttle = Panel(
    "Clock throttle reasons",
    "state-timeline",
    (Query(_one(c.CLOCK_THROTTLED), "{{reason}}"),),
    "Each throttle (clock-event) reason over time: 1 while active.",
    thresholds=(Threshold(None, "green"), Threshold(1, "orange")),
)

ecc = Panel(
    "ECC errors",
    "timeseries",
    (Query(f"increase({_one(c.ECC_ERRORS)}[$__rate_interval])", "{{type}}"),),
    "New device-memory ECC errors per interval by type (corrected = single-bit, uncorrected = double-bit).",
    unit="short",
    min=0,
)

faults = Panel(
    "Driver fault events",
    "timeseries",
    (Query(f"increase({_one(c.FAULT_EVENTS)}[$__rate_interval])", "code {{code}}"),),
    "Driver fault events per interval by vendor code (NVIDIA XID, Ascend error code).",
    unit="short",
    min=0,
)

links = Panel(
    "PCIe and interconnect errors",
    "timeseries",
    (
        Query(f"increase({_one(c.PCIE_REPLAY)}[$__rate_interval])", "PCIe replays"),
        Query(
            f"sum by (type) (increase({_one(c.LINK_ERRORS)}[$__rate_interval]))",
            "link {{type}}",
        ),
    ),
    "PCIe replays and NVLink (or other interconnect) errors per interval, summed over links.",
    unit="short",
    min=0,
)

remap = Panel(
    "Row remapping",
    "timeseries",
    (Query(_named(c.REMAPPED_ROWS, c.REMAP_PENDING, c.REMAP_FAILED), "{{__name__}} {{type}}"),),
    "Remapped memory rows by error type, and the pending / failed flags.",
    unit="short",
    min=0,
)

health = Panel(
    "Health per subsystem",
    "state-timeline",
    (Query(_one(c.HEALTH), "{{subsystem}}"),),
    "Vendor health checks: 1 healthy, 0 failed or warning.",
    thresholds=(Threshold(None, "red"), Threshold(1, "green")),
)

bottleneck = Panel(
    "Bottleneck class",
    "stat",
    (Query(_one(RECORDS.device_bottleneck), "{{bottleneck}}", instant=True),),
    "The recorded bottleneck class of the device (memory, compute, balanced, unknown).",
    width=24,
    height=4,
    options={"graphMode": "none", "textMode": "name"},
)

slice_activity = Panel(
    "Slice activity",
    "timeseries",
    (
        Query(
            _named(c.SLICE_UTILIZATION, c.SLICE_SM_ACTIVE, c.SLICE_SM_OCCUPANCY),
            "{{slice_id}} {{profile}} {{__name__}}",
        ),
    ),
    "Engine utilization, SM active and occupancy of each MIG instance or vGPU share of the device.",
    unit="percentunit",
    min=0,
    max=1,
)

slice_memory = Panel(
    "Slice memory",
    "timeseries",
    (Query(_named(c.SLICE_MEMORY_USED, c.SLICE_MEMORY_LIMIT), "{{slice_id}} {{profile}} {{__name__}}"),),
    "Memory used and memory limit of each slice.",
    unit="bytes",
    min=0,
)

slices = Panel(
    "Slices",
    "table",
    (
        Query(_one(c.SLICE_INFO), instant=True, table=True),
        Query(_one(c.SLICE_COMPUTE_LIMIT), instant=True, table=True),
    ),
    "Each slice: id, profile, kind (mig|vgpu|vnpu), slice uuid, holder, and its share of the device's compute.",
    width=24,
    height=6,
    transformations=(
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "Value #A": True, "__name__": True},
                "renameByName": {"Value #B": "compute share"},
            },
        },
    ),
    overrides=(
        {
            "matcher": {"id": "byName", "options": "compute share"},
            "properties": [{"id": "unit", "value": "percentunit"}],
        },
    ),
)

partitions = Panel(
    "Partitions of this card",
    "table",
    (
        Query(
            f'{c.PARTITION_INFO}{{cluster=~"$cluster"}} and on (cluster, node, parent_uuid) '
            f"{_one(c.PARTITION_INFO)}\nor on (cluster, node, uuid) "
            f'label_replace({_one(c.INFO)}, "compute_partition", "none", "", "")',
            instant=True,
            table=True,
        ),
    ),
    "AMD MI300 compute partitions (SPX/DPX/QPX/CPX) and memory mode (NPS1/NPS4): every logical GPU of the "
    "physical card this device belongs to (parent_uuid), with its partition id. Card-wide power and memory "
    "appear on partition 0; node totals count each card once (node:accelerator_power_watts:sum). "
    "compute_partition none: the device's tool prints no partition mode (not an MI300, or SPX on a tool "
    "that does not print it).",
    width=24,
    height=6,
    transformations=(
        {
            "id": "organize",
            "options": {
                "excludeByName": {
                    "Time": True,
                    "Value": True,
                    "__name__": True,
                    "driver_version": True,
                    "serial": True,
                    "pci_bus_id": True,
                }
            },
        },
    ),
)

BOARD = Board(
    UID,
    "xpuwatch / Device",
    "Every reading of one accelerator and its MIG/vGPU slices over time.",
    (
        Row("Device", (identity, up, holders)),
        Row("Activity", (activity, memory, memory_share, power, temperature, clocks, throttle, bottleneck)),
        Row("Errors and health", (ecc, faults, links, remap, health)),
        Row("Slices", (slices, slice_activity, slice_memory)),
        Row("Partitions", (partitions,)),
    ),
    variables=(*STANDARD, UUID),
    time_from="now-3h",
)
