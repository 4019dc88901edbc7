"""Series budget: what one device costs in series, per vendor and mode, rendered from the simulated fleet.

``measure(selection)`` renders the default simulated fleet (vendors/sim_default.yaml: every vendor and mode
the simulator has) through ``exporter.collector.families`` and counts, per device, the series that carry
its ``uuid`` (its own, its slices', its allocation and container series; not the exporter's self-metrics),
grouped by (vendor, mode): the largest device of each group. The mode is "whole card" for a device
without slices, else its slices' kind (``MIG``, ``vGPU``, ``vNPU``, any other kind as the simulator names
it), so a vendor or slice kind added to the simulator gets its row without a change here.

``BUDGETS`` is the documented ceiling per device at the default selection; docs/metrics.md shows it next to
the measured default and maximum (every breakdown on) and tests/exporter/test_selection.py fails when a
default exceeds it. Pure (the simulator is seeded and its clock passed in).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xpuwatch.exporter.attribution import Attribution, Holder
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.selection import Selection
from xpuwatch.vendors.sim import default_scenario_text, parse_scenario, pods_at, simulate

_MODES = {"mig": "MIG", "vgpu": "vGPU", "vnpu": "vNPU"}

DEFAULT_BUDGET = 60
"""Series per device at the default selection for a (vendor, mode) with no entry in ``BUDGETS`` (a vendor or
slice kind new to the simulator): about an NVIDIA whole card's, until its own row is set."""
BUDGETS: dict[tuple[str, str], int] = {
    # Each ceiling is the default measured when it was set plus ~15% headroom, so a new family or label
    # value that adds series per device must raise it on purpose (and say why in the commit).
    # A100: 15 scalars, 3 sensors, 3 clocks, 9 throttle reasons, 2+2 ECC/remap types, 10 fault codes,
    # 4 link error types (12 links x 4 = 48 with the per-link breakdown on), 4 health subsystems.
    ("nvidia", "whole card"): 64,
    # The parent card plus 7 per MIG instance (info, memory used/limit, compute limit, utilization, SM
    # active/occupancy) and a holder per instance; the simulator's card has 3 instances.
    ("nvidia", "MIG"): 90,
    # A card without NVLink plus 5 per HAMi vGPU share (no SM figures) and a holder per share.
    ("nvidia", "vGPU"): 56,
    ("amd", "whole card"): 24,
    # A 910B chip: the core series plus npu-smi's 11 vendor-only readings (health, error codes, AI CPU, ctrl
    # CPU, AICore frequency and its rating, DDR used/total/bandwidth, processes and their memory), which the
    # simulated chips emit since the default fleet covers the catalog: 25 measured.
    ("huawei", "whole card"): 29,
}


@dataclass(frozen=True)
class Row:
    """One (vendor, mode): how many simulated devices, the series of the largest at the default selection
    and with every breakdown on, and the documented ceiling."""

    vendor: str
    mode: str
    devices: int
    default: int
    maximum: int
    budget: int


def mode(kinds: set[str]) -> str:
    """The mode of a device from the kinds of its slices (none: ``whole card``)."""
    if not kinds:
        return "whole card"
    return "+".join(sorted(_MODES.get(k, k) for k in kinds))


def per_device(selection: Selection, t: float = 0.0) -> dict[str, tuple[str, str, int]]:
    """Device uuid -> (vendor, mode, series carrying that uuid) of the default simulated fleet at ``t``."""
    scenario = parse_scenario(default_scenario_text())
    samples = tuple(simulate(scenario, t))
    holders = {
        key: [Holder(p.namespace, p.pod, p.container, p.workload_kind, p.owner) for p in pods]
        for key, pods in pods_at(scenario, t).items()
    }
    view = BackendView("sim", True, samples, len(samples), t, 0.0, {}, 1, True)
    fams = families(scenario.node, [view], Attribution.of(holders), None, selection=selection)
    counts: dict[str, int] = defaultdict(int)
    for f in fams:
        for s in f.samples:
            if "uuid" in s.labels:
                counts[s.labels["uuid"]] += 1
    return {
        s.device.uuid: (s.device.vendor, mode({sl.kind for sl in s.slices}), counts[s.device.uuid])
        for s in samples
    }


def measure(selection: Selection | None = None) -> dict[tuple[str, str], tuple[int, int]]:
    """(vendor, mode) -> (devices, series of the largest device) under ``selection`` (default: the
    default selection)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for vendor, m, n in per_device(Selection.default() if selection is None else selection).values():
        devices, most = out.get((vendor, m), (0, 0))
        out[(vendor, m)] = (devices + 1, max(most, n))
    return out


def rows() -> list[Row]:
    """The budget table, sorted by vendor and mode."""
    default = measure()
    maximum = measure(Selection())
    return [
        Row(v, m, devices, n, maximum[(v, m)][1], BUDGETS.get((v, m), DEFAULT_BUDGET))
        for (v, m), (devices, n) in sorted(default.items())
    ]
