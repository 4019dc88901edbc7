"""The relay and the remediation controller serve exactly the families the catalog declares for them
(``catalog.RELAY_METRICS``, ``catalog.REMEDIATION_METRICS``): names, types, labels and help. The meta alerts
and the operations dashboard read those names from the catalog, so this is what keeps them true."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from xpuwatch.alerts.relay.metrics import OutboxCollector, RelayMetrics
from xpuwatch.alerts.relay.outbox import Outbox
from xpuwatch.exporter import catalog as C
from xpuwatch.remediation.telemetry import Telemetry

Family = tuple[str, str, tuple[str, ...], str]


def served(registry: CollectorRegistry, children: dict[str, tuple[str, ...]]) -> set[Family]:
    """(exposed name, type, labels, help) of every family, labels read off one sample of each."""
    out = set()
    for fam in registry.collect():
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        samples = [s for s in fam.samples if s.name in (name, fam.name)]
        labels = tuple(samples[0].labels) if samples else children[name]
        out.add((name, fam.type, labels, fam.documentation))
    return out


def declared(metrics: tuple[C.ServiceMetric, ...]) -> set[Family]:
    return {(m.name, m.type, m.labels, m.help) for m in metrics}


def test_the_relay_serves_the_catalog_families(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    relay = RelayMetrics(reg)
    reg.register(OutboxCollector(Outbox(str(tmp_path / "outbox.sqlite")), channels=["ops"]))
    for counter in (
        relay.received,
        relay.alerts_received,
        relay.deduplicated,
        relay.enqueued,
        relay.delivered,
    ):
        counter.labels("ops").inc()
    relay.failed.labels("ops", "http_503").inc()
    relay.retries.labels("ops", "timeout").inc()
    relay.rejected.labels("unauthorized").inc()
    relay.fallbacks.labels("ops").inc()
    relay.summarised.labels("ops").inc()
    assert served(reg, {}) == declared(C.RELAY_METRICS)


def test_the_controller_serves_the_catalog_families() -> None:
    reg = CollectorRegistry()
    t = Telemetry(reg)
    t.actions.labels("drain", "ok", "dry-run").inc()
    t.decisions.labels("drain", "taint").inc()
    t.refusals.labels("cap").inc()
    t.alerts.labels("firing").inc()
    t.webhook.labels("200").inc()
    t.errors.labels("kube").inc()
    t.rechecks.labels("drain", "taint", "holds").inc()
    t.held_age.labels("n1", "drain").set(5)
    assert served(reg, {}) == declared(C.REMEDIATION_METRICS)


def test_service_metric_names_follow_the_conventions() -> None:
    for m in (*C.RELAY_METRICS, *C.REMEDIATION_METRICS):
        assert m.name.startswith("xpuwatch_") and m.name.endswith("_total") == (m.type == "counter"), m
        assert m.declared + ("_total" if m.type == "counter" else "") == m.name
    names = [m.name for m in (*C.RELAY_METRICS, *C.REMEDIATION_METRICS)]
    assert len(names) == len(set(names))
