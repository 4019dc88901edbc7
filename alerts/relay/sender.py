"""Delivery workers: one per bot, rendering stored notifications into messages (once each), taking the oldest
pending message, sending it under the bot's rate limits (send times kept in the outbox, so a restart honours
them), and recording delivered / retry-later / permanently failed. Clocks and sleep are injected."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from xpuwatch.alerts.relay.config import Channel, Retry
from xpuwatch.alerts.relay.limiter import SlidingWindowLimiter
from xpuwatch.alerts.relay.metrics import RelayMetrics
from xpuwatch.alerts.relay.outbox import Outbox, Pending, Unrendered
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.render import Bot, RenderStats, Templates, compile_templates, part_budget, render
from xpuwatch.alerts.relay.webhook import parse_body

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]
# The send time is written ahead, during the last RESERVE_AHEAD seconds of a wait for the window, for a request
# leaving within RESERVE_SLACK seconds after the wait (else it is rewritten): the request then leaves the moment
# the window opens. A larger slack only makes a relay restarted after a crash count that send a bit later.
RESERVE_AHEAD = 0.5
RESERVE_SLACK = 1.0
# A send that gets no answer within its timeout may still have been shown (a slow bot answers after it
# posted). Such a message is sent at most MAX_UNCONFIRMED_SENDS times unanswered, each time with twice the
# timeout of the one before (request_timeout_seconds x 1, 2, 4) and not before that timeout has passed again,
# then recorded as failed with reason "unconfirmed" (XpuwatchRelayMessagesFailing): a bot slower than the
# timeout shows a message at most 3 times, not once per retry until max_delivery_age_seconds. Sends that
# surely did not reach the bot (connection refused or not opened within the connect timeout, 5xx) do not count.
MAX_UNCONFIRMED_SENDS = 3
# Share of request_timeout_seconds allowed for opening the connection: a connect that takes longer cannot
# have reached the bot, so it is a plain retry; the rest of the timeout waits for the answer.
CONNECT_SHARE = 0.5


def bot_id(channel: Channel) -> str:
    """Channels posting to the same webhook URL share one bot: one queue and one rate limiter."""
    return _url_id(channel.webhook_url)


@functools.lru_cache(maxsize=1024)
def _url_id(url: str) -> str:
    """16 hex digits of the URL's SHA-256 (asked on every webhook: cached, the URLs are few)."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def backoff(attempts: int, retry: Retry) -> float:
    """Seconds before retry number ``attempts`` (1-based) of a transient failure."""
    return min(retry.max_seconds, retry.initial_seconds * retry.multiplier ** max(0, attempts - 1))


