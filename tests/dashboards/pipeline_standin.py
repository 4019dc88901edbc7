"""Stand-in for the relay's and the remediation controller's /metrics endpoints (Prometheus exposition).

It stands for ``xpuwatch.alerts.relay.metrics.RelayMetrics`` + ``OutboxCollector`` and
``xpuwatch.remediation.telemetry.Telemetry`` (prometheus-client, text exposition format 0.0.4): it serves
exactly the families the catalog declares for them (``catalog.RELAY_METRICS``, ``REMEDIATION_METRICS``, which
those services declare from; tests/exporter/test_service_metrics.py checks that), as a relay and a
controller in dry-run would after handling a few alerts, so the Operations panels can be checked against a
real Prometheus scraping real exposition without running both services.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from xpuwatch.exporter.catalog import RELAY_METRICS, REMEDIATION_METRICS

# Label values a relay and a dry-run controller report (channels: contract; results/modes: remediation).
LABEL_VALUES = {
    "channel": "oncall-wecom",
    "reason": "http_503",
    "action": "drain",
    "result": "ok",
    "mode": "dry-run",
    "step": "taint",
    "status": "firing",
    "code": "200",
    "component": "kube",
    "node": "gpu-node-1",
}


def registry() -> CollectorRegistry:
    """Every family of both services with one child: counters at 3, gauges at 1."""
    reg = CollectorRegistry()
    for m in (*RELAY_METRICS, *REMEDIATION_METRICS):
        values = [LABEL_VALUES[label] for label in m.labels]
        if m.type == "counter":
            counter = Counter(m.name.removesuffix("_total"), m.name, m.labels, registry=reg)
            (counter.labels(*values) if values else counter).inc(3)
        else:
            gauge = Gauge(m.name, m.name, m.labels, registry=reg)
            (gauge.labels(*values) if values else gauge).set(1)
    return reg


@contextmanager
def serve() -> Iterator[int]:
    """Serve the stand-in on 127.0.0.1 at a free port; yields the port."""
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry())
    assert isinstance(server, WSGIServer)
    try:
        yield int(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
