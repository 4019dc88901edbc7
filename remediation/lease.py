"""Leader election on a coordination.k8s.io/v1 Lease, so several replicas act as one.

Follows client-go ``tools/leaderelection`` (and ``kubernetes_asyncio.leaderelection``): the holder renews
``spec.renewTime`` every retry period; a candidate takes over only after it has seen the same record
unchanged for ``leaseDurationSeconds`` by its OWN clock (no cross-node clock comparison); every write
carries the read ``resourceVersion`` so two candidates racing get one success and one 409. A leader
that has not renewed within ``renew_deadline`` stops acting before anyone else may take over.
The clock is injected: ``step(now)`` is one round, ``run`` loops it on the real clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from .kube import Kube, KubeError, LeaseView, micro_time
from .settings import LeaderSettings

log = logging.getLogger(__name__)


class Elector:
    def __init__(
        self, kube: Kube, settings: LeaderSettings, on_change: Callable[[bool], None] | None = None
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.identity = settings.identity
        self.on_change = on_change
        self._renewed_at: datetime | None = None
        self._observed: tuple[str, str] | None = None  # (holder, resourceVersion) last seen
        self._observed_at: datetime | None = None

    def is_leader(self, now: datetime) -> bool:
        """True while the last successful renewal is younger than ``renew_deadline``."""
        return self._renewed_at is not None and now - self._renewed_at < timedelta(
            seconds=self.settings.renew_deadline_seconds
        )

    def _set(self, leader_at: datetime | None) -> bool:
        was = self._renewed_at is not None
        self._renewed_at = leader_at
        if self.on_change and was != (leader_at is not None):
            self.on_change(leader_at is not None)
        return leader_at is not None

    def _spec(self, now: datetime, acquire: str, transitions: int) -> dict[str, object]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.settings.lease_duration_seconds,
            "acquireTime": acquire,
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    async def step(self, now: datetime) -> bool:
        """One acquire-or-renew round; returns whether this replica leads now."""
        ns, name = self.settings.lease_namespace, self.settings.lease_name
        try:
            lease = await self.kube.get_lease(ns, name)
            if lease is None:
                await self.kube.write_lease(ns, name, self._spec(now, micro_time(now), 0), None)
                return self._set(now)
            if lease.holder == self.identity:
                await self.kube.write_lease(
                    ns, name, self._spec(now, lease.acquire_time, lease.transitions), lease.resource_version
                )
                return self._set(now)
            if not self._expired(lease, now):
                return self._set(None)
            await self.kube.write_lease(
                ns, name, self._spec(now, micro_time(now), lease.transitions + 1), lease.resource_version
            )
            log.info("acquired lease %s/%s from %r", ns, name, lease.holder)
            return self._set(now)
        except KubeError as exc:
            if exc.status != 409:
                log.warning("lease %s/%s: %s", ns, name, exc)
            # Keep leading only while the renew deadline allows; a 409 means someone else won.
            if exc.status == 409 or not self.is_leader(now):
                return self._set(None)
            return True

    def _expired(self, lease: LeaseView, now: datetime) -> bool:
        if not lease.holder:
            return True
        seen = (lease.holder, lease.resource_version)
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
            return False
        assert self._observed_at is not None
        return now - self._observed_at >= timedelta(
            seconds=lease.lease_duration_seconds or self.settings.lease_duration_seconds
        )

    async def run(self, clock: Callable[[], datetime], stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step(clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.retry_period_seconds)

    async def release(self, now: datetime) -> None:
        """Hand the lease back on shutdown (empty holder) so a peer need not wait for expiry."""
        if self._renewed_at is None:
            return
        ns, name = self.settings.lease_namespace, self.settings.lease_name
        try:
            lease = await self.kube.get_lease(ns, name)
            if lease and lease.holder == self.identity:
                spec = {**self._spec(now, lease.acquire_time, lease.transitions), "holderIdentity": ""}
                await self.kube.write_lease(ns, name, spec, lease.resource_version)
        except KubeError as exc:
            log.warning("lease release failed: %s", exc)
        self._set(None)
