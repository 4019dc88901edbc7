"""Enrichment core (pure): match device-plugin device IDs from the kubelet to the devices and slices we export.

Every vendor's device plugin names devices its own way; the forms matched here, with their sources:

- ``GPU-<uuid>``: NVIDIA k8s-device-plugin with ``--device-id-strategy=uuid`` (default).
- ``GPU-<uuid>::<n>``: the same GPU shared by time-slicing or MPS replicas (k8s-device-plugin docs,
  "Shared Access to GPUs"); all replicas map to the one physical GPU.
- ``GPU-<uuid>-<n>``: HAMi's split devices (Project-HAMi/HAMi ``pkg/device-plugin``), one per share.
- ``MIG-<uuid>``: MIG devices under ``nvidia.com/mig-<profile>`` (mixed strategy) or ``nvidia.com/gpu``
  (single strategy); matched to the slice whose ``uuid`` is that MIG UUID.
- ``nvidia<n>``: ``--device-id-strategy=index``; matched to the NVIDIA device with index n.
- ``0000:c1:00.0``: PCI bus ids (AMD ``amd.com/gpu``); matched to ``Device.pci_bus_id`` ignoring domain width/case.
- ``Ascend910-3``, ``Ascend310P-1``: Huawei's plugin ``<model>-<physical id>``; matched to the chip with that
  physical id (``Device.aliases``), else to device index ``3`` or ``3-0`` (NPU 3, chip 0: 910A/910B).
- anything else: matched to a device's uuid or serial (Cambricon, Hygon, Kunlunxin, MetaX, ... plugins use the
  card's UUID/serial), else counted as unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.kubelet import ContainerDevices

# Resource-name prefixes of accelerator device plugins (reference: vendors.md "K8s resource names").
DEFAULT_RESOURCE_PREFIXES: tuple[str, ...] = (
    "nvidia.com/",
    "amd.com/",
    "huawei.com/",
    "cambricon.com/",
    "hygon.com/",
    "kunlunxin.com/",
    "metax-tech.com/",
    "mthreads.com/",
    "iluvatar.ai/",
    "enflame.com/",
)

# Which vendor a resource prefix belongs to, for index-style IDs.
_PREFIX_VENDOR = {
    "nvidia.com/": "nvidia",
    "amd.com/": "amd",
    "huawei.com/": "huawei",
    "cambricon.com/": "cambricon",
    "hygon.com/": "hygon",
    "kunlunxin.com/": "kunlunxin",
    "metax-tech.com/": "metax",
    "mthreads.com/": "mthreads",
    "iluvatar.ai/": "iluvatar",
    "enflame.com/": "enflame",
}

_REPLICA = re.compile(r"^(?P<base>.+?)(?:::\d+|-\d+)$")
_INDEXED = re.compile(r"^[A-Za-z][A-Za-z0-9]*?-?(?P<n>\d+)$")
_PCI = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$"
)


@dataclass(frozen=True)
class DeviceRef:
    """What the matcher needs to know of one exported device."""

    vendor: str
    uuid: str
    index: str
    pci_bus_id: str | None = None
    serial: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class SliceRef:
    """What the matcher needs to know of one exported slice (MIG instance)."""

    parent_uuid: str
    slice_id: str
    uuid: str | None


@dataclass(frozen=True)
class HolderRef:
    """A container holding a device or slice, as the kubelet names it."""

    namespace: str
    pod: str
    container: str
    resource: str


@dataclass(frozen=True)
class PodMap:
    """Result of matching: device uuid -> holders, (parent uuid, slice_id) -> holders, and the IDs no
    device matched (bounded to the first 50 for logging)."""

    devices: dict[str, tuple[HolderRef, ...]] = field(default_factory=dict)
    slices: dict[tuple[str, str], tuple[HolderRef, ...]] = field(default_factory=dict)
    unmatched: tuple[str, ...] = ()
    unmatched_count: int = 0


def normalize_pci(bus_id: str) -> str | None:
    """``00000000:07:00.0`` and ``0000:07:00.0`` -> ``0000:07:00.0``; None if not a PCI address."""
    m = _PCI.match(bus_id.strip())
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn')}"


def match(
    allocations: Iterable[ContainerDevices],
    devices: Sequence[DeviceRef],
    slices: Sequence[SliceRef] = (),
    resource_prefixes: Sequence[str] = DEFAULT_RESOURCE_PREFIXES,
) -> PodMap:
    """Attribute every allocated device ID to a device or slice. Never raises on odd IDs."""
    by_uuid = {d.uuid.lower(): d for d in devices}
    by_serial = {d.serial.lower(): d for d in devices if d.serial}
    by_pci = {p: d for d in devices if d.pci_bus_id and (p := normalize_pci(d.pci_bus_id))}
    by_vendor_index = {(d.vendor, d.index): d for d in devices}
    # Huawei's plugin names chips by physical id; npu-smi prints it on 310/310P (vendors/ascend/samples.py sets the
    # alias). Where it does not (910A/910B: one chip per NPU), NPU n chip 0 is the documented default mapping.
    for d in devices:
        for a in d.aliases:
            by_vendor_index.setdefault((d.vendor, a), d)
    slice_by_uuid = {s.uuid.lower(): s for s in slices if s.uuid}

    dev_holders: dict[str, list[HolderRef]] = {}
    slice_holders: dict[tuple[str, str], list[HolderRef]] = {}
    unmatched: list[str] = []
    unmatched_count = 0

    for alloc in allocations:
        prefix = next((p for p in resource_prefixes if alloc.resource.startswith(p)), None)
        if prefix is None:
            continue
        vendor = _PREFIX_VENDOR.get(prefix)
        holder = HolderRef(alloc.namespace, alloc.pod, alloc.container, alloc.resource)
        for raw in alloc.device_ids:
            did = raw.strip()
            key = did.lower()
            sl = slice_by_uuid.get(key)
            if sl is not None:
                _add(slice_holders, (sl.parent_uuid, sl.slice_id), holder)
                continue
            dev = by_uuid.get(key) or by_serial.get(key)
            if dev is None and (m := _REPLICA.match(did)):
                base = m.group("base").lower()
                dev = by_uuid.get(base) or by_serial.get(base)
                if dev is None and (sl := slice_by_uuid.get(base)) is not None:
                    _add(slice_holders, (sl.parent_uuid, sl.slice_id), holder)
                    continue
            if dev is None and (pci := normalize_pci(did)):
                dev = by_pci.get(pci)
            if dev is None and vendor and (m2 := _INDEXED.match(did)):
                n = m2.group("n")
                dev = (
                    by_vendor_index.get((vendor, f"phy-{n}"))
                    or by_vendor_index.get((vendor, n))
                    or by_vendor_index.get((vendor, f"{n}-0"))
                )
            if dev is None:
                unmatched_count += 1
                if len(unmatched) < 50:
                    unmatched.append(f"{alloc.resource}={did}")
                continue
            _add(dev_holders, dev.uuid, holder)

    return PodMap(
        devices={k: tuple(v) for k, v in dev_holders.items()},
        slices={k: tuple(v) for k, v in slice_holders.items()},
        unmatched=tuple(unmatched),
        unmatched_count=unmatched_count,
    )


def _add(table: dict, key: object, holder: HolderRef) -> None:  # type: ignore[type-arg]
    held = table.setdefault(key, [])
    if holder not in held:  # replicas of one GPU in one container count once
        held.append(holder)


def parse_hami_allocation(annotation: str) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Parse HAMi's ``hami.io/vgpu-devices-allocated`` pod annotation.

    Format (HAMi ``docs/develop/protocol.md``): per container, separated by ``;``; per device within a
    container, ``UUID,TYPE,memMiB,cores`` separated by ``:``. Returns per container a tuple of
    (uuid, memory MiB, cores percent). Malformed entries are skipped.
    """
    out: list[tuple[tuple[str, int, int], ...]] = []
    for ctr in annotation.split(";"):
        if not ctr.strip():
            continue
        devs: list[tuple[str, int, int]] = []
        for entry in ctr.split(":"):
            parts = [p.strip() for p in entry.split(",")]
            if len(parts) < 4 or not parts[0]:
                continue
            try:
                devs.append((parts[0], int(parts[2]), int(parts[3])))
            except ValueError:
                continue
        out.append(tuple(devs))
    return tuple(out)
