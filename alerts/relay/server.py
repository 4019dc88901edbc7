"""HTTP edge: aiohttp app receiving Alertmanager webhooks on POST /alertmanager/{channel}, plus /metrics,
/healthz, /readyz and GET /api/v1/test-pages/{id} (what became of a test page). A notification is validated, then answered 200 only once it is committed to the outbox;
the sender renders it into messages at delivery time (ingest does no templating)."""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xpuwatch.alerts.relay.bots import BOTS
from xpuwatch.alerts.relay.config import Auth, ConfigError, Settings
from xpuwatch.alerts.relay.metrics import OutboxCollector, RelayMetrics
from xpuwatch.alerts.relay.outbox import Enqueued, Incoming, Outbox
from xpuwatch.alerts.relay.render import Bot, Templates, compile_templates, validate
from xpuwatch.alerts.relay.samples import SAMPLES
from xpuwatch.alerts.relay.sender import Sender, bot_id
from xpuwatch.alerts.relay.webhook import PayloadError, parse_body
from xpuwatch.exporter import listener
from xpuwatch.exporter.credentials import Authenticator, Secret, Verdict
from xpuwatch.exporter.listener import BodyLost, BodyTooLarge, read_body

log = logging.getLogger(__name__)


_Staged = list[tuple[Incoming, "asyncio.Future[Enqueued]"]]


class Committer:
    """Group commit: one writer thread stores every notification that arrived while the previous transaction
    ran in the next one (``Outbox.enqueue_many``: one fsync for the batch), so concurrent webhooks share a
    commit and the next commit starts the moment the previous one ends, while the event loop answers. Each
    caller gets its result only after its own transaction committed; when a transaction fails, every caller
    of that batch gets the error (and answers 503) and nothing committed before is touched.

    The loop hands requests to the writer once per loop iteration (all those validated in it, as one list)
    and the writer wakes the loop once per transaction: two thread hand-offs per batch, not per request.
    ``commits`` counts the transactions (committed or failed), for the ingest metric and tests; ``waiting``
    the requests submitted and not answered yet."""

    def __init__(
        self, outbox: Outbox, max_batch: int = 256, on_commit: Callable[[int], None] | None = None
    ) -> None:
        self._outbox = outbox
        self._max_batch = max_batch
        self._on_commit = on_commit
        self._staged: _Staged = []
        self._waiting: queue.SimpleQueue[_Staged | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.commits = 0
        self.waiting = 0

    async def submit(self, item: Incoming) -> Enqueued:
        """Store ``item``; returns once its transaction committed. Raises the transaction's sqlite3.Error or
        OSError."""
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(loop,), name="relay-outbox-writer", daemon=True
            )
            self._thread.start()
        future: asyncio.Future[Enqueued] = loop.create_future()
        self._staged.append((item, future))
        if len(self._staged) == 1:
            loop.call_soon(self._hand_over)
        self.waiting += 1
        try:
            return await future
        finally:
            self.waiting -= 1

    def _hand_over(self) -> None:
        staged, self._staged = self._staged, []
        self._waiting.put(staged)

    async def stop(self) -> None:
        """Let the writer finish what it holds (callers already waiting get their answers), then end it."""
        if self._thread is not None:
            if self._staged:
                self._hand_over()
            self._waiting.put(None)
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        waiting, stopping = self._waiting, False
        while not stopping:
            first = waiting.get()
            if first is None:
                break
            batch = list(first)
            while len(batch) < self._max_batch:
                try:
                    more = waiting.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch += more
            futures = [f for _, f in batch]
            try:
                results: list[Enqueued] | BaseException = self._outbox.enqueue_many(
                    [item for item, _ in batch]
                )
            except Exception as exc:  # every caller of the failed batch answers 503
                results = exc
            self.commits += 1
            try:  # one wake-up of the event loop per batch, not per request
                loop.call_soon_threadsafe(_settle, futures, results, len(batch), self._on_commit)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return


def _settle(
    futures: list[asyncio.Future[Enqueued]],
    results: list[Enqueued] | BaseException,
    size: int,
    on_commit: Callable[[int], None] | None,
) -> None:
    """On the event loop: hand each caller of one batch its result (or the batch's error)."""
    if on_commit is not None:
        on_commit(size)
    if isinstance(results, BaseException):
        for future in futures:
            if not future.done():
                future.set_exception(results)
        return
    for future, result in zip(futures, results, strict=True):
        if not future.done():
            future.set_result(result)


