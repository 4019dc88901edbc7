"""Per-bot rate limiter: sliding windows driven by a caller-supplied clock (pure, no sleeping inside)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

from xpuwatch.alerts.relay.config import RateLimit


class SlidingWindowLimiter:
    """At most ``count`` sends in any ``per_seconds`` window, for every configured limit at once.

    Why this never draws a rate-limit answer (WeCom 45009, Feishu 9499/11232, DingTalk 130101), whatever the
    network does. The bot counts request k at the moment ``a_k`` it receives it; the relay only knows when it
    started the request (``s_k``) and when the answer arrived (``r_k``), and ``s_k <= a_k <= r_k``: the bot
    cannot count a request before it was sent, and it answers only after counting (the answer says whether
    it was counted). The sender keeps one request in flight per bot (a channel's messages must arrive in
    order), records ``r_k`` here (``record``), and starts request n only when ``delay`` is 0, that is at
    ``s_n >= r_(n-count) + per_seconds``. Hence ``a_n >= s_n >= r_(n-count) + per_seconds >= a_(n-count) +
    per_seconds``: any ``per_seconds`` window of the bot's clock holds at most ``count`` arrivals. Counting at
    request start plus a margin instead would be safe only if no request ever took longer than the margin to
    be counted, which nobody can promise for a WAN and a busy server; the answer time is the tightest bound
    that needs no assumption about one-way delays (tests/relay/test_burst.py holds a stand-in that counts as
    late as it can, just before answering, with varying server-side delays).

    What it costs: each window slot starts one round trip (plus the sender's own step) later than the bare
    limit, so a long burst takes about ``(per_seconds + round trip) / per_seconds`` of the floor: under 1.03x
    at Feishu's 1 s window for round trips under 30 ms, nothing measurable at the minute windows. Shrinking a
    window in a benchmark does not shrink the round trip, so shrunk runs show more (benchmarks/
    relay_throughput.py prints this "slot slack"). Only the ``count``-th previous send matters, never the
    previous answer: a slow send delays one slot of the next window, not every later send.

    After a restart the sender seeds the limiter with the send times the outbox kept (see ``Sender``).
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
        """Seconds to wait before the next send is allowed (0.0 = send now). ``now`` never goes back."""
        while self._sent and self._sent[0] <= now - self._longest:  # outside every window from now on
            self._sent.popleft()
        wait = max(0.0, self._blocked_until - now)
        sent = self._sent
        for lim in self._limits:
            if len(sent) >= lim.count:
                wait = max(wait, sent[-lim.count] + lim.per_seconds - now)
        return wait

    def record(self, at: float) -> None:
        """Count one send at ``at``. Kept sorted: a restart seeds the latest time a request of the previous run
        can arrive, which may lie after the sends that follow it, and ``delay`` needs the n-th latest."""
        bisect.insort(self._sent, at)

    def block(self, until: float) -> None:
        """The bot said "too many requests": send nothing before ``until``."""
        self._blocked_until = max(self._blocked_until, until)
