"""The controller's own Prometheus metrics (prometheus-client), on a registry passed in per instance."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from xpuwatch.exporter import catalog as C


class Telemetry:
    """Counters and gauges; names, labels and help from the catalog (``C.REMEDIATION_*``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry

        def counter(m: C.ServiceMetric) -> Counter:
            return Counter(m.declared, m.help, m.labels, registry=r)

        def gauge(m: C.ServiceMetric) -> Gauge:
            return Gauge(m.declared, m.help, m.labels, registry=r)

        self.actions = counter(C.REMEDIATION_ACTIONS)
        self.decisions = counter(C.REMEDIATION_DECISIONS)
        self.refusals = counter(C.REMEDIATION_REFUSALS)
        self.alerts = counter(C.REMEDIATION_ALERTS)
        self.webhook = counter(C.REMEDIATION_WEBHOOK)
        self.errors = counter(C.REMEDIATION_ERRORS)
        self.rechecks = counter(C.REMEDIATION_RECHECKS)
        self.leader = gauge(C.REMEDIATION_LEADER)
        self.held_age = gauge(C.REMEDIATION_HELD_AGE)
        self.max_hold = gauge(C.REMEDIATION_MAX_HOLD)
        self.disrupted = gauge(C.REMEDIATION_DISRUPTED)
