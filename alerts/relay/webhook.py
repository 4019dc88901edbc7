"""Inbound edge: parses an Alertmanager webhook body (version 4, also legacy 3) into frozen dataclasses.

Shape per Alertmanager 0.25 ``docs/configuration.md`` ``<webhook_config>`` and ``notify/webhook/webhook.go``
(see docs/relay.md). Optional fields (``fingerprint``, ``truncatedAlerts``, ``groupKey``) may be absent in
older or hand-made payloads; they are derived so the relay can still deduplicate.

Two paths, one answer. A body is decoded by msgspec into typed Structs (``_BodyIn``: types, literals and
required fields checked in C, no intermediate dicts for the body and its alerts); what msgspec cannot see
(nesting and integer size in members it skips) is bounded by ``alerts.payload.surely_within``, and lone
surrogates are refused by msgspec itself. A body refused anywhere on that path is parsed again by the
plain path (``alerts.payload.decode`` + ``parse_payload``), which gives the reason: the 400 messages, the
accepted bodies and the parsed values are those of the plain path (tests/relay/test_webhook.py checks
both paths agree), and only valid bodies are on the hot path.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from xpuwatch.alerts.payload import BodyError, decode, surely_within

Status = Literal["firing", "resolved"]
SUPPORTED_VERSIONS = ("4", "3")
MAX_TRUNCATED_ALERTS = 10**9
"""Largest ``truncatedAlerts`` accepted (Alertmanager: the alerts of a group beyond the receiver's
``max_alerts``). An Alertmanager holds every alert in memory at a few KiB each, so no group reaches 10^9;
above it the number is not one Alertmanager sent, and the "N more alerts" line it would print (a
4,000-digit number overflowed the summarised counter and made a part the bot refused) is refused (400)."""
_ZERO_TIME_YEAR = 1  # Go's zero time "0001-01-01T00:00:00Z": Alertmanager sets it as endsAt of firing alerts
_FRACTION = re.compile(r"(\.\d{6})\d+")
_STR_ONLY = frozenset((str,))
_ABSENT = object()
# json.dumps(x, separators=(",", ":")) builds a new encoder per call; one shared encoder gives the same text.
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


class PayloadError(ValueError):
    """The body is not a usable Alertmanager webhook payload; the message says why (sent back with 400)."""


@dataclass(frozen=True)
class Alert:
    """One alert of a group. ``ends_at`` is None for firing alerts (Alertmanager sends Go's zero time)."""

    status: Status
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime | None
    ends_at: datetime | None
    generator_url: str
    fingerprint: str


@dataclass(frozen=True)
class Notification:
    """One Alertmanager notification: every alert of one group (``group_key``) at one flush."""

    version: str
    receiver: str
    status: Status
    group_key: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    common_annotations: dict[str, str]
    external_url: str
    truncated_alerts: int
    alerts: tuple[Alert, ...]

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.status == "firing")

    @property
    def resolved(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.status == "resolved")

    def episode(self) -> str:
        """Which alert episodes this notification reports: a hash of the sorted (fingerprint, status,
        startsAt) triples. A re-fire after a resolve has a new ``startsAt`` (Alertmanager starts a new alert),
        so it is a new episode even with the same fingerprint; a retry of the same notification is not."""
        # isoformat() once per distinct startsAt: the alerts of one flush mostly share it, and parse_time hands
        # equal texts the same object (keyed by identity: equal instants in other offsets print otherwise).
        iso: dict[int, str] = {}
        triples = []
        for a in self.alerts:
            starts = a.starts_at
            text = "" if starts is None else iso.get(id(starts))
            if text is None:
                text = iso[id(starts)] = starts.isoformat()  # type: ignore[union-attr]
            triples.append(f"{a.fingerprint}:{a.status}:{text}")
        triples.sort()
        return hashlib.sha256(_COMPACT(triples).encode()).hexdigest()

    def digest(self, episode: str | None = None) -> str:
        """Identity of this notification for deduplication: groupKey + its episode (see ``episode``)."""
        raw = _COMPACT([self.group_key, episode or self.episode()])
        return hashlib.sha256(raw.encode()).hexdigest()


def parse_body(body: bytes) -> Notification:
    """Decode and validate a webhook body. Raises PayloadError with a human-readable reason (not JSON,
    nested too deeply, a lone surrogate: ``alerts.payload.decode``; then the payload's shape)."""
    notification = _typed(body)
    return parse_plain(body) if notification is None else notification


def parse_plain(body: bytes) -> Notification:
    """``parse_body`` without the typed path: the reference the typed path must agree with, and the
    explanation of every refusal. Raises PayloadError."""
    try:
        doc = decode(body)
    except BodyError as exc:
        raise PayloadError(str(exc)) from None
    return parse_payload(doc)


