"""Builders shared by the remediation tests: injected clock, Alertmanager payloads, settings, controller."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from aiohttp import web

from xpuwatch.remediation.alert import Alert, parse_payload
from xpuwatch.remediation.audit import Audit
from xpuwatch.remediation.controller import Controller
from xpuwatch.remediation.kube import Kube
from xpuwatch.remediation.settings import GuardSettings, LeaderSettings, Rule, Settings
from xpuwatch.remediation.telemetry import Telemetry

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class Clock:
    """Injected clock: tests move time with ``advance`` instead of sleeping."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def am_alert(
    status: str = "firing", fingerprint: str = "fp1", starts: datetime = T0, **labels: str
) -> dict[str, Any]:
    """One alert as Alertmanager 0.25 puts it in a webhook payload."""
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": "s", "description": "d"},
        "startsAt": starts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": fingerprint,
    }


def am_payload(*alerts: dict[str, Any], group_key: str = '{}:{alertname="X"}') -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": "remediate",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def alerts_of(*alerts: dict[str, Any]) -> list[Alert]:
    return parse_payload(json.dumps(am_payload(*alerts)).encode())


def drain_labels(node: str, uuid: str, **extra: str) -> dict[str, str]:
    return {
        "alertname": "AcceleratorUncorrectableECC",
        "category": "hardware",
        "severity": "critical",
        "action": "drain",
        "node": node,
        "vendor": "nvidia",
        "model": "NVIDIA A100-SXM4-80GB",
        "device": "0",
        "uuid": uuid,
        **extra,
    }


RULES = (
    Rule("drain"),
    Rule("reclaim", params={"platform": "jupyterhub"}),
    Rule("resize", params={"mode": "apply"}),
)


def make_settings(**sections: Any) -> Settings:
    """Settings for tests: dry-run OFF unless given, a cap of 5 nodes, the rules above."""
    guard = sections.pop(
        "guard", GuardSettings(dry_run=False, max_disrupted_nodes=5, max_disrupted_ratio=1.0)
    )
    return Settings(
        rules=sections.pop("rules", RULES),
        guard=guard,
        leader=sections.pop("leader", LeaderSettings(identity="replica-a", lease_namespace="xpuwatch")),
        **sections,
    )


def make_controller(
    settings: Settings, kube: Kube, session: aiohttp.ClientSession, clock: Clock, **kw: Any
) -> Controller:
    return Controller(settings, kube, session, clock, Audit(keep=True, path=os.devnull), Telemetry(), **kw)


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Run ``app`` on a free loopback port for the block; yields its base URL (``http://127.0.0.1:PORT``)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class PromStandIn:
    """Stands in for Prometheus' ``GET|POST /api/v1/query`` (prometheus.io/docs/prometheus/latest/querying/api/):
    answers a vector with one ``ALERTS`` series when the query names a node in ``firing``, else an empty one."""

    def __init__(self) -> None:
        self.firing: set[str] = set()
        self.queries: list[str] = []

    async def query(self, request: web.Request) -> web.Response:
        q = request.query.get("query", "") or str((await request.post()).get("query", ""))
        self.queries.append(q)
        hit = [n for n in self.firing if f'node="{n}"' in q]
        result = (
            [{"metric": {"alertname": "AcceleratorEccUncorrectable", "node": hit[0]}, "value": [0, "1"]}]
            if hit
            else []
        )
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})
