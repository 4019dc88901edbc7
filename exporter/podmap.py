"""Enrichment core (pure): match device-plugin device IDs from the kubelet to the devices and slices we export.

Every vendor's device plugin names devices its own way; the forms matched here, with their sources:

- ``GPU-<uuid>``: NVIDIA k8s-device-plugin with ``--device-id-strategy=uuid`` (default).
- ``GPU-<uuid>::<n>``: the same GPU shared by time-slicing or MPS replicas (k8s-device-plugin docs,
  "Shared Access to GPUs"); all replicas map to the one physical GPU.
- ``GPU-<uuid>-<n>``: HAMi's split devices (Project-HAMi/HAMi ``pkg/device-plugin``), one per share. The
  kubelet's choice among them is not where the share lives (HAMi's scheduler decides, and writes it in the
  pod annotation ``hami.io/vgpu-devices-allocated``), so these are returned apart (``PodMap.hami``) and
  attributed through the annotation and HAMi-core's per-container regions, never to the kubelet's card.
- ``MIG-<uuid>``: MIG devices under ``nvidia.com/mig-<profile>`` (mixed strategy) or ``nvidia.com/gpu``
  (single strategy); matched to the slice whose ``uuid`` is that MIG UUID.
- ``0000:c1:00.0``: PCI bus ids (AMD ``amd.com/gpu``: ROCm/k8s-device-plugin names devices by PCI address);
  matched to ``Device.pci_bus_id`` ignoring domain width/case.
- ``Ascend910-3``, ``Ascend310P-1``: Huawei's plugin ``<model>-<physical id>``; matched to the chip with that
  physical id (``Device.aliases``), else to device index ``3`` or ``3-0`` (NPU 3, chip 0: 910A/910B).
  Under Volcano the chip really mounted may differ from the kubelet's: ``exporter/podsource.py`` first
  rewrites the IDs from MindCluster's ``huawei.com/AscendReal`` pod annotation (API enrichment on).
- ``Ascend910-2c-100-0``, ``Ascend310P-4c.3cpu-101-1``: Huawei's plugin's vNPUs, ``<model>-<AI cores>c[...]-<vNPU
  id>-<physical id>`` (Ascend/ascend-device-plugin ``common.GetDeviceID``: "vnpu: davinci-coreNum-vid-devID,
  like Ascend910-2c-111-0"; resource ``huawei.com/Ascend910-2c``); matched to the slice with that vNPU id
  (``slice_kind="vnpu"``, vendors/ascend/vnpu.py) on the chip with that physical id, else counted.
- anything else: matched to a device's uuid or serial (Cambricon, Hygon, Kunlunxin, MetaX, ... plugins use the
  card's UUID/serial), else counted as unmatched.

Index-style IDs are read only under resources whose plugin sends indexes (``INDEX_RESOURCES``: Huawei's).
NVIDIA's k8s-device-plugin always reports UUIDs to the kubelet (``--device-id-strategy=index`` only changes
what it passes to the container runtime), so ``nvidia.com/gpu: ["GPU-1"]`` or ``["nvidia1"]`` is unmatched and
counted, never attributed to device 1; likewise ``amd.com/gpu: ["card2"]``. A false holder is worse than none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xpuwatch.exporter.kubelet import ContainerClaim, ContainerDevices

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

# Resource prefixes whose device plugin names devices by an index (physical chip id), with the vendor whose
# Device.index / aliases those indexes refer to. No other plugin sends indexes; see the module docstring.
INDEX_RESOURCES: dict[str, str] = {"huawei.com/": "huawei"}


_REPLICA = re.compile(r"^(?P<base>.+?)::\d+$")
_HAMI_SPLIT = re.compile(r"^(?P<base>.+)-\d+$")
_VNPU = re.compile(r"^[A-Za-z][A-Za-z0-9]*-\d{1,3}c[0-9A-Za-z._]*-(?P<vid>\d{1,6})-(?P<phy>\d{1,6})$")
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
    device matched (bounded to the first 50 for logging; ``unmatched_by_resource`` counts all of them per
    resource name, DRA claims as ``dra:<driver>``)."""

    devices: dict[str, tuple[HolderRef, ...]] = field(default_factory=dict)
    slices: dict[tuple[str, str], tuple[HolderRef, ...]] = field(default_factory=dict)
    unmatched: tuple[str, ...] = ()
    unmatched_count: int = 0
    unmatched_by_resource: tuple[tuple[str, int], ...] = ()
    hami: dict[str, tuple[HolderRef, ...]] = field(default_factory=dict)
    """HAMi split IDs (``<device uuid>-<n>``): device uuid the kubelet picked -> the holder once per ID. Not
    authoritative."""


