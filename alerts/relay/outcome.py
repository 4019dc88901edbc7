"""Delivery outcome: what one send attempt to a bot came to, as classified by the bot module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Result = Literal["ok", "retry", "rate_limited", "permanent"]


@dataclass(frozen=True)
class Outcome:
    """``result``: ok (delivered), retry (5xx, timeout, busy: back off), rate_limited (wait out the bot's
    window), permanent (bad key, signature, keyword, invalid mention: recorded, never retried).
    ``code`` is the bot's code (``errcode``/``code``) or ``http_<status>``/``timeout``/``connect``."""

    result: Result
    code: str
    reason: str = ""
