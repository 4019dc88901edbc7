"""Demo output: what the local stack does, as stamped lines on stdout (alerts, chat messages, decisions).

Sources: Prometheus' ``/api/v1/alerts`` (pending, firing, resolved), Alertmanager's ``/api/v2/alerts``
(inhibited), the stand-in bots (every message the relay delivers) and the remediation controller's
audit log (JSON lines, remediation/audit.py). The text builders are pure; the two pollers are the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from xpuwatch.deploy.standin_bots import BotMessage

MAX_LINE = 180  # characters of a message line shown; silence links run to a thousand
_FONT = re.compile(r"</?font[^>]*>")
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
Key = tuple[tuple[str, str], ...]


@dataclass
class Console:
    """Stamped lines on ``out``: ``HH:MM:SS  +SS.Ss  source  text`` (continuation lines indented), and
    when each source spoke first. ``first_hardware_alert``: seconds since start at which Prometheus
    first saw a hardware alert that went on to fire (its ``activeAt``)."""

    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    first: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    first_hardware_alert: float | None = None
    first_hardware_message: float | None = (
        None  # the first WeCom message of an alert, not a controller notice
    )
    on_line: Callable[[str], None] | None = None  # each line as printed: "source  head\n| rest..."

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def since_start(self, wall: float) -> float:
        return wall - self.started_wall

    def line(self, source: str, text: str) -> None:
        now, t = datetime.now(UTC), self.elapsed()
        self.first.setdefault(source, t)
        self.counts[source] = self.counts.get(source, 0) + 1
        head, *rest = text.splitlines() or [""]
        body = "".join(f"\n{'':>28}| {r}" for r in rest)
        # The terminal hung up (EIO) or the pipe closed: the narration is lost, the cleanup goes on.
        with contextlib.suppress(OSError):
            print(f"{now:%H:%M:%S} {t:+7.1f}s  {source:<12}{head}{body}", file=self.out, flush=True)
        if self.on_line is not None:
            self.on_line(f"{source:<12}{text}")


def clip(line: str, limit: int = MAX_LINE) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def readable(msg: BotMessage) -> str:
    """A bot message as the group would show it: WeCom colour tags dropped, Feishu entities decoded."""
    text = _FONT.sub("", msg.text) if msg.platform == "wecom" else html.unescape(msg.text)
    return "\n".join(clip(line) for line in text.splitlines())


def who(labels: Mapping[str, str]) -> str:
    """The card, slice and holder an alert is about, as short as the labels allow."""
    parts = []
    if labels.get("vendor") and labels.get("device"):
        parts.append(f"{labels['vendor']}/{labels['device']}")
    elif labels.get("model"):
        parts.append(labels["model"])
    if labels.get("slice_id"):
        parts.append(f"slice {labels['slice_id']}")
    if labels.get("namespace") and labels.get("pod"):
        parts.append(f"{labels['namespace']}/{labels['pod']}")
    return " ".join(parts) or labels.get("node") or labels.get("instance", "")


def describe_alert(labels: Mapping[str, str]) -> str:
    """``AlertName  severity/category  who  -> action`` for one alert's labels."""
    action = labels.get("action", "none")
    tail = f"  -> {action}" if action != "none" else ""
    return (
        f"{labels.get('alertname', '?')}  {labels.get('severity', '?')}/{labels.get('category', '?')}"
        f"  {who(labels)}{tail}"
    )


def describe_audit(rec: Mapping[str, Any]) -> str | None:
    """One remediation audit record as a line (None for records of other kinds)."""
    if rec.get("event") == "decision":
        verdict = f"allowed ({rec.get('mode')})" if rec.get("allowed") else f"refused ({rec.get('refusal')})"
        detail = rec.get("refusal_detail") or rec.get("reason") or ""
        return (
            f"decision {rec.get('action')} {rec.get('step')} {rec.get('target')} "
            f"[{rec.get('alertname')}]: {verdict}: {detail}"
        )
    if rec.get("event") == "step":
        return (
            f"{rec.get('mode')} {rec.get('action')} {rec.get('step')} -> {rec.get('result')}: "
            f"{rec.get('detail')}"
        )
    return None


def parse_time(text: str) -> float | None:
    """Unix seconds of an RFC 3339 time as Prometheus writes it (nanoseconds allowed); None if not one."""
    m = _RFC3339.match(text)
    if not m:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}").timestamp()


@dataclass
class AlertWatch:
    """State between polls: alert state per label set, Alertmanager fingerprints already told inhibited,
    and each alert's ``for`` duration (to say when a pending alert would fire)."""

    for_: Mapping[str, str]
    seen: dict[Key, str] = field(default_factory=dict)
    inhibited: set[str] = field(default_factory=set)

    def prometheus(self, alerts: list[dict[str, Any]], console: Console) -> None:
        now: dict[Key, str] = {}
        for a in alerts:
            labels, state = a["labels"], a["state"]
            key = tuple(sorted(labels.items()))
            now[key] = state
            if self.seen.get(key) == state:
                continue
            note = ""
            if state == "pending":
                note = f"  (fires if it lasts {self.for_.get(labels.get('alertname', ''), '?')})"
            elif labels.get("category") == "hardware" and console.first_hardware_alert is None:
                active = parse_time(str(a.get("activeAt", "")))
                if active is not None:
                    console.first_hardware_alert = console.since_start(active)
            console.line("alert", f"{state.upper():<10}{describe_alert(labels)}{note}")
        for key, state in self.seen.items():
            if key not in now:
                word = "RESOLVED" if state == "firing" else "CLEARED"
                console.line("alert", f"{word:<10}{describe_alert(dict(key))}")
        self.seen = now

    def alertmanager(self, alerts: list[dict[str, Any]], console: Console) -> None:
        for a in alerts:
            if a["status"].get("inhibitedBy") and a["fingerprint"] not in self.inhibited:
                self.inhibited.add(a["fingerprint"])
                console.line(
                    "alert",
                    f"{'INHIBITED':<10}{describe_alert(a['labels'])}  (a critical alert on the card speaks for it)",
                )


async def watch_alerts(
    session: aiohttp.ClientSession, prometheus: str, alertmanager: str, watch: AlertWatch, console: Console
) -> None:
    """Poll Prometheus and Alertmanager (base URLs) every second and print what changed."""
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
            async with session.get(f"{prometheus}/api/v1/alerts") as resp:
                watch.prometheus((await resp.json())["data"]["alerts"], console)
            async with session.get(f"{alertmanager}/api/v2/alerts") as resp:
                watch.alertmanager(await resp.json(), console)
        await asyncio.sleep(1.0)


async def tail_audit(path: Path, console: Console) -> None:
    """Print each remediation audit record (JSON lines) as the controller appends it."""
    offset, pending = 0, b""
    while True:
        with contextlib.suppress(FileNotFoundError):
            with path.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                text = describe_audit(rec) if isinstance(rec, dict) else None
                if text:
                    console.line("remediation", text)
        await asyncio.sleep(0.3)