def normalize_pci(bus_id: str) -> str | None:
    """``00000000:07:00.0`` and ``0000:07:00.0`` -> ``0000:07:00.0``; None if not a PCI address."""
    m = _PCI.match(bus_id.strip())
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn')}"


@dataclass(frozen=True)
class DraDeviceRef:
    """One device of a DRA ResourceSlice on this node (Kubernetes API ``resource.k8s.io``), as far as
    matching needs it: its ``(driver, pool, name)`` key and the identity attributes the driver publishes
    (NVIDIA's ``gpu.nvidia.com``: ``uuid`` = ``GPU-...`` or, for MIG devices, ``MIG-...``; the standard
    ``resource.kubernetes.io/pciBusID``)."""

    driver: str
    pool: str
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None


_UUID_PREFIX = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}-")


def match(
    allocations: Iterable[ContainerDevices],
    devices: Sequence[DeviceRef],
    slices: Sequence[SliceRef] = (),
    resource_prefixes: Sequence[str] = DEFAULT_RESOURCE_PREFIXES,
    claims: Iterable[ContainerClaim] = (),
    dra_devices: Sequence[DraDeviceRef] = (),
) -> PodMap:
    """Attribute every allocated device ID, and every DRA claim device, to a device or slice.
    Never raises on odd IDs; what matches nothing is counted per resource, never guessed."""
    by_uuid = {d.uuid.lower(): d for d in devices}
    by_serial = {d.serial.lower(): d for d in devices if d.serial}
    by_pci = {p: d for d in devices if d.pci_bus_id and (p := normalize_pci(d.pci_bus_id))}
    by_vendor_index = {(d.vendor, d.index): d for d in devices if d.vendor in INDEX_RESOURCES.values()}
    # Huawei's plugin names chips by physical id; npu-smi prints it on 310/310P (vendors/ascend/samples.py sets the
    # alias). Where it does not (910A/910B: one chip per NPU), NPU n chip 0 is the documented default mapping.
    for d in devices:
        if d.vendor not in INDEX_RESOURCES.values():
            continue
        for a in d.aliases:
            by_vendor_index.setdefault((d.vendor, a), d)
    slice_by_uuid = {s.uuid.lower(): s for s in slices if s.uuid}
    slice_by_parent = {(s.parent_uuid, s.slice_id): s for s in slices}
    dra_by_key = {(d.driver, d.pool, d.name): d for d in dra_devices}

    def resolve(did: str) -> DeviceRef | SliceRef | None:
        """An ID by identity (uuid, serial, time-slicing replica of one, PCI address); no indexes."""
        key = did.strip().lower()
        if not key:
            return None
        hit: DeviceRef | SliceRef | None = slice_by_uuid.get(key) or by_uuid.get(key) or by_serial.get(key)
        if hit is None and (m := _REPLICA.match(key)):
            base = m.group("base")
            hit = by_uuid.get(base) or by_serial.get(base) or slice_by_uuid.get(base)
        if hit is None and (pci := normalize_pci(key)):
            hit = by_pci.get(pci)
        return hit

    def hami_split(did: str) -> DeviceRef | None:
        m = _HAMI_SPLIT.match(did.strip().lower())
        return (by_uuid.get(m.group("base")) or by_serial.get(m.group("base"))) if m else None

    dev_holders: dict[str, list[HolderRef]] = {}
    slice_holders: dict[tuple[str, str], list[HolderRef]] = {}
    hami_holders: dict[str, list[HolderRef]] = {}
    unmatched: list[str] = []
    per_resource: dict[str, int] = {}

    def attribute(hit: DeviceRef | SliceRef | None, holder: HolderRef, shown: str) -> None:
        if isinstance(hit, SliceRef):
            _add(slice_holders, (hit.parent_uuid, hit.slice_id), holder)
        elif hit is not None:
            _add(dev_holders, hit.uuid, holder)
        else:
            per_resource[holder.resource] = per_resource.get(holder.resource, 0) + 1
            if len(unmatched) < 50:
                unmatched.append(f"{holder.resource}={shown}")

    for alloc in allocations:
        prefix = next((p for p in resource_prefixes if alloc.resource.startswith(p)), None)
        if prefix is None:
            continue
        index_vendor = INDEX_RESOURCES.get(prefix)
        holder = HolderRef(alloc.namespace, alloc.pod, alloc.container, alloc.resource)
        for raw in alloc.device_ids:
            did = raw.strip()
            hit = resolve(did)
            if hit is None and (card := hami_split(did)) is not None:
                hami_holders.setdefault(card.uuid, []).append(
                    holder
                )  # once per ID: unplaced ones are counted
                continue
            if hit is None and index_vendor and (mv := _VNPU.match(did)):
                phy = mv.group("phy")
                chip = (
                    by_vendor_index.get((index_vendor, f"phy-{phy}"))
                    or by_vendor_index.get((index_vendor, phy))
                    or by_vendor_index.get((index_vendor, f"{phy}-0"))
                )
                hit = slice_by_parent.get((chip.uuid, mv.group("vid"))) if chip is not None else None
            elif hit is None and index_vendor and (m2 := _INDEXED.match(did)):
                n = m2.group("n")
                hit = (
                    by_vendor_index.get((index_vendor, f"phy-{n}"))
                    or by_vendor_index.get((index_vendor, n))
                    or by_vendor_index.get((index_vendor, f"{n}-0"))
                )
            attribute(hit, holder, did)

    for c in claims:
        holder = HolderRef(c.namespace, c.pod, c.container, f"dra:{c.driver}")
        hit = None
        dra = dra_by_key.get((c.driver, c.pool, c.device))
        if dra is not None:  # the ResourceSlice's identity attributes (API enrichment on)
            hit = (dra.uuid and resolve(dra.uuid)) or (dra.pci_bus_id and resolve(dra.pci_bus_id)) or None
        for cdi in c.cdi_devices if hit is None else ():
            # "<vendor>/<class>=<name>"; claim-specific names are "<claim uid>-<device name>"
            name = cdi.split("=", 1)[1] if "=" in cdi else cdi
            hit = resolve(name) or resolve(_UUID_PREFIX.sub("", name))
            if hit is not None:
                break
        if hit is None:
            hit = resolve(c.device)
        attribute(hit, holder, f"{c.pool}/{c.device}")

    return PodMap(
        devices={k: tuple(v) for k, v in dev_holders.items()},
        slices={k: tuple(v) for k, v in slice_holders.items()},
        unmatched=tuple(unmatched),
        unmatched_count=sum(per_resource.values()),
        unmatched_by_resource=tuple(sorted(per_resource.items())),
        hami={k: tuple(v) for k, v in hami_holders.items()},
    )


