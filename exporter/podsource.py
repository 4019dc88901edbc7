"""Pod attribution source for Kubernetes nodes: kubelet PodResources (+ optional API enrichment) on its own timer.

Never in the scrape path: a background thread refreshes every ``interval`` seconds; ``current()`` returns the
last good mapping. A failed refresh sets ``up() == False``, logs once per outage, and retries with exponential
backoff (never a hot loop); the last good mapping is kept for ``grace`` seconds after its refresh (a kubelet
restart does not make every pod label flap and restart alerts' ``for:`` timers), then dropped (pods may have
gone meanwhile: a stale holder is worse than none). Device series are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xpuwatch.exporter.attribution import EMPTY, Attribution, Holder, MappingStatus, slice_key
from xpuwatch.exporter.build import require_extra
from xpuwatch.exporter.kubelet import (
    DEFAULT_SOCKET,
    ContainerDevices,
    KubeletError,
    PodResources,
    list_pod_resources,
)
from xpuwatch.exporter.podmap import (
    DEFAULT_RESOURCE_PREFIXES,
    DeviceRef,
    DraDeviceRef,
    SliceRef,
    dra_devices_of,
    match,
    parse_hami_allocation,
)
from xpuwatch.exporter.workload import DEFAULT_OWNER_LABELS, UNKNOWN, PodMeta, Workload, classify, promote

if TYPE_CHECKING:
    from xpuwatch.exporter.kubeapi import ApiAccess

log = logging.getLogger(__name__)

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
# MindCluster's Ascend Device Plugin (Volcano mode) may mount other chips than the kubelet chose; it records both
# on the pod, comma-separated and position by position: ``huawei.com/kltDev`` (the kubelet's device IDs) and
# ``huawei.com/AscendReal`` (the chips it really mounted), e.g. ``Ascend910-0,Ascend910-1``. Source:
# Ascend/ascend-device-plugin src/plugin/pkg/npu/huawei/plugin_api.go, updatePodAnnotation (``pod2kl:
# strings.Join(kltRequestDevices, ","), podRealAlloc: strings.Join(dpResponseDevices, ",")``) and
# updatePodRealAllocate (``vol2KlDevMap[vol] = kltRequestDevices[index]``); MindCluster docs, API reference
# "Pod Annotations" (huawei.com/AscendReal: "Record of the actual chips allocated by Ascend Device Plugin to
# the Pod"; huawei.com/kltDev: "Record of chips allocated by kubelet to the Pod").
ASCEND_REAL = "huawei.com/AscendReal"
ASCEND_KUBELET = "huawei.com/kltDev"
ASCEND_RESOURCE_PREFIX = "huawei.com/"


@dataclass(frozen=True)
class PodMappingSettings:
    """Pod attribution configuration (config file section ``pod_mapping``)."""

    enabled: bool = False
    socket: str = DEFAULT_SOCKET  # kubelet PodResources unix socket
    interval_seconds: float = 15.0  # refresh period when healthy
    timeout_seconds: float = 5.0  # deadline of one List call
    max_backoff_seconds: float = 300.0  # refresh period ceiling while failing
    grace_seconds: float = 300.0
    """How long the last good mapping outlives failing refreshes (kubelet restarts take seconds to a minute;
    five minutes covers a kubelet upgrade without keeping holders of pods deleted meanwhile for long)."""
    host_proc: str | None = None
    """The host's proc tree, for pid -> container of the processes on a device. None: ``/host/proc`` where it
    exists (the DaemonSet mounts the host's ``/proc`` there read-only), else ``/proc`` (on the host, or with
    ``hostPID: true``)."""
    resource_prefixes: tuple[str, ...] = DEFAULT_RESOURCE_PREFIXES
    kube_api: bool = False  # enrich with workload kind/owner from the Kubernetes API
    kube_api_host: str | None = None  # None: in-cluster service account, else kubeconfig
    owner_labels: tuple[str, ...] = DEFAULT_OWNER_LABELS
    label_allowlist: tuple[str, ...] = ()
    """Pod label keys promoted to ``accelerator_allocated`` as ``label_<key>`` (needs kube_api); none by
    default. Bounded with the annotations by ``exporter.workload.MAX_PROMOTED``."""
    annotation_allowlist: tuple[str, ...] = ()
    """Pod annotation keys promoted as ``annotation_<key>``, values cut at ``MAX_PROMOTED_VALUE``."""
    owner_kind: bool = False
    """Promote the kind of the pod's first ownerReference as ``owner_kind`` (counts as one key)."""


