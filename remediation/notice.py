"""Messages to people through the relay: an Alertmanager v4 payload posted to a relay channel URL.

The relay (``POST /alertmanager/<channel>``) accepts exactly what Alertmanager sends, so a notice is a
one-alert payload (alertname ``XpuwatchRemediationNotice``) whose annotations carry the text. Its
``category`` label picks the channel (``Settings.notify_url_for``): a drain for a hardware fault goes where
the hardware alert went (the on-call group), a reclaim or resize notice to the performance group.

Why straight to the relay and not to Alertmanager's ``/api/v2/alerts``: a notice is a one-off message, not a
state. Alertmanager would merge two notices with the same labels into one alert (same fingerprint) and hold
the second until ``repeat_interval``, send a RESOLVED for each when it expires, wait ``group_wait`` first,
and tell the reclaim only that it accepted the notice, not that the owner's group received it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import aiohttp

from .progress import stamp
from .settings import Settings

NOTICE_ALERTNAME = "XpuwatchRemediationNotice"
"""The alertname of the controller's notices (dry-run decisions, drains started), as the chats show it."""


def payload(labels: Mapping[str, str], summary: str, description: str, now: datetime) -> dict[str, object]:
    """Build the v4 webhook body (shape: prometheus.io/docs/alerting/latest/configuration/#webhook_config).
    ``labels`` override the defaults: callers pass the triggering alert's ``category`` (hardware or
    performance), which the relay's channels and silence links key on; ``performance`` when none."""
    lab = {
        "alertname": NOTICE_ALERTNAME,
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


async def deliver(
    session: aiohttp.ClientSession, settings: Settings, body: Mapping[str, object], timeout: float = 10.0
) -> bool:
    """POST a ``payload()`` body to the relay channel of its ``category`` (``settings.notify`` by
    category, else ``settings.notify_url``) with the relay's token; True on 2xx or when no URL is set."""
    labels = body.get("commonLabels")
    category = str(labels.get("category", "")) if isinstance(labels, Mapping) else ""
    return await send(
        session, settings.notify_url_for(category), body, timeout=timeout, token=settings.notify_token
    )
