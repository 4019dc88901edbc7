"""Rendering core: a Notification -> per-alert text blocks (jinja2) -> parts packed within a bot's size limit.

Messages are data: each bot module (``wecom``, ``feishu``) assembles a JSON-ready dict from a ``Layout``
and says whether it fits. Human text comes from jinja2 templates whose ``{{ }}`` outputs are escaped for the
bot's markup, so label and annotation values cannot inject mentions, links or JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote
from zoneinfo import ZoneInfo

import jinja2
import jinja2.sandbox

from xpuwatch.alerts.relay.config import Channel, ConfigError, RateLimit
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.webhook import Alert, Notification, parse_payload

# Identity labels in display order (contract: device, slice and pod identity labels).
IDENTITY_LABELS = (
    "node",
    "vendor",
    "model",
    "device",
    "uuid",
    "slice_id",
    "profile",
    "slice_kind",
    "namespace",
    "pod",
    "container",
    "workload_kind",
    "owner",
)
_HIDDEN_LABELS = {"alertname", "severity", "category", "action"}
# Annotations shown first, in this order; every other annotation follows in the payload's order.
LEADING_ANNOTATIONS = ("summary", "description")
_LINK_ANNOTATIONS = {"runbook_url"}  # shown as a link, not as text
_SAFE_SCHEMES = ("http://", "https://")
# Control characters in label values would start new lines or confuse the client: each C0 control and DEL
# becomes its Unicode "control picture" (newline -> U+240A), C1 controls and line/paragraph separators U+FFFD.
_CONTROLS = {c: 0x2400 + c for c in range(0x20)} | {0x7F: 0x2421}
_CONTROLS |= {c: 0xFFFD for c in (*range(0x80, 0xA0), 0x2028, 0x2029)}
SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1}
_WORST_MARKER = " (99/99)"


class Raw(str):
    """Markup produced by the template itself (links, mentions): passed through unescaped."""


@dataclass(frozen=True)
class Markup:
    """A bot's markup dialect: how to escape user text, write a link, and which spans must never be cut."""

    escape: Callable[[str], str]
    link: Callable[[str, str], str]
    atomic: re.Pattern[str]  # spans a truncation must not cut (links, tags, entities)


@dataclass(frozen=True)
class Section:
    """A run of alerts of one status inside one part. ``total`` counts the whole notification."""

    status: str
    total: int
    blocks: tuple[str, ...]


@dataclass(frozen=True)
class Layout:
    """One part to assemble. ``marker`` is "" or " (i/n)"; ``overflow`` is "" or the summary line."""

    title: str
    status: str  # firing | resolved (firing if any alert of the notification fires)
    severity: str  # highest severity among firing alerts, "" if none
    sections: tuple[Section, ...]
    marker: str = ""
    overflow: str = ""
    mention: bool = False


@dataclass(frozen=True)
class OutMessage:
    """One outbound request body (unsigned) and what it is: ``part`` of ``parts`` or a follow-up."""

    body: dict[str, Any]
    part: int
    parts: int
    kind: str  # part | followup


class Bot(Protocol):
    """What the renderer and sender need from one bot platform (see wecom.py, feishu.py)."""

    @property
    def type(self) -> str: ...
    @property
    def markup(self) -> Markup: ...
    @property
    def default_templates(self) -> Mapping[str, str]: ...
    @property
    def default_limits(self) -> tuple[RateLimit, ...]: ...

    def check(self, channel: Channel) -> None: ...
    def url(self, channel: Channel, now: float) -> str: ...
    def assemble(self, layout: Layout, channel: Channel) -> dict[str, Any]: ...
    def fits(self, body: dict[str, Any]) -> bool: ...
    def followups(self, layout: Layout, channel: Channel) -> list[dict[str, Any]]: ...
    def serialise(self, body: dict[str, Any], channel: Channel, now: float) -> bytes: ...
    def classify(self, http_status: int, payload: bytes) -> Outcome: ...


@dataclass(frozen=True)
class Templates:
    """Compiled templates of one channel: ``title`` (plain text) and ``alert`` (bot markup)."""

    title: jinja2.Template
    alert: jinja2.Template
    fallback: bool = False


@dataclass
class RenderStats:
    """Counts a caller may export as metrics (render fallbacks)."""

    fallbacks: int = 0
    summarised: int = 0  # alerts replaced by the "N more alerts" line (incl. Alertmanager's truncatedAlerts)


