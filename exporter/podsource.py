"""Pod attribution source for Kubernetes nodes: kubelet PodResources (+ optional API enrichment) on its own timer.

Never in the scrape path: a background thread refreshes every ``interval`` seconds; ``current()`` returns the
last good mapping. A failed refresh drops pod labels (empty mapping), sets ``up() == False``, logs once per
outage, and retries with exponential backoff (never a hot loop). Device series are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.attribution import EMPTY, Attribution, Holder, slice_key
from exporter.build import require_extra
from exporter.kubelet import DEFAULT_SOCKET, KubeletError, list_allocations
from exporter.podmap import DEFAULT_RESOURCE_PREFIXES, DeviceRef, SliceRef, match, parse_hami_allocation
from exporter.workload import DEFAULT_OWNER_LABELS, UNKNOWN, PodMeta, Workload, classify

if TYPE_CHECKING:
    from exporter.kubeapi import ApiAccess

log = logging.getLogger(__name__)

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"


@dataclass(frozen=True)
class PodMappingSettings:
    """Pod attribution configuration (config file section ``pod_mapping``)."""

    enabled: bool = False
    socket: str = DEFAULT_SOCKET  # kubelet PodResources unix socket
    interval_seconds: float = 15.0  # refresh period when healthy
    timeout_seconds: float = 5.0  # deadline of one List call
    max_backoff_seconds: float = 300.0  # refresh period ceiling while failing
    resource_prefixes: tuple[str, ...] = DEFAULT_RESOURCE_PREFIXES
    kube_api: bool = False  # enrich with workload kind/owner from the Kubernetes API
    kube_api_host: str | None = None  # None: in-cluster service account, else kubeconfig
    owner_labels: tuple[str, ...] = DEFAULT_OWNER_LABELS


DevicesFn = Callable[[], tuple[Sequence[DeviceRef], Sequence[SliceRef]]]


def build_attribution(
    allocations: Sequence,  # Sequence[ContainerDevices]
    devices: Sequence[DeviceRef],
    slices: Sequence[SliceRef],
    pods: Sequence[PodMeta] | None,
    settings: PodMappingSettings,
) -> tuple[Attribution, int]:
    """Pure: kubelet allocations + known devices (+ pod metadata) -> (Attribution, unmatched device IDs)."""
    pm = match(allocations, devices, slices, settings.resource_prefixes)
    workloads: dict[tuple[str, str], Workload] = {}
    hami: dict[str, list[tuple[str, str, str]]] = {}  # device uuid -> [(ns, pod, container)]
    if pods is not None:
        for p in pods:
            workloads[(p.namespace, p.name)] = classify(p, settings.owner_labels)
            if HAMI_ALLOCATED in p.annotations:
                for i, devs in enumerate(parse_hami_allocation(p.annotations[HAMI_ALLOCATED])):
                    ctr = p.containers[i] if i < len(p.containers) else str(i)
                    for uuid, _mem, _cores in devs:
                        hami.setdefault(uuid, []).append((p.namespace, p.name, ctr))

    def holder(ns: str, pod: str, container: str) -> Holder:
        w = workloads.get((ns, pod), Workload(UNKNOWN, ""))
        return Holder(ns, pod, container, w.kind, w.owner)

    table: dict[str, list[Holder]] = {}
    for uuid, refs in pm.devices.items():
        table.setdefault(uuid, []).extend(holder(r.namespace, r.pod, r.container) for r in refs)
    for (parent, sid), refs in pm.slices.items():
        table.setdefault(slice_key(parent, sid), []).extend(
            holder(r.namespace, r.pod, r.container) for r in refs
        )
    # HAMi decides the physical GPU in its scheduler, not in the kubelet's device choice: its pod annotation
    # is authoritative for which GPU a share lives on (HAMi docs/develop/protocol.md), so a HAMi pod's
    # kubelet-side matches are replaced by the annotation's.
    known = {d.uuid for d in devices}
    hami_pods = {(ns, pod) for entries in hami.values() for ns, pod, _ in entries}
    if hami_pods:
        for key in list(table):
            table[key] = [h for h in table[key] if (h.namespace, h.pod) not in hami_pods]
    for uuid, entries in hami.items():
        if uuid in known:
            table.setdefault(uuid, []).extend(holder(ns, pod, ctr) for ns, pod, ctr in entries)
    return Attribution.of(table), pm.unmatched_count


class KubeletAttributionSource:
    """AttributionSource refreshed in the background from the kubelet (and optionally the API server)."""

    def __init__(
        self,
        settings: PodMappingSettings,
        node: str,
        devices_fn: DevicesFn,
        clock: Callable[[], float] = time.monotonic,
        api_token: str | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self._devices_fn = devices_fn
        self._clock = clock
        self._api: ApiAccess | None = None
        require_extra("kubernetes", ("grpc", "google.protobuf"), "pod_mapping.enabled")
        if settings.kube_api:  # the Kubernetes client costs a second to import: only when enabled
            require_extra("kubernetes", ("kubernetes_asyncio",), "pod_mapping.kube_api")
            from exporter.kubeapi import ApiAccess

            self._api = ApiAccess(host=settings.kube_api_host, token=api_token)
        self._attribution = EMPTY
        self._up: bool | None = None
        self._unmatched = 0
        self._failing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.refreshes = 0

    def current(self) -> Attribution:
        with self._lock:
            return self._attribution

    def up(self) -> bool | None:
        with self._lock:
            return self._up

    @property
    def unmatched(self) -> int:
        return self._unmatched

    def refresh(self) -> bool:
        """One refresh; returns success. Never raises."""
        self.refreshes += 1
        try:
            allocations = list_allocations(self.settings.socket, self.settings.timeout_seconds)
            pods = None
            if self._api is not None:
                from exporter.kubeapi import KubeApiError, list_node_pods

                try:
                    pods = asyncio.run(list_node_pods(self.node, self._api, self.settings.timeout_seconds))
                except KubeApiError as exc:  # enrichment is optional: keep pod labels, lose kind/owner
                    log.warning("pod mapping: Kubernetes API enrichment failed: %s", exc)
            devices, slices = self._devices_fn()
            attribution, unmatched = build_attribution(allocations, devices, slices, pods, self.settings)
        except KubeletError as exc:
            if not self._failing:
                log.warning(
                    "pod mapping unavailable (%s): %s; device metrics continue without pod labels",
                    exc.reason,
                    exc,
                )
            self._failing = True
            with self._lock:
                self._attribution, self._up = EMPTY, False
            return False
        except Exception:  # never let a bug in enrichment stop the exporter
            log.exception("pod mapping refresh failed unexpectedly")
            self._failing = True
            with self._lock:
                self._attribution, self._up = EMPTY, False
            return False
        if self._failing:
            log.info("pod mapping recovered")
        self._failing = False
        if unmatched and unmatched != self._unmatched:
            log.warning("pod mapping: %d allocated device IDs match no exported device", unmatched)
        self._unmatched = unmatched
        with self._lock:
            self._attribution, self._up = attribution, True
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
