"""Delivery workers: one per bot, taking the oldest pending outbox message, sending it under the bot's rate
limits, and recording delivered / retry-later / permanently failed. Clocks and sleep are injected."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from alerts.relay.config import Channel, Retry
from alerts.relay.limiter import SlidingWindowLimiter
from alerts.relay.metrics import RelayMetrics
from alerts.relay.outbox import Outbox, Pending
from alerts.relay.outcome import Outcome
from alerts.relay.render import Bot

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]


def bot_id(channel: Channel) -> str:
    """Channels posting to the same webhook URL share one bot: one queue and one rate limiter."""
    return hashlib.sha256(channel.webhook_url.encode()).hexdigest()[:16]


def backoff(attempts: int, retry: Retry) -> float:
    """Seconds before retry number ``attempts`` (1-based) of a transient failure."""
    return min(retry.max_seconds, retry.initial_seconds * retry.multiplier ** max(0, attempts - 1))


class Sender:
    """Runs one delivery loop per bot. ``clock`` is monotonic (rate limits), ``wall`` is Unix time (outbox)."""

    def __init__(
        self,
        outbox: Outbox,
        channels: Mapping[str, Channel],
        bots: Mapping[str, Bot],
        metrics: RelayMetrics,
        retry: Retry,
        request_timeout: float,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._outbox = outbox
        self._channels = dict(channels)
        self._bots = bots
        self._metrics = metrics
        self._retry = retry
        self._timeout = request_timeout
        self._max_age = max_age
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._wake: dict[str, asyncio.Event] = {}
        self._limiters: dict[str, SlidingWindowLimiter] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._retention = max(7 * 86400.0, 2 * max_age)
        for ch in self._channels.values():
            bid = bot_id(ch)
            if bid not in self._limiters:
                self._limiters[bid] = SlidingWindowLimiter(ch.rate_limits or bots[ch.type].default_limits)

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        for ch in self._channels.values():
            await asyncio.to_thread(self._outbox.rebind, ch.name, bot_id(ch))
        bots = set(self._limiters)
        for bid, _channel in await asyncio.to_thread(self._outbox.pending_bots):
            bots.add(bid)  # pending for a bot no longer configured: its loop records channel_removed
        for bid in sorted(bots):
            self._wake[bid] = asyncio.Event()
            self._wake[bid].set()
            self._tasks.append(asyncio.create_task(self._loop(bid), name=f"relay-sender-{bid}"))
        self._tasks.append(asyncio.create_task(self._prune(), name="relay-outbox-prune"))

    async def _prune(self) -> None:
        """Hourly: forget finished messages older than the retention (7 days, or twice the delivery age)."""
        while True:
            try:
                removed = await asyncio.to_thread(self._outbox.prune, self._wall() - self._retention)
                if removed:
                    log.info("outbox: pruned %d finished rows", removed)
            except Exception:
                log.exception("outbox prune")
            await asyncio.sleep(3600.0)  # housekeeping runs on real time, not the injected delivery clock

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()

    def notify(self, bid: str) -> None:
        """New messages were stored for ``bid``."""
        event = self._wake.get(bid)
        if event is not None:
            event.set()

    async def _loop(self, bid: str) -> None:
        limiter = self._limiters.get(bid) or SlidingWindowLimiter(())
        wake = self._wake[bid]
        while True:
            try:
                msg = await asyncio.to_thread(self._outbox.next_pending, bid)
                if msg is None:
                    wake.clear()
                    msg = await asyncio.to_thread(self._outbox.next_pending, bid)
                    if msg is None:
                        await wake.wait()
                        continue
                wait = max(msg.next_attempt_at - self._wall(), limiter.delay(self._clock()))
                if wait > 0:
                    await self._sleep(wait)
                    continue
                await self._deliver(msg, limiter)
            except asyncio.CancelledError:
                raise
            except Exception:  # a broken outbox or bug must not kill the loop silently: log, pause, go on
                log.exception("sender loop for bot %s", bid)
                await self._sleep(1.0)

    async def _deliver(self, msg: Pending, limiter: SlidingWindowLimiter) -> None:
        channel = self._channels.get(msg.channel)
        now = self._wall()
        if channel is None:
            await self._fail(msg, "channel_removed", "channel no longer configured")
            return
        if now - msg.enqueued_at > self._max_age:
            await self._fail(msg, "expired", f"undelivered after {self._max_age:.0f}s")
            return
        bot = self._bots[channel.type]
        outcome = await self._post(bot, channel, bot.serialise(msg.body, channel, now))
        limiter.record(self._clock())
        if outcome.result == "ok":
            await asyncio.to_thread(self._outbox.mark_delivered, msg.id, self._wall())
            self._metrics.delivered.labels(channel.name).inc()
        elif outcome.result == "permanent":
            await self._fail(msg, outcome.code, outcome.reason)
        else:
            if outcome.result == "rate_limited":
                # The bot counts differently than we do (other senders, clock skew): wait a full window.
                limiter.block(self._clock() + limiter.longest_window)
                delay = 0.0
            else:
                delay = backoff(msg.attempts + 1, self._retry)
            self._metrics.retries.labels(channel.name, outcome.code).inc()
            log.warning(
                "channel %s: %s (%s), retry in %.1fs", channel.name, outcome.code, outcome.reason, delay
            )
            await asyncio.to_thread(
                self._outbox.mark_retry, msg.id, self._wall() + delay, outcome.code, outcome.reason
            )

    async def _post(self, bot: Bot, channel: Channel, data: bytes) -> Outcome:
        assert self._session is not None
        try:
            async with self._session.post(
                channel.webhook_url, data=data, headers={"Content-Type": "application/json; charset=utf-8"}
            ) as resp:
                return bot.classify(resp.status, await resp.read())
        except TimeoutError:
            return Outcome("retry", "timeout", f"no answer within {self._timeout}s")
        except aiohttp.ClientError as exc:
            return Outcome("retry", "connect", str(exc)[:200])

    async def _fail(self, msg: Pending, code: str, reason: str) -> None:
        log.error("channel %s: message %d failed permanently: %s %s", msg.channel, msg.id, code, reason)
        await asyncio.to_thread(self._outbox.mark_failed, msg.id, self._wall(), code, reason)
        self._metrics.failed.labels(msg.channel, code).inc()