def compile_templates(bot: Bot, channel: Channel, overrides: bool = True) -> Templates:
    """Compile the channel's templates (overrides over the bot defaults). Raises ConfigError on syntax errors."""
    sources = {**bot.default_templates, **(channel.templates if overrides else {})}
    key = (bot.type, sources["title"], sources["alert"], not overrides)
    if key not in _COMPILED:  # jinja2 compilation costs tens of ms: once per distinct source
        _COMPILED[key] = _compile(bot, channel, sources, not overrides)
    return _COMPILED[key]


_COMPILED: dict[tuple[str, str, str, bool], Templates] = {}


def _compile(bot: Bot, channel: Channel, sources: Mapping[str, str], fallback: bool) -> Templates:
    escape = bot.markup.escape

    def finalize(value: Any) -> str:
        if value is None:
            return ""
        return value if isinstance(value, Raw) else escape(str(value))

    # Operators' override templates run in jinja2's sandbox; the built-in ones are our code and skip its
    # per-attribute checks (a third of rendering time). Same undefined/finalize rules for both.
    env_class = (
        jinja2.Environment if fallback or not channel.templates else jinja2.sandbox.SandboxedEnvironment
    )
    markup_env = env_class(
        undefined=jinja2.StrictUndefined, finalize=finalize, autoescape=False, keep_trailing_newline=False
    )
    markup_env.globals["link"] = lambda text, url: Raw(safe_link(bot.markup, str(text), str(url or "")))
    text_env = env_class(undefined=jinja2.StrictUndefined, autoescape=False)

    def build(env: jinja2.Environment, key: str) -> jinja2.Template:
        try:
            return env.from_string(sources[key])
        except jinja2.TemplateSyntaxError as exc:
            origin = channel.template_origins.get(key)
            where = f"template_files.{key} ({origin})" if origin else f"templates.{key}"
            raise ConfigError(f"channels.{channel.name}.{where}: line {exc.lineno}: {exc.message}") from None

    return Templates(title=build(text_env, "title"), alert=build(markup_env, "alert"), fallback=fallback)


def safe_link(markup: Markup, text: str, url: str) -> str:
    """A link for http(s) URLs only; any other scheme (``javascript:``, ``data:``) is shown as plain text."""
    if not url:
        return ""
    if url.strip().lower().startswith(_SAFE_SCHEMES):
        return markup.link(text, url.strip())
    return markup.escape(f"{text}: {url}")


def neutralise(value: str) -> str:
    """Label text with control characters made visible and inert (see ``_CONTROLS``)."""
    return value if value.isprintable() else value.translate(_CONTROLS)


def silence_url(base: str, labels: Mapping[str, str]) -> str:
    """Alertmanager UI link pre-filled with a matcher per label: ``{base}/#/silences/new?filter={...}``."""
    if not base:
        return ""
    matchers = ",".join(f'{k}="{_matcher_value(v)}"' for k, v in sorted(labels.items()))
    return f"{base.rstrip('/')}/#/silences/new?filter={_quote('{' + matchers + '}')}"


