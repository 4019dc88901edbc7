"""Per-bot rate limiter: sliding windows driven by a caller-supplied clock (pure, no sleeping inside)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from alerts.relay.config import RateLimit


class SlidingWindowLimiter:
    """At most ``count`` sends in any ``per_seconds`` window, for every configured limit at once.

    The sender records a send when its response (or timeout) arrives: with one request in flight per bot,
    the bot saw the request no later than that, so the bot's own window never counts more than ``count``.
    """

    def __init__(self, limits: Sequence[RateLimit]) -> None:
        self._limits = tuple(limits)
        self._longest = max((lim.per_seconds for lim in self._limits), default=0.0)
        self._sent: deque[float] = deque()
        self._blocked_until = 0.0

    @property
    def longest_window(self) -> float:
        return self._longest

    def window(self, index: int | None) -> float:
        """Length of the ``index``-th window, shortest first (clamped); the longest for None."""
        spans = sorted(lim.per_seconds for lim in self._limits)
        if not spans:
            return 0.0
        if index is None:
            return spans[-1]
        return spans[max(0, min(index, len(spans) - 1))]

    def delay(self, now: float) -> float:
        """Seconds to wait before the next send is allowed (0.0 = send now)."""
        wait = max(0.0, self._blocked_until - now)
        sent = list(self._sent)
        for lim in self._limits:
            if len(sent) >= lim.count:
                wait = max(wait, sent[-lim.count] + lim.per_seconds - now)
        return wait

    def record(self, now: float) -> None:
        """Count one send at ``now``."""
        self._sent.append(now)
        while self._sent and self._sent[0] <= now - self._longest:
            self._sent.popleft()

    def block(self, until: float) -> None:
        """The bot said "too many requests": send nothing before ``until``."""
        self._blocked_until = max(self._blocked_until, until)
