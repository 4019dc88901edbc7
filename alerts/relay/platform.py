"""What the three chat platforms share: mention settings checked against a per-bot table, bodies sent as
compact UTF-8 JSON and budgeted in bytes, and the first reading of a bot's answer.

Each bot module (wecom, feishu, dingtalk) keeps only what differs: its mention kinds, its size limit, its
error codes and its markup. The facts behind each table entry are cited in that bot module's docstring.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.relay.config import Channel, ConfigError
from xpuwatch.alerts.relay.outcome import Outcome

MENTION_FIELDS = ("users", "mobiles", "open_ids", "user_ids")
"""The ``mentions`` keys of a channel that name people (``all`` is a switch every platform has)."""

PHONE = re.compile(r"^\+?[0-9][0-9-]{4,19}$")
"""A mobile number as WeCom and DingTalk take it: digits, an optional leading +, dashes."""


@dataclass(frozen=True)
class MentionKind:
    """One mention key a platform accepts: ``field`` of ``Mentions``, each value matching ``pattern`` (or
    one of ``also``, literal values the platform gives a meaning), else refused as not ``what``."""

    field: str
    pattern: re.Pattern[str]
    what: str
    also: tuple[str, ...] = ()


def check_mentions(channel: Channel, platform: str, kinds: tuple[MentionKind, ...]) -> None:
    """Refuse mention keys ``platform`` has no use for and values it would not highlight. Raises ConfigError
    naming the key (``channels.<name>.mentions.<field>``)."""
    m = channel.mentions
    accepted = [k.field for k in kinds]
    foreign = [f for f in MENTION_FIELDS if f not in accepted and getattr(m, f)]
    if foreign:
        raise ConfigError(
            f"channels.{channel.name}.mentions: {'/'.join(foreign)} mean nothing to {platform}; "
            f"{platform} mentions by {' or '.join(accepted)}"
        )
    for kind in kinds:
        for value in getattr(m, kind.field):
            if value not in kind.also and not kind.pattern.match(value):
                raise ConfigError(
                    f"channels.{channel.name}.mentions.{kind.field}: {value!r} is not {kind.what}"
                )


def dumps(body: dict[str, Any]) -> bytes:
    """The exact bytes sent: compact JSON, UTF-8 (no \\u escapes, which would count 6 bytes a character
    against the platforms' byte limits)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def within(text: str | bytes, limit: int) -> bool:
    """``text`` is at most ``limit`` bytes in UTF-8 (the platforms count bytes, not characters)."""
    return len(text.encode() if isinstance(text, str) else text) <= limit


def read_answer(
    http_status: int,
    payload: bytes,
    code_of: Callable[[Any], tuple[int, str]],
    readable_statuses: tuple[int, ...] = (200,),
    http_429_window: int | None = None,
) -> Outcome | tuple[int, str]:
    """The part of classifying an answer every platform shares: HTTP 429 is a rate limit (``window``: which
    of the bot's limits it was, None when unknown), 5xx a retry, an answer whose JSON ``code_of`` cannot
    read a retry when the status is one the platform answers errors with (``readable_statuses``: a proxy's
    or a truncated answer) and permanent otherwise, code 0 ok. Otherwise ``(code, message)`` for the bot's
    own table."""
    if http_status == 429:
        return Outcome("rate_limited", "http_429", "HTTP 429", window=http_429_window)
    if http_status >= 500:
        return Outcome("retry", f"http_{http_status}", f"HTTP {http_status}")
    try:
        code, msg = code_of(json.loads(payload))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # [[[[... from a proxy
        text = payload[:200].decode(errors="replace")
        if http_status not in readable_statuses:
            return Outcome("permanent", f"http_{http_status}", text)
        return Outcome("retry", "bad_response", text)
    if code == 0:
        return Outcome("ok", "0", msg)
    return code, msg
