"""The relay's own Prometheus metrics, in a private registry; queue depth and age are read from the outbox."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from xpuwatch.alerts.relay.outbox import Outbox, QueueStats
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.catalog import ServiceMetric


class RelayMetrics:
    """Counters the server and sender increment; names, labels and help from the catalog (``C.RELAY_*``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._accepted: dict[str, tuple[Counter, Counter]] = {}
        r = self.registry

        def counter(m: ServiceMetric) -> Counter:
            return Counter(m.declared, m.help, m.labels, registry=r)

        self.received = counter(C.RELAY_RECEIVED)
        self.alerts_received = counter(C.RELAY_ALERTS_RECEIVED)
        self.deduplicated = counter(C.RELAY_DEDUPLICATED)
        self.enqueued = counter(C.RELAY_ENQUEUED)
        self.delivered = counter(C.RELAY_DELIVERED)
        self.failed = counter(C.RELAY_FAILED)
        self.retries = counter(C.RELAY_RETRIES)
        self.rejected = counter(C.RELAY_REJECTED)
        self.fallbacks = counter(C.RELAY_FALLBACKS)
        self.summarised = counter(C.RELAY_SUMMARISED)
        self.ingest_commits = counter(C.RELAY_INGEST_COMMITS)
        self.outbox_errors = counter(C.RELAY_OUTBOX_ERRORS)

    def accepted(self, channel: str) -> tuple[Counter, Counter]:
        """The ``received`` and ``alerts_received`` children of ``channel``, looked up once per channel (the
        relay counts every accepted webhook)."""
        children = self._accepted.get(channel)
        if children is None:
            children = self._accepted[channel] = (
                self.received.labels(channel),
                self.alerts_received.labels(channel),
            )
        return children

    def prime(self, channels: Iterable[str]) -> None:
        """Export zeros for every configured channel, so rate() and alerts see the series from the start."""
        for ch in channels:
            for c in (
                self.received,
                self.alerts_received,
                self.deduplicated,
                self.enqueued,
                self.delivered,
                self.fallbacks,
                self.summarised,
            ):
                c.labels(ch)


class OutboxCollector(Collector):
    """Queue depth and oldest pending age per channel, read from the outbox at scrape time."""

    def __init__(
        self, outbox: Outbox, channels: Iterable[str] = (), wall: Callable[[], float] = time.time
    ) -> None:
        self._outbox = outbox
        self._channels = tuple(channels)  # always exported, 0 when the outbox has nothing for them
        self._wall = wall

    def collect(self) -> Iterator[Metric]:
        depth, age, up = (
            GaugeMetricFamily(m.name, m.help, labels=m.labels)
            for m in (C.RELAY_QUEUE_DEPTH, C.RELAY_OLDEST_AGE, C.RELAY_OUTBOX_UP)
        )
        now = self._wall()
        try:
            stats = self._outbox.stats()
        except sqlite3.Error:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        known = {s.channel for s in stats}
        stats += [QueueStats(c, 0, None, 0, 0) for c in self._channels if c not in known]
        for s in sorted(stats, key=lambda s: s.channel):
            depth.add_metric([s.channel], s.pending)
            age.add_metric([s.channel], max(0.0, now - s.oldest_enqueued_at) if s.oldest_enqueued_at else 0.0)
        yield up
        yield depth
        yield age
