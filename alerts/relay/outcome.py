"""Delivery outcome: what one send attempt to a bot came to, as classified by the bot module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Result = Literal["ok", "retry", "rate_limited", "unconfirmed", "permanent"]


@dataclass(frozen=True)
class Outcome:
    """``result``: ok (delivered), retry (5xx, connection failed, busy: not shown, back off), rate_limited
    (wait out the bot's window), unconfirmed (the request went out and no answer came within the timeout: the
    bot may have shown it; resent a bounded number of times, see ``sender.MAX_UNCONFIRMED_SENDS``), permanent
    (bad key, signature, keyword, invalid mention: recorded, never retried).
    ``code`` is the bot's code (``errcode``/``code``) or ``http_<status>``/``timeout``/``connect``.
    ``window``: for rate_limited, the index (in the bot's documented limits, shortest window first) of the
    window the bot says was exceeded, so the sender waits that window and not a longer one; None = unknown
    (wait the longest)."""

    result: Result
    code: str
    reason: str = ""
    window: int | None = None