DevicesFn = Callable[[], tuple[Sequence[DeviceRef], Sequence[SliceRef]]]


def _id_list(value: str) -> list[str]:
    # Comma-separated as the plugin writes them; blanks tolerated (some tools print them space-separated).
    return [t for t in value.replace(",", " ").split() if t]


def real_allocations(
    allocations: Sequence[ContainerDevices], pods: Sequence[PodMeta] | None
) -> tuple[tuple[ContainerDevices, ...], tuple[tuple[str, int], ...]]:
    """Pure: the kubelet's Ascend allocations corrected by the device plugin's pod annotations ->
    (allocations, per ``huawei.com/`` resource in use: how many device IDs were moved to another chip).

    A pod with ``huawei.com/AscendReal``: each kubelet ID found in ``huawei.com/kltDev`` becomes the ID at
    the same position in AscendReal. Without a usable kltDev (missing, or another length), a pod whose
    Ascend devices are all in one container's one resource gets AscendReal as that container's IDs; a pod
    spread over several containers keeps the kubelet's IDs (which container got which real chip cannot be
    told). Pods without the annotation (no pods: API enrichment off) keep the kubelet's IDs."""
    by_pod = {(p.namespace, p.name): p for p in pods or ()}
    ascend = [a for a in allocations if a.resource.startswith(ASCEND_RESOURCE_PREFIX)]
    held: dict[tuple[str, str], int] = {}
    for a in ascend:
        held[(a.namespace, a.pod)] = held.get((a.namespace, a.pod), 0) + 1
    moved: dict[str, int] = {}
    out: list[ContainerDevices] = []
    for a in allocations:
        pod = by_pod.get((a.namespace, a.pod))
        real = _id_list(pod.annotations.get(ASCEND_REAL, "")) if pod is not None else []
        if not a.resource.startswith(ASCEND_RESOURCE_PREFIX) or not real:
            out.append(a)
            continue
        moved.setdefault(a.resource, 0)
        klt = _id_list(pod.annotations.get(ASCEND_KUBELET, "")) if pod is not None else []
        if klt and len(klt) == len(real) and len(set(klt)) == len(klt):
            to_real = dict(zip(klt, real, strict=True))
            ids = tuple(to_real.get(d.strip(), d) for d in a.device_ids)
        elif held[(a.namespace, a.pod)] == 1:
            ids = tuple(real)
        else:
            ids = a.device_ids
        moved[a.resource] += len(set(ids) - set(a.device_ids))
        out.append(replace(a, device_ids=ids))
    return tuple(out), tuple(sorted(moved.items()))


