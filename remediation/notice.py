"""Messages to people through the relay: an Alertmanager v4 payload posted to a relay channel URL.

The relay (``POST /alertmanager/<channel>``) accepts exactly what Alertmanager sends, so a notice is a
one-alert payload (alertname ``XpuwatchRemediationNotice``) whose annotations carry the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import aiohttp

from .progress import stamp


def payload(labels: Mapping[str, str], summary: str, description: str, now: datetime) -> dict[str, object]:
    """Build the v4 webhook body (shape: prometheus.io/docs/alerting/latest/configuration/#webhook_config).
    ``labels`` override the defaults: callers pass the triggering alert's ``category`` (hardware or
    performance), which the relay's channels and silence links key on; ``performance`` when none."""
    lab = {
        "alertname": "XpuwatchRemediationNotice",
        "category": "performance",
        "severity": "info",
        "action": "none",
        **labels,
    }
    alert = {
        "status": "firing",
        "labels": lab,
        "annotations": {"summary": summary, "description": description},
        "startsAt": stamp(now),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": "",
    }
    return {
        "version": "4",
        "groupKey": f"xpuwatch-remediation:{lab.get('owner', '')}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "xpuwatch-remediation",
        "groupLabels": {"alertname": lab["alertname"]},
        "commonLabels": lab,
        "commonAnnotations": alert["annotations"],
        "externalURL": "",
        "alerts": [alert],
    }


async def send(
    session: aiohttp.ClientSession,
    url: str | None,
    body: Mapping[str, object],
    timeout: float = 10.0,
    token: str | None = None,
) -> bool:
    """POST ``body`` (with ``Authorization: Bearer <token>`` when given, as the relay requires); True on
    2xx. No URL configured = nothing to send = True."""
    if not url:
        return True
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False