@dataclass
class Relay:
    """Everything one running relay holds: settings, compiled templates, outbox, metrics and sender."""

    settings: Settings
    outbox: Outbox
    metrics: RelayMetrics
    sender: Sender
    templates: Mapping[str, Templates]
    bots: Mapping[str, Bot]
    wall: Callable[[], float] = time.time
    committer: Committer = field(init=False)

    def __post_init__(self) -> None:
        self.committer = Committer(self.outbox, on_commit=lambda _size: self.metrics.ingest_commits.inc())


RELAY_KEY: web.AppKey[Relay] = web.AppKey("relay", Relay)


def check_settings(settings: Settings, bots: Mapping[str, Bot] = BOTS) -> dict[str, Templates]:
    """Start-up validation of every channel (mentions, templates on the sample payloads). Raises ConfigError."""
    compiled = {}
    for name, channel in settings.channels.items():
        bot = bots[channel.type]
        validate(bot, channel, SAMPLES, settings.alertmanager_url)
        compiled[name] = compile_templates(bot, channel)
    return compiled


def build_relay(
    settings: Settings,
    bots: Mapping[str, Bot] = BOTS,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], object] = asyncio.sleep,
) -> Relay:
    """Validate the settings, open the outbox and prepare the sender (not started). Raises ConfigError."""
    templates = check_settings(settings, bots)
    try:
        outbox = Outbox(settings.outbox)
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(f"outbox {settings.outbox}: {exc}") from None
    metrics = RelayMetrics()
    metrics.prime(settings.channels)
    metrics.registry.register(OutboxCollector(outbox, settings.channels, wall))
    sender = Sender(
        outbox,
        settings.channels,
        bots,
        metrics,
        settings.retry,
        settings.request_timeout_seconds,
        settings.max_delivery_age_seconds,
        clock=clock,
        wall=wall,
        sleep=sleep,  # type: ignore[arg-type]
        templates=templates,
        alertmanager_url=settings.alertmanager_url,
        dedup_window=settings.dedup_window_seconds,
    )
    return Relay(settings, outbox, metrics, sender, templates, bots, wall)


def build_app(relay: Relay) -> web.Application:
    """The aiohttp application; starts and stops the sender with the app."""
    app = web.Application(client_max_size=relay.settings.max_body_bytes + 1)
    app[RELAY_KEY] = relay
    app[_CHECKER] = checker = _Checker()
    app.router.add_post("/alertmanager/{channel}", _receive)
    app.router.add_get("/api/v1/test-pages/{page_id}", _test_page)
    app.router.add_get("/metrics", _metrics)
    for path in ("/healthz", "/-/healthy"):
        app.router.add_get(path, _healthz)
    for path in ("/readyz", "/-/ready"):
        app.router.add_get(path, _readyz)

    async def lifecycle(app: web.Application):  # type: ignore[no-untyped-def]
        await relay.sender.start()
        yield
        await relay.sender.stop()
        await relay.committer.stop()
        relay.outbox.close()
        checker.close()

    app.cleanup_ctx.append(lifecycle)
    return app


def authenticator(auth: Auth) -> Authenticator:
    """The inbound checker (exporter.credentials): bearer token and/or basic user with a plain password
    or a bcrypt hash (``password_hash_file``), bcrypt checked off the event loop, bounded and cached."""
    users: dict[str, Secret] = {}
    if auth.basic_username:
        users[auth.basic_username] = (
            Secret.hash(auth.basic_password_hash)
            if auth.basic_password_hash
            else Secret.plain(auth.basic_password)
        )
    return Authenticator(users, auth.bearer_token or None)


class _Checker:
    """The authenticator for the relay's current ``settings.auth`` (rebuilt if the settings are swapped)."""

    def __init__(self) -> None:
        self._auth: Auth | None = None
        self._checker: Authenticator | None = None

    def get(self, auth: Auth) -> Authenticator:
        if self._checker is None or auth != self._auth:
            if self._checker is not None:
                self._checker.close()
            self._auth, self._checker = auth, authenticator(auth)
        return self._checker

    def close(self) -> None:
        if self._checker is not None:
            self._checker.close()


_CHECKER: web.AppKey[_Checker] = web.AppKey("checker", _Checker)


