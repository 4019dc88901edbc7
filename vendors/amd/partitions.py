"""AMD MI300 compute/memory partitions: each logical GPU tied to its physical card (``Device.partition``).

Vendor layer: pure functions over Devices, used by the amd-smi JSON, amdsmi library and text readers.

What the tools say (sources in docs/vendors/amd.md): a card in DPX/QPX/CPX is listed as 2/4/8 GPUs, each at
its own PCI function of the card's ``domain:bus:device`` (ROCm/rocm-systems#5805: on MI300 the partition id
is the BDF function); ``amd-smi static`` has a ``partition`` section (``compute_partition`` "SPX".."CPX",
``memory_partition`` "NPS1".."NPS4", ``partition_id``), the library ``amdsmi_get_gpu_compute_partition`` /
``amdsmi_get_gpu_memory_partition``; before amdsmi's fix (ROCm/rocm-systems#8491) only partition 0 answers
the partition queries, the others print N/A.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from xpuwatch.vendors.amd.readings import text
from xpuwatch.vendors.base import DeviceSample, Partition

_COMPUTE = re.compile(r"[SDTQC]PX", re.IGNORECASE)
_MEMORY = re.compile(r"NPS[1-8]", re.IGNORECASE)


def mode(raw: object, kind: str) -> str | None:
    """``"CPX"`` / ``"NPS4"`` as printed (upper-case), else None (N/A, garbage, a leading ``*`` kept off).
    ``kind``: "compute" or "memory"."""
    t = (text(raw) or "").strip().strip("*").upper()
    pattern = _COMPUTE if kind == "compute" else _MEMORY
    return t if pattern.fullmatch(t) else None


def partition_of(section: Mapping[str, Any] | None, uuid: str) -> Partition | None:
    """An ``amd-smi static`` ``partition`` section (or the library's answers in the same keys) -> Partition
    with ``parent_uuid`` = the device itself until ``tie`` groups the card; None when no mode is printed."""
    if not section:
        return None
    compute = mode(section.get("compute_partition"), "compute")
    memory = mode(section.get("memory_partition"), "memory")
    pid = text(section.get("partition_id"))
    pid = str(int(pid)) if pid is not None and pid.isdigit() and len(pid) <= 3 else None
    if compute is None and memory is None and pid in (None, "0"):
        return None
    return Partition(uuid, pid or "0", compute, memory)


def tie(samples: Sequence[DeviceSample]) -> list[DeviceSample]:
    """Samples whose partitioned devices name their card: devices with a ``partition`` are grouped by the
    ``domain:bus:device`` of their PCI address; in a group, ``parent_uuid`` is the uuid of partition 0
    (else of the lowest PCI function) and a mode a partition printed as N/A is the card's. A device with
    no PCI address keeps itself as parent. Uuids shared by partitions of one card (one ASIC serial) get
    ``:p<partition_id>`` on partitions other than 0, so each logical GPU stays one series."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        d = s.device
        if d.partition is not None and d.pci_bus_id and "." in d.pci_bus_id:
            groups.setdefault(d.pci_bus_id.rsplit(".", 1)[0], []).append(i)
    out = list(samples)
    for members in groups.values():
        devs = [samples[i].device for i in members]
        first = min(
            devs,
            key=lambda d: (d.partition.partition_id != "0" if d.partition else True, d.pci_bus_id or ""),
        )
        card = first.partition
        assert card is not None
        uuids = [d.uuid for d in devs]
        for i, d in zip(members, devs, strict=True):
            p = d.partition
            assert p is not None
            uuid = d.uuid
            if uuids.count(uuid) > 1 and d is not first:
                uuid = f"{uuid}:p{p.partition_id}"
            part = replace(
                p,
                parent_uuid=first.uuid,
                compute_mode=p.compute_mode or card.compute_mode,
                memory_mode=p.memory_mode or card.memory_mode,
            )
            out[i] = replace(samples[i], device=replace(d, uuid=uuid, partition=part))
    return out
