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

RECEIVED = "xpuwatch_relay_notifications_received_total"
ALERTS_RECEIVED = "xpuwatch_relay_alerts_received_total"
DEDUPLICATED = "xpuwatch_relay_notifications_deduplicated_total"
ENQUEUED = "xpuwatch_relay_messages_enqueued_total"
DELIVERED = "xpuwatch_relay_messages_delivered_total"
FAILED = "xpuwatch_relay_messages_failed_total"
RETRIES = "xpuwatch_relay_send_retries_total"
REJECTED = "xpuwatch_relay_requests_rejected_total"
FALLBACKS = "xpuwatch_relay_render_fallbacks_total"
SUMMARISED = "xpuwatch_relay_alerts_summarised_total"
QUEUE_DEPTH = "xpuwatch_relay_queue_depth"
OUTBOX_ERRORS = "xpuwatch_relay_outbox_errors_total"
OLDEST_AGE = "xpuwatch_relay_oldest_pending_age_seconds"
OUTBOX_UP = "xpuwatch_relay_outbox_up"
INGEST_COMMITS = "xpuwatch_relay_ingest_commits_total"


class RelayMetrics:
    """Counters the server and sender increment. Names end in _total without the suffix prometheus-client adds."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._accepted: dict[str, tuple[Counter, Counter]] = {}
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(name.removesuffix("_total"), doc, labels, registry=r)

        self.received = counter(
            RECEIVED, "Alertmanager notifications accepted into the outbox.", ("channel",)
        )
        self.alerts_received = counter(ALERTS_RECEIVED, "Alerts in accepted notifications.", ("channel",))
        self.deduplicated = counter(
            DEDUPLICATED,
            "Notifications repeating one seen within the dedup window (nothing sent).",
            ("channel",),
        )
        self.enqueued = counter(
            ENQUEUED, "Messages (parts and follow-ups) stored for delivery.", ("channel",)
        )
        self.delivered = counter(DELIVERED, "Messages the bot accepted (errcode/code 0).", ("channel",))
        self.failed = counter(
            FAILED,
            "Messages given up, by reason (bot code, http_<status>, expired, unconfirmed, channel_removed,"
            " render_failed).",
            ("channel", "reason"),
        )
        self.retries = counter(
            RETRIES,
            "Send attempts to retry later, by reason (rate limit code, http_<status>, timeout).",
            ("channel", "reason"),
        )
        self.rejected = counter(
            REJECTED,
            "Inbound requests refused, by reason (unauthorized, too_large, malformed, unknown_channel,"
            " store_failed, render_failed, body_timeout).",
            ("reason",),
        )
        self.fallbacks = counter(
            FALLBACKS,
            "Notifications rendered with the built-in templates after a template override failed.",
            ("channel",),
        )
        self.summarised = counter(
            SUMMARISED, "Alerts summarised as 'N more alerts' instead of listed.", ("channel",)
        )
        self.ingest_commits = Counter(
            INGEST_COMMITS.removesuffix("_total"),
            "Outbox transactions that stored incoming notifications (committed or failed); concurrent webhooks"
            " share one (group commit), so received notifications / commits is the mean batch.",
            registry=r,
        )
        self.outbox_errors = Counter(
            OUTBOX_ERRORS.removesuffix("_total"),
            "Outbox reads or writes that failed in the sender (disk full, corrupt pages, I/O errors).",
            registry=r,
        )

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
        depth = GaugeMetricFamily(QUEUE_DEPTH, "Messages waiting in the outbox.", labels=["channel"])
        age = GaugeMetricFamily(
            OLDEST_AGE, "Age of the oldest pending message (0 when none), seconds.", labels=["channel"]
        )
        up = GaugeMetricFamily(OUTBOX_UP, "1 if the outbox could be read at this scrape, else 0.")
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