def dra_devices_of(slices: Iterable[Mapping[str, Any]]) -> tuple[DraDeviceRef, ...]:
    """ResourceSlice objects (``resource.k8s.io`` v1, v1beta2 or v1beta1 JSON) -> DraDeviceRef per device.

    v1/v1beta2 put ``attributes`` on the device, v1beta1 under ``basic``; each attribute is a one-key
    mapping (``{"string": "GPU-..."}``). Identity attributes read: ``uuid``, ``pciBusID``/``pcieBusID``
    (bare, or qualified by the driver or ``resource.kubernetes.io/``). Malformed entries are skipped.
    """
    out: list[DraDeviceRef] = []
    for rs in slices:
        spec = rs.get("spec") if isinstance(rs, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        driver = str(spec.get("driver") or "")
        pool = spec.get("pool")
        pool_name = str(pool.get("name") or "") if isinstance(pool, Mapping) else ""
        for dev in spec.get("devices") or ():
            if not isinstance(dev, Mapping) or not dev.get("name"):
                continue
            body = dev.get("basic") if isinstance(dev.get("basic"), Mapping) else dev
            attrs = body.get("attributes") if isinstance(body, Mapping) else None
            values: dict[str, str] = {}
            for k, v in (attrs or {}).items() if isinstance(attrs, Mapping) else ():
                if isinstance(v, Mapping) and isinstance(v.get("string"), str):
                    values[str(k).rsplit("/", 1)[-1]] = v["string"]
            out.append(
                DraDeviceRef(
                    driver,
                    pool_name,
                    str(dev["name"]),
                    values.get("uuid"),
                    values.get("pciBusID") or values.get("pcieBusID"),
                )
            )
    return tuple(out)


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
