"""Alertmanager webhook (version 4) payloads parsed at the edge into frozen ``Alert`` records.

Payload shape: prometheus.io/docs/alerting/latest/configuration/#webhook_config (AM 0.25
``notify/webhook/webhook.go``). State is read from each alert's ``status``, never from ``endsAt`` (AM
zeroes ``endsAt`` of firing alerts in ``flush``). ``parse_payload`` raises ``PayloadError`` whose message
is safe to return to the sender as the 400 reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from xpuwatch.alerts.payload import BodyError, decode


class PayloadError(ValueError):
    """The body is not a version-4 Alertmanager webhook payload; the message says which part."""


@dataclass(frozen=True)
class Alert:
    """One alert of a notification. ``labels``/``annotations`` are plain dicts treated as read-only.
    ``key`` identifies one firing episode (fingerprint + startsAt): Alertmanager repeats and re-sends
    carry the same key, a new episode after resolution gets a new one."""

    status: Literal["firing", "resolved"]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    fingerprint: str
    group_key: str = ""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def action(self) -> str:
        return self.labels.get("action", "none")

    @property
    def key(self) -> str:
        return f"{self.fingerprint}@{self.starts_at.strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def label(self, name: str) -> str:
        return self.labels.get(name, "")


def parse_time(value: Any, where: str) -> datetime:
    """RFC 3339 timestamp (Go's ``time.Time`` JSON, nanoseconds allowed) to an aware UTC datetime."""
    if not isinstance(value, str) or not value:
        raise PayloadError(f"{where}: expected an RFC 3339 timestamp")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # Go emits up to 9 fractional digits; Python's fromisoformat takes at most 6.
    if "." in text:
        head, _, rest = text.partition(".")
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        text = f"{head}.{(digits + '000000')[:6]}{rest}"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise PayloadError(f"{where}: expected an RFC 3339 timestamp, got {value[:40]!r}") from None
    if dt.tzinfo is None:
        raise PayloadError(f"{where}: timestamp without a time zone")
    return dt.astimezone(UTC)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise PayloadError(f"{where}: expected an object of strings")
    return dict(value)


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """Stand-in fingerprint when an old Alertmanager omits one (before 0.19): a hash of the label set."""
    text = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_payload(body: bytes) -> list[Alert]:
    """Parse one webhook body. Shape errors raise ``PayloadError``; an empty ``alerts`` list is valid."""
    try:
        doc = decode(body)  # shared with the relay: bounded nesting, no lone surrogates
    except BodyError as exc:
        raise PayloadError(str(exc)) from None
    if not isinstance(doc, dict):
        raise PayloadError("body: expected a JSON object")
    if doc.get("version") != "4":
        raise PayloadError(f'version: expected "4", got {doc.get("version")!r:.20}')
    group_key = doc.get("groupKey", "")
    if not isinstance(group_key, str):
        raise PayloadError("groupKey: expected a string")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("alerts: expected a list")
    out = []
    for i, a in enumerate(alerts):
        where = f"alerts[{i}]"
        if not isinstance(a, dict):
            raise PayloadError(f"{where}: expected an object")
        status = a.get("status")
        if status not in ("firing", "resolved"):
            raise PayloadError(f"{where}.status: expected firing or resolved")
        labels = _str_map(a.get("labels"), f"{where}.labels")
        fp = a.get("fingerprint") or fingerprint_of(labels)
        if not isinstance(fp, str):
            raise PayloadError(f"{where}.fingerprint: expected a string")
        out.append(
            Alert(
                status=status,
                labels=labels,
                annotations=_str_map(a.get("annotations"), f"{where}.annotations"),
                starts_at=parse_time(a.get("startsAt"), f"{where}.startsAt"),
                fingerprint=fp,
                group_key=group_key,
            )
        )
    return out


def now_utc() -> datetime:
    """The real clock, for production wiring only; everything else takes ``now`` as an argument."""
    return datetime.now(UTC)