_ZERO_TIME = "0001-01-01T00:00:00Z"


class _AlertIn(msgspec.Struct, frozen=True, gc=False):
    """One alert of a webhook body as msgspec decodes it; defaults as ``_parse_alert`` applies them (an
    explicit null where ``_parse_alert`` takes one, too)."""

    status: Literal["firing", "resolved"]
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    starts_at: str | None = msgspec.field(default=None, name="startsAt")
    ends_at: str | None = msgspec.field(default=_ZERO_TIME, name="endsAt")
    generator_url: str = msgspec.field(default="", name="generatorURL")
    fingerprint: str | None = None


class _BodyIn(msgspec.Struct, frozen=True, gc=False):
    """A webhook body (version 4, or 3) as msgspec decodes it; members not named here are skipped."""

    version: Literal["4", "3"]
    alerts: list[_AlertIn]
    receiver: str = ""
    status: Literal["firing", "resolved"] | msgspec.UnsetType = msgspec.UNSET  # null is refused
    group_key: str | None = msgspec.field(default=None, name="groupKey")
    group_labels: dict[str, str] | None = msgspec.field(default=None, name="groupLabels")
    common_labels: dict[str, str] | None = msgspec.field(default=None, name="commonLabels")
    common_annotations: dict[str, str] | None = msgspec.field(default=None, name="commonAnnotations")
    external_url: str = msgspec.field(default="", name="externalURL")
    truncated_alerts: int = msgspec.field(default=0, name="truncatedAlerts")


_DECODE_BODY = msgspec.json.Decoder(_BodyIn).decode


def _typed(body: bytes) -> Notification | None:
    """The body through msgspec, or None where ``parse_plain`` must decide (and explain) instead: msgspec
    refused it, a check of ``parse_payload``'s fails, or ``surely_within`` cannot vouch for its bounds."""
    try:
        doc = _DECODE_BODY(body)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        return None
    raw_alerts = doc.alerts
    if not raw_alerts or not 0 <= doc.truncated_alerts <= MAX_TRUNCATED_ALERTS:
        return None
    maps = (doc.group_labels, doc.common_labels, doc.common_annotations)
    containers = 2 + len(raw_alerts) + sum(m is not None for m in maps)  # the body, ``alerts``, each alert
    try:
        alerts = []
        for a in raw_alerts:
            labels = a.labels
            if not labels:
                return None
            containers += 1 + (a.annotations is not None)
            starts, ends = a.starts_at, a.ends_at
            starts_at = parse_time(starts, "alerts[{}].startsAt") if starts else None
            ends_at = parse_time(ends, "alerts[{}].endsAt") if ends else None
            fingerprint = a.fingerprint
            if fingerprint is None:
                fingerprint = hashlib.sha256(_COMPACT(sorted(labels.items())).encode()).hexdigest()[:16]
            status = a.status
            alerts.append(
                Alert(
                    status=status,
                    labels=labels,
                    annotations={} if a.annotations is None else a.annotations,
                    starts_at=starts_at,
                    ends_at=None if status == "firing" else ends_at,
                    generator_url=a.generator_url,
                    fingerprint=fingerprint,
                )
            )
    except PayloadError:  # a time that is not RFC 3339
        return None
    # Skipped members hang below the body or an alert: at most 3 built containers above them.
    if not surely_within(body, containers, chain=3):
        return None
    group_labels = {} if doc.group_labels is None else doc.group_labels
    group_key = doc.group_key
    if group_key is None:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items()))
        group_key = "{}:{" + inner + "}"
    group_status = doc.status
    if group_status is msgspec.UNSET:
        group_status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    return Notification(
        version=doc.version,
        receiver=doc.receiver,
        status=group_status,
        group_key=group_key,
        group_labels=group_labels,
        common_labels={} if doc.common_labels is None else doc.common_labels,
        common_annotations={} if doc.common_annotations is None else doc.common_annotations,
        external_url=doc.external_url,
        truncated_alerts=doc.truncated_alerts,
        alerts=tuple(alerts),
    )