# quote(s, safe="") for ASCII text in one str.translate (urllib's per-character loop was a fifth of rendering).
_QUOTE_ASCII = {
    c: f"%{c:02X}" for c in range(128) if not (chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_.-~"))
}


def _quote(text: str) -> str:
    return text.translate(_QUOTE_ASCII) if text.isascii() else quote(text, safe="")


def format_time(when: datetime | None, tz: ZoneInfo) -> str:
    """``2024-05-01 18:00:00 CST`` in the channel's time zone; "" for unknown."""
    return when.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z") if when else ""


def alert_context(alert: Alert, channel: Channel, am_url: str) -> dict[str, Any]:
    """Variables of the ``alert`` template (documented in docs/relay.md)."""
    raw_labels = alert.labels
    labels = {neutralise(k): neutralise(v) for k, v in raw_labels.items()}
    identity = [(k, labels[k]) for k in IDENTITY_LABELS if labels.get(k)]
    extra = [
        (k, v) for k, v in sorted(labels.items()) if k not in _HIDDEN_LABELS and k not in IDENTITY_LABELS
    ]
    ann = alert.annotations
    ordered = [k for k in LEADING_ANNOTATIONS if ann.get(k)]
    ordered += [k for k in ann if k not in LEADING_ANNOTATIONS and k not in _LINK_ANNOTATIONS and ann[k]]
    return {
        "status": alert.status,
        "alertname": labels.get("alertname", ""),
        "severity": labels.get("severity", ""),
        "category": labels.get("category", ""),
        "labels": dict(labels),
        "annotations": dict(ann),
        "annotation_list": [(k, ann[k]) for k in ordered],  # summary, description, then the rest in order
        "other_annotations": [(k, ann[k]) for k in ordered if k not in LEADING_ANNOTATIONS],
        "identity": " ".join(f"{k}={v}" for k, v in identity),
        "extra_labels": ", ".join(f"{k}={v}" for k, v in extra),
        "summary": ann.get("summary", ""),
        "description": ann.get("description", ""),
        "value": ann.get("value", ""),
        "runbook_url": ann.get("runbook_url", ""),
        "generator_url": alert.generator_url,
        "silence_url": silence_url(am_url, raw_labels) if alert.status == "firing" else "",
        "starts_at": format_time(alert.starts_at, channel.tz),
        "ends_at": format_time(alert.ends_at, channel.tz) if alert.status == "resolved" else "",
        "fingerprint": alert.fingerprint,
    }


def title_context(n: Notification) -> dict[str, Any]:
    """Variables of the ``title`` template."""
    name = neutralise(n.group_labels.get("alertname") or n.common_labels.get("alertname") or "alerts")
    others = [neutralise(v) for k, v in sorted(n.group_labels.items()) if k != "alertname"]
    return {
        "status": n.status,
        "firing": len(n.firing),
        "resolved": len(n.resolved),
        "alertname": name,
        "group": " ".join([name, *others]),
        "group_labels": dict(n.group_labels),
        "common_labels": dict(n.common_labels),
        "receiver": n.receiver,
    }


def part_budget(channel: Channel, bot: Bot, backlog: int) -> int:
    """Parts a new notification may use: ``max_parts``, reduced by the bot's backlog so that queued plus new
    messages stay within one window of the bot's longest rate limit (WeCom 20/min, Feishu 100/min); never
    below 1. What does not fit is summarised ("N more alerts") instead of queueing minutes of messages."""
    limits = channel.rate_limits or bot.default_limits
    window = max(limits, key=lambda lim: lim.per_seconds).count if limits else channel.max_parts
    return max(1, min(channel.max_parts, window - backlog))


def render(
    n: Notification,
    channel: Channel,
    bot: Bot,
    am_url: str,
    templates: Templates,
    stats: RenderStats | None = None,
    max_parts: int | None = None,
) -> list[OutMessage]:
    """Split one notification into messages that each fit the bot's limit; at most ``max_parts`` (default
    ``channel.max_parts``) parts, the rest summarised as "N more alerts"; follow-ups (e.g. WeCom mobile
    mentions) come last."""
    base = am_url or n.external_url
    if max_parts is not None:
        channel = replace(channel, max_parts=max_parts)
    try:
        return _render(n, channel, bot, base, templates, stats)
    except Exception:  # any failure of an override template: fall back to the built-in ones (counted)
        if templates.fallback:
            raise
        if stats is not None:
            stats.fallbacks += 1
        return _render(n, channel, bot, base, compile_templates(bot, channel, overrides=False), stats)


def _render(
    n: Notification,
    channel: Channel,
    bot: Bot,
    base: str,
    templates: Templates,
    stats: RenderStats | None = None,
) -> list[OutMessage]:
    title = " ".join(templates.title.render(title_context(n)).split())
    severity = max(
        (a.labels.get("severity", "") for a in n.firing), key=lambda s: SEVERITY_RANK.get(s, 0), default=""
    )
    mention = channel.mentions.wanted(a.labels.get("severity", "") for a in n.firing)
    units: list[tuple[str, str]] = []  # (status, block)
    for group in (n.firing, n.resolved):
        for alert in group:
            block = templates.alert.render(alert=alert_context(alert, channel, base)).strip()
            units.append((alert.status, block))
    totals = {"firing": len(n.firing), "resolved": len(n.resolved)}
    proto = Layout(title=title, status=n.status, severity=severity, sections=(), mention=mention)
    worst_overflow = overflow_line(len(units) + n.truncated_alerts, len(units), len(units), bot, base)

    def layout_of(chunk: Sequence[tuple[str, str]], marker: str, overflow: str) -> Layout:
        sections: list[Section] = []
        for status, block in chunk:
            if sections and sections[-1].status == status:
                sections[-1] = replace(sections[-1], blocks=(*sections[-1].blocks, block))
            else:
                sections.append(Section(status, totals[status], (block,)))
        return replace(proto, sections=tuple(sections), marker=marker, overflow=overflow)

    def fits(chunk: Sequence[tuple[str, str]]) -> bool:
        return bot.fits(bot.assemble(layout_of(chunk, _WORST_MARKER, worst_overflow), channel))

    parts: list[list[tuple[str, str]]] = []
    i = 0
    while i < len(units) and len(parts) < channel.max_parts:
        if not fits(units[i : i + 1]):
            status, block = units[i]
            parts.append([(status, _truncate(block, lambda b, s=status: fits([(s, b)]), bot))])  # type: ignore[misc]
            i += 1
            continue
        # Largest j with units[i:j] fitting: size grows with j, so gallop then bisect (O(log k) assemblies).
        lo, step = i + 1, 1
        while lo + step <= len(units) and fits(units[i : lo + step]):
            lo, step = lo + step, step * 2
        hi = min(len(units), lo + step - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(units[i:mid]):
                lo = mid
            else:
                hi = mid - 1
        parts.append(units[i:lo])
        i = lo
    rest = units[i:]
    if not parts:  # nothing fits at all: still tell the group something is happening
        parts = [[]]
    overflow = ""
    if rest or n.truncated_alerts:
        more_firing = sum(1 for s, _ in rest if s == "firing")
        overflow = overflow_line(
            len(rest) + n.truncated_alerts, more_firing, len(rest) - more_firing, bot, base
        )
        if stats is not None:
            stats.summarised += len(rest) + n.truncated_alerts
    total = len(parts)
    out = []
    for index, chunk in enumerate(parts, start=1):
        marker = f" ({index}/{total})" if total > 1 else ""
        layout = layout_of(chunk, marker, overflow if index == total else "")
        layout = replace(layout, mention=mention and index == 1)
        out.append(OutMessage(body=bot.assemble(layout, channel), part=index, parts=total, kind="part"))
    follow = bot.followups(replace(proto, sections=()), channel) if mention else []
    out.extend(OutMessage(body=b, part=0, parts=total, kind="followup") for b in follow)
    return out


def overflow_line(more: int, firing: int, resolved: int, bot: Bot, base: str) -> str:
    """The summary that replaces alerts beyond the part budget (or cut by Alertmanager's max_alerts)."""
    text = bot.markup.escape(f"… {more} more alerts ({firing} firing, {resolved} resolved not shown)")
    return f"{text} {bot.markup.link('Alertmanager', base)}" if base else text


def validate(bot: Bot, channel: Channel, samples: Sequence[dict[str, Any]], am_url: str = "") -> None:
    """Start-up check: the channel's templates compile and render every sample payload within limits.
    Raises ConfigError naming the channel and the failing sample."""
    bot.check(channel)
    templates = compile_templates(bot, channel)
    for i, doc in enumerate(samples):
        try:
            messages = _render(
                parse_payload(doc), channel, bot, am_url or "http://alertmanager.invalid", templates
            )
        except Exception as exc:
            origins = channel.template_origins
            where = ",".join(f"template_files.{k} ({v})" for k, v in origins.items()) or "templates"
            raise ConfigError(
                f"channels.{channel.name}.{where}: sample {i}: {type(exc).__name__}: {exc}"
            ) from None
        for m in messages:
            if m.kind == "part" and not bot.fits(m.body):
                raise ConfigError(f"channels.{channel.name}: sample {i} renders beyond the bot's size limit")


def _truncate(block: str, fits: Callable[[str], bool], bot: Bot) -> str:
    """Longest prefix of ``block`` (plus an ellipsis) that fits, cut between characters and outside links,
    tags and entities (Python str indices are code points, so no UTF-8 sequence is ever split)."""
    inside: set[int] = set()
    for m in bot.markup.atomic.finditer(block):
        inside.update(range(m.start() + 1, m.end()))
    cuts = [k for k in range(len(block) + 1) if k not in inside]
    lo, hi = 0, len(cuts) - 1
    suffix = bot.markup.escape(" …(truncated)")
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(block[: cuts[mid]] + suffix):
            lo = mid
        else:
            hi = mid - 1
    return block[: cuts[lo]] + suffix


def _matcher_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