def build_attribution(
    resources: PodResources | Sequence[ContainerDevices],
    devices: Sequence[DeviceRef],
    slices: Sequence[SliceRef],
    pods: Sequence[PodMeta] | None,
    settings: PodMappingSettings,
    dra_devices: Sequence[DraDeviceRef] = (),
) -> tuple[Attribution, tuple[tuple[str, int], ...]]:
    """Pure: kubelet allocations and DRA claims + known devices (+ pod metadata, ResourceSlice devices) ->
    (Attribution, unmatched IDs per resource name)."""
    if not isinstance(resources, PodResources):
        resources = PodResources(tuple(resources))
    pm = match(resources.devices, devices, slices, settings.resource_prefixes, resources.claims, dra_devices)
    workloads: dict[tuple[str, str], Workload] = {}
    hami: dict[str, list[tuple[str, str, str]]] = {}  # device uuid -> [(ns, pod, container)]
    containers: dict[str, Holder] = {}
    promoted: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
    if pods is not None:
        for p in pods:
            w = workloads[(p.namespace, p.name)] = classify(p, settings.owner_labels)
            if settings.label_allowlist or settings.annotation_allowlist or settings.owner_kind:
                promoted[(p.namespace, p.name)] = promote(
                    p, settings.label_allowlist, settings.annotation_allowlist, settings.owner_kind
                )
            for cid, cname in p.container_ids.items():
                containers[cid] = Holder(p.namespace, p.name, cname, w.kind, w.owner)
            if HAMI_ALLOCATED in p.annotations:
                for i, devs in enumerate(parse_hami_allocation(p.annotations[HAMI_ALLOCATED])):
                    ctr = p.containers[i] if i < len(p.containers) else str(i)
                    for uuid, _mem, _cores in devs:
                        hami.setdefault(uuid, []).append((p.namespace, p.name, ctr))

    def holder(ns: str, pod: str, container: str) -> Holder:
        w = workloads.get((ns, pod), Workload(UNKNOWN, ""))
        return Holder(ns, pod, container, w.kind, w.owner, promoted.get((ns, pod), ()))

    table: dict[str, list[Holder]] = {}
    for uuid, refs in pm.devices.items():
        table.setdefault(uuid, []).extend(holder(r.namespace, r.pod, r.container) for r in refs)
    for (parent, sid), refs in pm.slices.items():
        table.setdefault(slice_key(parent, sid), []).extend(
            holder(r.namespace, r.pod, r.container) for r in refs
        )
    # HAMi decides the physical GPU in its scheduler, not in the kubelet's device choice: its pod annotation
    # is authoritative for which GPU a share lives on (HAMi docs/develop/protocol.md), so a HAMi pod's
    # kubelet-side matches are replaced by the annotation's. Where HAMi-core's region of that container is
    # read (vendors/hami.py: slice id "<pod uid>_<container>"), the holder holds that share, not the card.
    known = {d.uuid for d in devices}
    by_uid = {p.uid: p for p in pods or () if p.uid}
    on_share: set[tuple[str, str, str, str]] = set()  # (ns, pod, container, card uuid)
    for sref in slices:
        uid, sep, ctr = sref.slice_id.partition("_")
        pod = by_uid.get(uid) if sep else None
        if pod is not None:
            table.setdefault(slice_key(sref.parent_uuid, sref.slice_id), []).append(
                holder(pod.namespace, pod.name, ctr)
            )
            on_share.add((pod.namespace, pod.name, ctr, sref.parent_uuid))
    hami_pods = {(ns, pod) for entries in hami.values() for ns, pod, _ in entries}
    if hami_pods:
        for key in list(table):
            if "/" not in key:
                table[key] = [h for h in table[key] if (h.namespace, h.pod) not in hami_pods]
    for uuid, entries in hami.items():
        if uuid in known:
            table.setdefault(uuid, []).extend(
                holder(ns, pod, ctr) for ns, pod, ctr in entries if (ns, pod, ctr, uuid) not in on_share
            )
    # HAMi split IDs of pods neither the annotation nor a region places: the kubelet's card may be the
    # wrong one, so they are counted, not attributed.
    placed = hami_pods | {(ns, pod) for ns, pod, _, _ in on_share}
    unmatched = dict(pm.unmatched_by_resource)
    for refs in pm.hami.values():
        for r in refs:
            if (r.namespace, r.pod) not in placed:
                unmatched[r.resource] = unmatched.get(r.resource, 0) + 1
    return Attribution.of(table, containers), tuple(sorted(unmatched.items()))


