"""Holders of a device from the exporter's ``accelerator_allocated`` series, via the Prometheus HTTP API.

A device series carries pod labels only when exactly ONE container holds the device (cross-team
contract), so an alert on a shared device (HAMi, time-slicing) names no pod; its holders are the
``accelerator_allocated{node,uuid,namespace,pod,...} == 1`` series. API: ``GET /api/v1/query``
(prometheus.io/docs/prometheus/latest/querying/api/), answer ``{"status":"success","data":
{"resultType":"vector","result":[{"metric":{...},"value":[t,"1"]}]}}``. Errors: ``AllocationError``.
"""

from __future__ import annotations

import aiohttp

from xpuwatch.alerts.promapi import PromError
from xpuwatch.exporter.catalog import ALLOCATED
from xpuwatch.remediation.recheck import client


class AllocationError(Exception):
    """Prometheus could not be asked or answered something unusable."""


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def query(node: str, uuid: str) -> str:
    """PromQL for the holders of one device (values are escaped as PromQL string literals)."""
    return f'{ALLOCATED}{{node="{_quote(node)}",uuid="{_quote(uuid)}"}} == 1'


async def holders_of(
    session: aiohttp.ClientSession, prometheus_url: str, node: str, uuid: str, timeout: float = 10.0
) -> list[str]:
    """``["namespace/pod", ...]`` holding ``uuid`` on ``node``, sorted and de-duplicated."""
    try:
        result = await client(prometheus_url, timeout).ainstant(session, query(node, uuid))
    except PromError as exc:
        raise AllocationError(str(exc)) from None
    return sorted(
        {
            f"{s.labels['namespace']}/{s.labels['pod']}"
            for s in result
            if s.labels.get("namespace") and s.labels.get("pod")
        }
    )
