"""Progress of one action on one object, persisted as a JSON annotation so a restarted controller resumes.

Like kopf's annotation-persisted progress (kopf docs/idempotence.rst) and draino's
``draino.planet.com/conditions``: the object itself says what was done. Annotation keys:
``xpuwatch.io/<action>`` holds the running ``Progress``; ``xpuwatch.io/last-<action>`` the last finished
one (for cooldown). ``decode`` never raises: a garbled annotation reads as "no progress" plus an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

PREFIX = "xpuwatch.io/"
RECLAIM_LABEL = "xpuwatch.io/reclaim-pending"  # label so the tick can list objects with a running reclaim


def key_for(action: str) -> str:
    return f"{PREFIX}{action}"


def last_key_for(action: str) -> str:
    return f"{PREFIX}last-{action}"


def stamp(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unstamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class Progress:
    """``phase`` is action specific (e.g. drain: draining|drained; reclaim: notified|stopped; resize:
    evicting|configuring|failed). ``data`` holds JSON-able details (per-pod eviction states, deadlines)."""

    action: str
    alert_key: str
    phase: str
    started_at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)

    def with_(self, phase: str | None = None, **data: Any) -> Progress:
        merged = {**self.data, **data}
        return replace(self, phase=phase or self.phase, data=merged)

    def encode(self) -> str:
        return json.dumps(
            {
                "alert": self.alert_key,
                "phase": self.phase,
                "started": stamp(self.started_at),
                "data": self.data,
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def decode(action: str, text: str | None) -> Progress | None:
    """Parse an annotation value; None when absent or unreadable (never raises)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
        started = unstamp(doc["started"])
        if started is None or not isinstance(doc.get("data", {}), dict):
            return None
        return Progress(action, str(doc["alert"]), str(doc["phase"]), started, doc.get("data", {}))
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: an annotation of [[[[...
        return None


def last_time(annotations: Mapping[str, str], action: str) -> datetime | None:
    """When the last finished ``action`` on this object ended (``xpuwatch.io/last-<action>``)."""
    text = annotations.get(last_key_for(action))
    if not text:
        return None
    try:
        return unstamp(json.loads(text).get("finished"))
    except (ValueError, AttributeError, RecursionError):
        return None
