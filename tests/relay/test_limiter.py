"""The sliding-window limiter on a hand-driven clock: documented bot limits, no real waiting."""

from __future__ import annotations

from xpuwatch.alerts.relay import feishu, wecom
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.relay.limiter import SlidingWindowLimiter


def drive(limiter: SlidingWindowLimiter, sends: int) -> list[float]:
    """Send as fast as the limiter allows on a virtual clock; returns the send times."""
    now, times = 0.0, []
    while len(times) < sends:
        wait = limiter.delay(now)
        if wait > 0:
            now += wait
            continue
        limiter.record(now)
        times.append(now)
    return times


def max_in_window(times: list[float], window: float) -> int:
    return max(sum(1 for t in times if start <= t < start + window) for start in times)


def test_wecom_20_per_minute():
    times = drive(SlidingWindowLimiter(wecom.LIMITS), 61)
    assert times[:20] == [0.0] * 20
    assert times[20] == 60.0 and times[40] == 120.0 and times[60] == 180.0
    assert max_in_window(times, 60.0) == 20


def test_feishu_5_per_second_and_100_per_minute():
    times = drive(SlidingWindowLimiter(feishu.LIMITS), 201)
    assert times[:5] == [0.0] * 5 and times[5] == 1.0
    assert times[99] == 19.0 and times[100] == 60.0
    assert max_in_window(times, 1.0) == 5
    assert max_in_window(times, 60.0) == 100


def test_block_after_rate_limit_answer():
    lim = SlidingWindowLimiter(wecom.LIMITS)
    lim.record(10.0)
    lim.block(10.0 + lim.longest_window)
    assert lim.delay(10.0) == 60.0
    assert lim.delay(70.0) == 0.0


def test_old_sends_are_forgotten():
    lim = SlidingWindowLimiter(wecom.LIMITS)
    for i in range(20):
        lim.record(float(i))
    assert lim.delay(20.0) == 40.0
    lim.record(1000.0)
    assert lim.delay(1000.0) == 0.0


def test_a_seeded_arrival_bound_after_later_sends_keeps_the_window_exact():
    """A restart seeds the latest time the previous run's last request can reach the bot (10.0), which lies
    after this run's first answers (9.0, 9.5). With 2 per second, the next send must wait for the 2nd latest
    count, 9.5 (so 10.5), not for the 2nd in arrival order, 9.0: a send at 10.0 could meet both 9.5 and a
    late 10.0 in the bot's window."""
    lim = SlidingWindowLimiter((RateLimit(2, 1.0),))
    lim.record(10.0)
    lim.record(9.0)
    lim.record(9.5)
    assert lim.delay(9.5) == 1.0
    assert lim.delay(11.0) == 0.0  # every count has left the window (10.0 is not in (10.0, 11.0])