class KubeletAttributionSource:
    """AttributionSource refreshed in the background from the kubelet (and optionally the API server).

    ``clock`` is monotonic (grace and backoff), ``wall`` gives Unix time for ``status().last_success``.
    """

    def __init__(
        self,
        settings: PodMappingSettings,
        node: str,
        devices_fn: DevicesFn,
        clock: Callable[[], float] = time.monotonic,
        api_token: str | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.node = node
        self._devices_fn = devices_fn
        self._clock = clock
        self._wall = wall
        self._api: ApiAccess | None = None
        require_extra("kubernetes", ("grpc", "google.protobuf"), "pod_mapping.enabled")
        if settings.kube_api:  # the Kubernetes client costs a second to import: only when enabled
            require_extra("kubernetes", ("kubernetes_asyncio",), "pod_mapping.kube_api")
            from xpuwatch.exporter.kubeapi import ApiAccess

            self._api = ApiAccess(host=settings.kube_api_host, token=api_token)
        self._attribution = EMPTY
        self._up: bool | None = None
        self._good_at: float | None = None  # monotonic time of the last successful refresh
        self._good_wall: float | None = None
        self._unmatched: tuple[tuple[str, int], ...] = ()
        self._reassigned: tuple[tuple[str, int], ...] = ()
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.refreshes = 0

    def current(self) -> Attribution:
        """The last good mapping while the kubelet answers or for ``grace`` seconds after, else empty."""
        with self._lock:
            if self._up is False and (
                self._good_at is None or self._clock() - self._good_at > self.settings.grace_seconds
            ):
                return EMPTY
            return self._attribution

    def up(self) -> bool | None:
        with self._lock:
            return self._up

    def status(self) -> MappingStatus | None:
        with self._lock:
            if self._up is None:
                return None
            return MappingStatus(self._up, self._good_wall, self._unmatched, self._reassigned)

    @property
    def unmatched(self) -> int:
        return sum(n for _, n in self._unmatched)

    def refresh(self) -> bool:
        """One refresh; returns success. Never raises."""
        self.refreshes += 1
        try:
            resources = list_pod_resources(self.settings.socket, self.settings.timeout_seconds)
            pods = None
            dra: tuple[DraDeviceRef, ...] = ()
            if self._api is not None:
                from xpuwatch.exporter.kubeapi import KubeApiError, list_node_pods, list_node_resource_slices

                try:
                    pods = asyncio.run(list_node_pods(self.node, self._api, self.settings.timeout_seconds))
                except KubeApiError as exc:  # enrichment is optional: keep pod labels, lose kind/owner
                    log.warning("pod mapping: Kubernetes API enrichment failed: %s", exc)
                if resources.claims:  # ResourceSlices only matter when some container holds a DRA claim
                    try:
                        dra = dra_devices_of(
                            asyncio.run(
                                list_node_resource_slices(self.node, self._api, self.settings.timeout_seconds)
                            )
                        )
                    except KubeApiError as exc:
                        log.warning("pod mapping: DRA ResourceSlices unavailable: %s", exc)
            devices, slices = self._devices_fn()
            real, reassigned = real_allocations(resources.devices, pods)
            if reassigned != self._reassigned and any(n for _, n in reassigned):
                log.info(
                    "pod mapping: the device plugin's pod annotation (%s) moves allocated IDs off the kubelet's "
                    "choice: %s",
                    ASCEND_REAL,
                    ", ".join(f"{r}: {n}" for r, n in reassigned),
                )
            resources = replace(resources, devices=real)
            attribution, unmatched = build_attribution(resources, devices, slices, pods, self.settings, dra)
        except KubeletError as exc:
            if not self._failing:
                log.warning(
                    "pod mapping unavailable (%s): %s; keeping the last mapping for %gs, device metrics "
                    "continue",
                    exc.reason,
                    exc,
                    self.settings.grace_seconds,
                )
            self._failing = True
            with self._lock:
                self._up = False
            return False
        except Exception:  # never let a bug in enrichment stop the exporter
            log.exception("pod mapping refresh failed unexpectedly")
            self._failing = True
            with self._lock:
                self._up = False
            return False
        if self._failing:
            log.info("pod mapping recovered")
        self._failing = False
        if unmatched and unmatched != self._unmatched:
            log.warning(
                "pod mapping: allocated device IDs match no exported device: %s",
                ", ".join(f"{r}: {n}" for r, n in unmatched),
            )
        with self._lock:
            self._attribution, self._up, self._unmatched = attribution, True, unmatched
            self._reassigned = reassigned
            self._good_at, self._good_wall = self._clock(), self._wall()
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-mapping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        delay = self.settings.interval_seconds
        while not self._stop.is_set():
            ok = self.refresh()
            delay = (
                self.settings.interval_seconds
                if ok
                else min(max(delay * 2, self.settings.interval_seconds), self.settings.max_backoff_seconds)
            )
            self._stop.wait(delay)