# The two answers to a good webhook, encoded once (web.json_response would encode them per request).
_QUEUED = json.dumps({"status": "queued", "stored": 1})
_DUPLICATE = json.dumps({"status": "duplicate", "stored": 0})


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"status": "error", "error": reason}, status=status)


async def _receive(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    settings, metrics = relay.settings, relay.metrics
    verdict = await request.app[_CHECKER].get(settings.auth).check(request.headers.get("Authorization"))
    if verdict is Verdict.BUSY:  # too many password checks running: 503, which Alertmanager retries
        return _error(503, "credential checks busy; retry")
    if verdict is not Verdict.OK:
        metrics.rejected.labels("unauthorized").inc()
        resp = _error(401, "missing or wrong credentials")
        resp.headers["WWW-Authenticate"] = 'Bearer realm="xpuwatch-relay", Basic realm="xpuwatch-relay"'
        return resp
    name = request.match_info["channel"]
    channel = settings.channels.get(name)
    if channel is None:
        metrics.rejected.labels("unknown_channel").inc()
        return _error(404, f"unknown channel {name!r}; configured: {sorted(settings.channels)}")
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        metrics.rejected.labels("too_large").inc()
        return _error(413, f"body of {request.content_length} bytes exceeds max_body_bytes={limit}")
    try:
        body = await read_body(request, limit)
    except BodyTooLarge:
        metrics.rejected.labels("too_large").inc()
        return _error(413, f"body exceeds max_body_bytes={limit}")
    except TimeoutError:  # a 5xx: Alertmanager retries (a 4xx would drop the notification)
        metrics.rejected.labels("body_timeout").inc()
        return _error(503, f"body not received within {listener.BODY_TIMEOUT_SECONDS:g} s; retry")
    except BodyLost:  # the connection is gone (counted by the guard when it closed it): nobody to answer
        return _error(503, "connection closed before the body arrived")
    try:
        notification = parse_body(bytes(body))
    except PayloadError as exc:
        metrics.rejected.labels("malformed").inc()
        return _error(400, str(exc))
    episode = notification.episode()
    incoming = Incoming(
        channel=name,
        bot=bot_id(channel),
        group_key=notification.group_key,
        digest=notification.digest(episode),
        episode=episode,
        alerts=len(notification.alerts),
        payload=bytes(body),
        now=relay.wall(),
        window=settings.dedup_window_seconds,
    )
    try:
        result = await relay.committer.submit(incoming)
    except (sqlite3.Error, OSError) as exc:
        metrics.rejected.labels("store_failed").inc()
        log.error("outbox write failed, answering 503 so Alertmanager retries: %s", exc)
        return _error(503, f"could not store the notification in the outbox: {exc}")
    if result.duplicate:
        metrics.deduplicated.labels(name).inc()
        return web.Response(text=_DUPLICATE, content_type="application/json")
    received, alerts_received = metrics.accepted(name)
    received.inc()
    alerts_received.inc(len(notification.alerts))
    relay.sender.notify(incoming.bot)
    return web.Response(text=_QUEUED, content_type="application/json")


async def _test_page(request: web.Request) -> web.Response:
    """What became of a test page (``xpuwatch rules test-page``): its notifications, their channels and each
    message's state and bot answer (code, reason). The same credentials as the webhook; the stored payloads
    are searched for the page id only."""
    relay: Relay = request.app[RELAY_KEY]
    verdict = await request.app[_CHECKER].get(relay.settings.auth).check(request.headers.get("Authorization"))
    if verdict is Verdict.BUSY:
        return _error(503, "credential checks busy; retry")
    if verdict is not Verdict.OK:
        return _error(401, "missing or wrong credentials")
    page_id = request.match_info["page_id"]
    try:
        found = await asyncio.to_thread(relay.outbox.test_page, page_id)
    except ValueError as exc:
        return _error(400, str(exc))
    except sqlite3.Error as exc:
        return _error(503, f"outbox unreadable: {exc}")
    return web.json_response({"page": page_id, "notifications": found})


async def _metrics(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    data = await asyncio.to_thread(generate_latest, relay.metrics.registry)
    return web.Response(body=data, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    relay: Relay = request.app[RELAY_KEY]
    if not relay.sender.running:
        return web.Response(status=503, text="sender not running\n")
    try:
        await asyncio.to_thread(relay.outbox.stats)
    except sqlite3.Error as exc:
        return web.Response(status=503, text=f"outbox unreadable: {exc}\n")
    return web.Response(text="ready\n")
