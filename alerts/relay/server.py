"""HTTP edge: aiohttp app receiving Alertmanager webhooks on POST /alertmanager/{channel}, plus /metrics,
/healthz and /readyz. A notification is validated, then answered 200 only once it is committed to the outbox;
the sender renders it into messages at delivery time (ingest does no templating)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from alerts.relay.bots import BOTS
from alerts.relay.config import Auth, ConfigError, Settings
from alerts.relay.metrics import OutboxCollector, RelayMetrics
from alerts.relay.outbox import Enqueued, Incoming, Outbox
from alerts.relay.render import Bot, Templates, compile_templates, validate
from alerts.relay.samples import SAMPLES
from alerts.relay.sender import Sender, bot_id
from alerts.relay.webhook import PayloadError, parse_body
from exporter import listener
from exporter.credentials import Authenticator, Secret, Verdict
from exporter.listener import BodyTooLarge, read_body

log = logging.getLogger(__name__)


class Committer:
    """Group commit: requests arriving while a transaction runs are stored together in the next one, so
    concurrent webhooks share one fsync. Each caller still gets its answer only after its commit."""

    def __init__(self, outbox: Outbox, max_batch: int = 256) -> None:
        self._outbox = outbox
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[Incoming, asyncio.Future[Enqueued]]] | None = None
        self._task: asyncio.Task[None] | None = None

    async def submit(self, item: Incoming) -> Enqueued:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._run(self._queue), name="relay-outbox-committer")
        future: asyncio.Future[Enqueued] = asyncio.get_running_loop().create_future()
        await self._queue.put((item, future))
        return await future

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, queue: asyncio.Queue[tuple[Incoming, asyncio.Future[Enqueued]]]) -> None:
        while True:
            batch = [await queue.get()]
            while not queue.empty() and len(batch) < self._max_batch:
                batch.append(queue.get_nowait())
            try:
                results = await asyncio.to_thread(self._outbox.enqueue_many, [item for item, _ in batch])
            except Exception as exc:  # every caller of the failed batch answers 503
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
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
        self.committer = Committer(self.outbox)


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
        return web.json_response({"status": "duplicate", "stored": 0})
    metrics.received.labels(name).inc()
    metrics.alerts_received.labels(name).inc(len(notification.alerts))
    relay.sender.notify(incoming.bot)
    return web.json_response({"status": "queued", "stored": 1})


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