def send_timeout(request_timeout: float, unconfirmed: int) -> float:
    """Seconds to wait for the answer to a send after ``unconfirmed`` unanswered ones: doubles each time."""
    return request_timeout * 2.0 ** max(0, unconfirmed)


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
        templates: Mapping[str, Templates] | None = None,
        alertmanager_url: str = "",
        dedup_window: float = 600.0,
    ) -> None:
        self._outbox = outbox
        self._templates = dict(templates or {})
        self._am_url = alertmanager_url
        self._dedup_window = dedup_window
        self._dirty: dict[str, bool] = {}
        self._channels = dict(channels)
        self._bots = bots
        self._metrics = metrics
        self._retry = retry
        self._timeout = request_timeout
        self._max_age = max_age
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._wake: dict[str, asyncio.Event] = {}
        self._render_cost: dict[str, float] = {}  # per bot: recent seconds to render one notification
        # per bot: (id of the send row written ahead, the latest start it covers in Unix seconds)
        self._reserved: dict[str, tuple[int, float]] = {}
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
        await asyncio.to_thread(self._seed_limiters)
        for bid in sorted(bots):
            self._dirty[bid] = True
            self._wake[bid] = asyncio.Event()
            self._wake[bid].set()
            self._tasks.append(asyncio.create_task(self._loop(bid), name=f"relay-sender-{bid}"))
        self._tasks.append(asyncio.create_task(self._prune(), name="relay-outbox-prune"))

    def _seed_limiters(self) -> None:
        """Count the sends of the last window that a previous run recorded (times converted to the clock)."""
        clock_now, wall_now = self._clock(), self._wall()
        for bid, limiter in self._limiters.items():
            for at in self._outbox.sends_since(bid, wall_now - limiter.longest_window):
                limiter.record(clock_now - (wall_now - at))

    async def _prune(self) -> None:
        """Hourly: forget finished messages older than the retention (7 days, or twice the delivery age)."""
        while True:
            try:
                now = self._wall()
                removed = await asyncio.to_thread(self._outbox.prune, now - self._retention, now - 3600.0)
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
        for send_id, _ in self._reserved.values():  # written ahead for requests that never left
            with contextlib.suppress(sqlite3.Error):
                await asyncio.to_thread(self._outbox.cancel_send, send_id)
        self._reserved.clear()
        if self._session is not None:
            await self._session.close()

    def notify(self, bid: str) -> None:
        """A new notification was stored for ``bid``."""
        event = self._wake.get(bid)
        if event is not None:
            self._dirty[bid] = True
            event.set()

    async def _loop(self, bid: str) -> None:
        limiter = self._limiters.get(bid) or SlidingWindowLimiter(())
        wake = self._wake[bid]
        pause = 1.0
        known: Pending | None = None
        fresh = (
            False  # ``known`` is the oldest pending message already: skip one outbox read (and thread hop)
        )
        while True:
            try:
                msg = known if fresh else await asyncio.to_thread(self._outbox.next_pending, bid)
                fresh = False
                if msg is None:
                    if self._dirty.get(bid) and await self._render_next(bid):
                        continue
                    wake.clear()
                    if self._dirty.get(bid):
                        continue
                    await wake.wait()
                    continue
                wait = max(msg.next_attempt_at - self._wall(), limiter.delay(self._clock()))
                if wait > 0:
                    known, fresh = msg, True  # still the oldest: only this loop changes the bot's messages
                    # Waiting for the bot's window: render what arrived meanwhile instead of idling, if a
                    # render fits in the wait (one that overran it would delay this send: the slot is lost).
                    if (
                        self._dirty.get(bid)
                        and wait >= self._render_cost.get(bid, 0.0)
                        and await self._render_next(bid)
                    ):
                        fresh = False
                        continue
                    if wait > RESERVE_AHEAD:
                        await self._sleep(wait - RESERVE_AHEAD)
                        continue
                    reserved = self._reserved.get(bid)
                    if reserved is None or self._wall() + wait > reserved[1]:
                        # Write the send time now, inside the wait, so that the request leaves the moment
                        # the window opens instead of after an outbox write.
                        await self._reserve(bid, self._wall() + wait + RESERVE_SLACK)
                        continue
                    await self._sleep(wait)
                    continue
                fresh, known = await self._deliver(msg, limiter, bid)
                pause = 1.0
            except asyncio.CancelledError:
                raise
            except (
                sqlite3.Error
            ) as exc:  # disk full, corrupt page: one clear line, growing pause, no traceback
                log.error("bot %s: outbox unusable (%s); retrying in %.0fs", bid, exc, pause)
                self._metrics.outbox_errors.inc()
                await asyncio.sleep(pause)
                pause = min(60.0, pause * 2)
            except Exception:  # a bug must not kill the loop silently: log, pause, go on
                log.exception("sender loop for bot %s", bid)
                await self._sleep(1.0)

    async def _render_next(self, bid: str) -> bool:
        """Render the oldest stored notification of ``bid`` into messages; False if there was none. Rendering
        is lazy (when the bot has nothing to send, or while it waits for its window) and in arrival order, so
        messages get ids in FIFO order and ingest never renders."""
        self._dirty[bid] = False  # cleared before looking, so a notify() during the look is not lost
        notes = await asyncio.to_thread(self._outbox.unrendered, bid, 1)
        if not notes:
            return False
        self._dirty[bid] = True  # there may be more
        started = self._clock()
        await asyncio.to_thread(self._render_one, bid, notes[0])
        spent = self._clock() - started
        self._render_cost[bid] = 0.5 * self._render_cost.get(bid, spent) + 0.5 * spent
        return True

    async def _reserve(self, bid: str, start_by: float) -> None:
        """Write down the next send to ``bid`` before it is due: a request leaving by ``start_by`` (Unix s)
        reaches the bot by ``start_by`` + the request timeout, the time a restart counts if this run dies
        with the request in flight. Re-used (rewritten) if the wait grows."""
        at = start_by + self._timeout
        reserved = self._reserved.get(bid)
        if reserved is None:
            send_id = await asyncio.to_thread(self._outbox.record_send, bid, at)
        else:
            send_id = reserved[0]
            await asyncio.to_thread(self._outbox.settle_send, send_id, at)
        self._reserved[bid] = (send_id, start_by)

    def _render_one(self, bid: str, note: Unrendered) -> None:
        """Blocking: render one notification and store its messages (or record why it cannot be)."""
        channel = self._channels.get(note.channel)
        if channel is None:
            self._outbox.fail_notification(note.id, "channel no longer configured")
            self._metrics.failed.labels(note.channel, "channel_removed").inc()
            return
        bot = self._bots[channel.type]
        stats = RenderStats()
        try:
            notification = parse_body(note.payload)
            # Backlog: queued messages plus the other notifications waiting (each needs at least one message).
            backlog = self._outbox.pending_count(bid) + max(0, self._outbox.unrendered_count(bid) - 1)
            budget = part_budget(channel, bot, backlog)
            templates = self._templates.get(channel.name) or compile_templates(bot, channel)
            messages = render(notification, channel, bot, self._am_url, templates, stats, budget)
            result = self._outbox.store_rendered(
                note, bid, [(m.part, m.parts, m.kind, m.body) for m in messages], self._dedup_window
            )
        except sqlite3.Error:
            raise  # the outbox, not this notification: the loop pauses and tries again
        except Exception as exc:  # PayloadError (an old row) or a bug even the built-in templates hit
            log.exception("channel %s: rendering notification %d failed", channel.name, note.id)
            self._outbox.fail_notification(note.id, f"render failed: {type(exc).__name__}: {exc}"[:500])
            self._metrics.failed.labels(channel.name, "render_failed").inc()
            return
        if stats.fallbacks:
            self._metrics.fallbacks.labels(channel.name).inc(stats.fallbacks)
        if stats.summarised:
            self._metrics.summarised.labels(channel.name).inc(stats.summarised)
        self._metrics.enqueued.labels(channel.name).inc(result.stored)

    async def _deliver(
        self, msg: Pending, limiter: SlidingWindowLimiter, bid: str
    ) -> tuple[bool, Pending | None]:
        """Send one message and record the outcome. Returns (True, the next pending message) when it read
        that in the same thread hop as the delivery mark, else (False, None)."""
        channel = self._channels.get(msg.channel)
        now = self._wall()
        if channel is None:
            await self._fail(msg, "channel_removed", "channel no longer configured")
            return False, None
        if now - msg.enqueued_at > self._max_age:
            await self._fail(msg, "expired", f"undelivered after {self._max_age:.0f}s")
            return False, None
        bot = self._bots[channel.type]
        # Written before the request goes out, at the latest time the bot can count it (the request timeout
        # after the latest start); corrected to the answer's arrival. A relay killed mid-request still counts
        # it on restart. Usually written during the wait for the window (``_reserve``); here if not.
        url, data = bot.url(channel, now), bot.serialise(msg.body, channel, now)
        while (reserved := self._reserved.get(bid)) is None or self._wall() > reserved[1]:
            await self._reserve(bid, self._wall() + RESERVE_SLACK)  # checked again: the write takes time
        send_id = self._reserved.pop(bid)[0]  # no await from the check to the request's start
        timeout = send_timeout(self._timeout, msg.unconfirmed)
        if timeout > self._timeout:  # a resend after an unanswered one: the bot may count it later still
            latest = self._wall() + RESERVE_SLACK + timeout  # the request leaves within the slack
            await asyncio.to_thread(self._outbox.settle_send, send_id, latest)
        outcome = await self._post(bot, channel, url, data, timeout)
        limiter.record(self._clock())
        answered = self._wall()
        if outcome.result == "ok":

            def settle_mark_and_read() -> Pending | None:  # one thread hop for the writes and the next read
                self._outbox.settle_send(send_id, answered)
                self._outbox.mark_delivered(msg.id, answered)
                return self._outbox.next_pending(bid)

            following = await asyncio.to_thread(settle_mark_and_read)
            self._metrics.delivered.labels(channel.name).inc()
            return True, following
        await asyncio.to_thread(self._outbox.settle_send, send_id, answered)
        if outcome.result == "permanent":
            await self._fail(msg, outcome.code, outcome.reason)
        elif outcome.result == "unconfirmed" and msg.unconfirmed + 1 >= MAX_UNCONFIRMED_SENDS:
            await self._fail(
                msg,
                "unconfirmed",
                f"no answer to {MAX_UNCONFIRMED_SENDS} sends (timeouts up to {timeout:g}s); the bot may have"
                " shown it",
            )
        else:
            if outcome.result == "rate_limited":
                # The bot counts differently than we do (other senders, clock skew): wait out the window it
                # says was hit (Feishu 9499 = the 5/s one, 11232 = 100/min), kept in the outbox for restarts.
                delay = limiter.window(outcome.window)
                limiter.block(self._clock() + delay)
            elif outcome.result == "unconfirmed":
                # The bot may still be working on it: give it as long again before a resend.
                delay = max(backoff(msg.attempts + 1, self._retry), timeout)
            else:
                delay = backoff(msg.attempts + 1, self._retry)
            self._metrics.retries.labels(channel.name, outcome.code).inc()
            log.warning(
                "channel %s: %s (%s), retry in %.2fs", channel.name, outcome.code, outcome.reason, delay
            )
            await asyncio.to_thread(
                self._outbox.mark_retry,
                msg.id,
                self._wall() + delay,
                outcome.code,
                outcome.reason,
                outcome.result == "unconfirmed",
            )
        return False, None

    async def _post(self, bot: Bot, channel: Channel, url: str, data: bytes, timeout: float) -> Outcome:
        """One request: the bot's classification, ``retry`` when it surely did not arrive (connection refused
        or not opened in time), ``unconfirmed`` when it went out and no answer came within ``timeout``."""
        assert self._session is not None
        limits = aiohttp.ClientTimeout(total=timeout, connect=CONNECT_SHARE * self._timeout)
        try:
            async with self._session.post(
                url, data=data, headers={"Content-Type": "application/json; charset=utf-8"}, timeout=limits
            ) as resp:
                return bot.classify(resp.status, await resp.read())
        except aiohttp.ConnectionTimeoutError as exc:  # before TimeoutError: it is one
            return Outcome("retry", "connect", f"no connection within {limits.connect:g}s: {exc}"[:200])
        except TimeoutError:
            return Outcome("unconfirmed", "timeout", f"no answer within {timeout:g}s")
        except aiohttp.ClientError as exc:
            return Outcome("retry", "connect", str(exc)[:200])

    async def _fail(self, msg: Pending, code: str, reason: str) -> None:
        log.error("channel %s: message %d failed permanently: %s %s", msg.channel, msg.id, code, reason)
        await asyncio.to_thread(self._outbox.mark_failed, msg.id, self._wall(), code, reason)
        self._metrics.failed.labels(msg.channel, code).inc()