def parse_payload(doc: Any) -> Notification:
    """Validate a decoded webhook document. Raises PayloadError."""
    if not isinstance(doc, dict):
        raise PayloadError("body must be a JSON object")
    version = doc.get("version")
    if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
        raise PayloadError(f"unsupported version {version!r}; expected one of {list(SUPPORTED_VERSIONS)}")
    raw_alerts = doc.get("alerts")
    if not isinstance(raw_alerts, list) or not raw_alerts:
        raise PayloadError("'alerts' must be a non-empty list")
    alerts = tuple(_parse_alert(i, a) for i, a in enumerate(raw_alerts))
    group_labels = _str_map(doc.get("groupLabels", {}), "groupLabels")
    group_key = doc.get("groupKey")
    if group_key is None:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items()))
        group_key = "{}:{" + inner + "}"
    if not isinstance(group_key, str):
        raise PayloadError("'groupKey' must be a string")
    truncated = doc.get("truncatedAlerts", 0)
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise PayloadError("'truncatedAlerts' must be a non-negative integer")
    if truncated > MAX_TRUNCATED_ALERTS:
        raise PayloadError(f"'truncatedAlerts' must be at most {MAX_TRUNCATED_ALERTS}")
    status: Any = doc.get("status", _ABSENT)
    if status is _ABSENT:  # derived only when absent (an explicit null is refused below)
        status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    if status not in ("firing", "resolved"):
        raise PayloadError(f"'status' must be firing or resolved, got {status!r}")
    return Notification(
        version=version,
        receiver=_str(doc.get("receiver", ""), "receiver"),
        status=status,
        group_key=group_key,
        group_labels=group_labels,
        common_labels=_str_map(doc.get("commonLabels", {}), "commonLabels"),
        common_annotations=_str_map(doc.get("commonAnnotations", {}), "commonAnnotations"),
        external_url=_str(doc.get("externalURL", ""), "externalURL"),
        truncated_alerts=truncated,
        alerts=alerts,
    )


_TIMES: dict[str, datetime] = {}


def parse_time(value: str, where: str, index: int | None = None) -> datetime | None:
    """RFC 3339 (nanosecond fractions allowed) -> aware datetime; Go's zero time -> None. ``where`` names the
    field in the error; with ``index`` it is a template (``alerts[{}].startsAt``) filled in only on error."""
    if value.startswith("0001-01-01T00:00:00"):  # Go's zero time, on every firing alert
        return None
    parsed = _TIMES.get(value)
    if parsed is None:
        try:
            parsed = datetime.fromisoformat(_FRACTION.sub(r"\1", value.replace("Z", "+00:00")))
        except ValueError:
            raise PayloadError(f"{_place(where, index)}: not an RFC 3339 time: {value!r}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        if len(_TIMES) > 4096:  # the alerts of one group share startsAt values; keep the cache small
            _TIMES.clear()
        _TIMES[value] = parsed
    return None if parsed.year == _ZERO_TIME_YEAR else parsed


def _place(where: str, index: int | None) -> str:
    """The name of a field for an error message: ``where`` as is, or with ``index`` filled in. Messages
    are built only on error: a valid alert costs no string formatting."""
    return where if index is None else where.format(index)


def _parse_alert(index: int, raw: Any) -> Alert:
    if not isinstance(raw, dict):
        raise PayloadError(f"alerts[{index}] must be an object")
    status = raw.get("status")
    if status != "firing" and status != "resolved":
        raise PayloadError(f"alerts[{index}].status must be firing or resolved, got {status!r}")
    labels = _str_map(raw.get("labels"), "alerts[{}].labels", index)
    if not labels:
        raise PayloadError(f"alerts[{index}].labels must be a non-empty object")
    starts = raw.get("startsAt")
    ends = raw.get("endsAt", "0001-01-01T00:00:00Z")
    starts_at = (
        parse_time(_str(starts, "alerts[{}].startsAt", index), "alerts[{}].startsAt", index)
        if starts
        else None
    )
    ends_at = parse_time(_str(ends, "alerts[{}].endsAt", index), "alerts[{}].endsAt", index) if ends else None
    fingerprint = raw.get("fingerprint")
    if fingerprint is None:
        canon = _COMPACT(sorted(labels.items()))
        fingerprint = hashlib.sha256(canon.encode()).hexdigest()[:16]
    return Alert(
        status=status,
        labels=labels,
        annotations=_str_map(raw.get("annotations", {}), "alerts[{}].annotations", index),
        starts_at=starts_at,
        ends_at=None if status == "firing" else ends_at,
        generator_url=_str(raw.get("generatorURL", ""), "alerts[{}].generatorURL", index),
        fingerprint=_str(fingerprint, "alerts[{}].fingerprint", index),
    )


def _str(value: Any, where: str, index: int | None = None) -> str:
    if type(value) is not str and not isinstance(value, str):
        raise PayloadError(f"{_place(where, index)} must be a string")
    return value


def _str_map(value: Any, where: str, index: int | None = None) -> dict[str, str]:
    if value is None:
        value = {}
    # Keys and values checked by type at C speed (a set of the types seen), not one by one in Python.
    if not isinstance(value, dict) or not _STR_ONLY.issuperset(map(type, value.values())):
        raise PayloadError(f"{_place(where, index)} must be an object of string values")
    if not _STR_ONLY.issuperset(map(type, value)):  # keys: always str from JSON, checked for dict callers
        raise PayloadError(f"{_place(where, index)} must be an object of string values")
    return value
