"""HTTP edge of the exporter (aiohttp): /metrics, /healthz, /readyz and a landing page.

A scrape never waits on a vendor call: /metrics serves the exposition cache (rendered once per poller
state, in prometheus-client's text or OpenMetrics format as negotiated by ``choose_encoder``, gzipped when
the client accepts it). TLS and basic auth follow the exporter-toolkit web config (bcrypt hashes), checked by
``exporter.credentials.Authenticator``: off the event loop, a bounded number at once (503 beyond), a
verified credential remembered so bcrypt's cost is paid once per credential, as exporter-toolkit does.
"""

from __future__ import annotations

import asyncio
import html
import logging
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from exporter.credentials import Authenticator, Secret, Verdict
from exporter.exposition import ExpositionCache
from exporter.poller import Poller
from exporter.settings import TLSSettings, WebConfig, WebSettings

log = logging.getLogger(__name__)

# Answered without credentials even when basic auth is on, so that kubelet probes (which send none) work on
# the metrics port: they reveal liveness and which backends lack fresh data, never a reading (docs/deploy.md).
UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})

MAX_CONNECTIONS = 512
"""Connections held at once (capped further to the open-file limit less ``FD_HEADROOM``)."""
RESERVE_CONNECTIONS = 32
"""Slots that connections still waiting for their request header may never take: a real scrape always finds
room (the oldest waiting connection is closed to make it)."""
HEADER_TIMEOUT_SECONDS = 10.0
"""A connection that has not sent a complete request header within this long is closed (slowloris)."""
FD_HEADROOM = 64
"""File descriptors kept free for everything else (vendor tools' pipes, the kubelet socket, logs)."""

_TLS_MIN = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


def ssl_context(tls: TLSSettings) -> ssl.SSLContext:
    """A server SSL context from ``tls_server_config``. Raises ssl.SSLError/OSError on bad files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _TLS_MIN[tls.min_version]
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    ctx.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
    if tls.client_ca_file:
        ctx.load_verify_locations(tls.client_ca_file)
    return ctx


class _Guarded(asyncio.Protocol):
    """Wraps aiohttp's per-connection protocol: tells the guard when the request header is complete."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.waiting = True  # no complete request header yet
        self.since = 0.0
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: create_server's
        if self.guard.admit(self):
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.waiting:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self.waiting = False
                self._tail = b""
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ConnectionGuard:
    """Bounds the connections the server holds, so that slow clients cannot exhaust file descriptors or
    starve a real scrape.

    At most ``max_connections`` are held. Connections still waiting for a complete request header may hold
    at most ``max_connections - reserve``; a new connection beyond that closes the OLDEST waiting one (a
    slow client loses its slot, a fresh scrape gets one). A connection whose header is not complete within
    ``header_timeout`` seconds is closed. When every slot is held by connections with requests under way,
    a new connection is closed at once (it never waits for a file descriptor, so accept() never fails with
    EMFILE and nothing is logged per connection). ``closed`` counts connections closed by the guard.
    """

    def __init__(
        self,
        max_connections: int = MAX_CONNECTIONS,
        reserve: int = RESERVE_CONNECTIONS,
        header_timeout: float = HEADER_TIMEOUT_SECONDS,
    ) -> None:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if soft != resource.RLIM_INFINITY:
                max_connections = max(8, min(max_connections, soft - FD_HEADROOM))
        except (ImportError, ValueError, OSError):
            pass
        self.max_connections = max_connections
        self.reserve = min(reserve, max_connections // 2)
        self.header_timeout = header_timeout
        self._conns: dict[_Guarded, None] = {}  # in arrival order
        self.closed = 0
        self.peak = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(factory(), self)

    def admit(self, conn: _Guarded) -> bool:
        loop = asyncio.get_running_loop()
        conn.since = loop.time()
        waiting = [c for c in self._conns if c.waiting]
        if len(waiting) >= self.max_connections - self.reserve:
            self._close(waiting[0])
        elif len(self._conns) >= self.max_connections:
            self.closed += 1
            assert conn.transport is not None
            conn.transport.abort()
            return False
        self._conns[conn] = None
        self.peak = max(self.peak, len(self._conns))
        if self._sweeper is None:
            self._sweeper = loop.call_later(min(1.0, self.header_timeout), self._sweep)
        return True

    def release(self, conn: _Guarded) -> None:
        self._conns.pop(conn, None)

    def _close(self, conn: _Guarded) -> None:
        self._conns.pop(conn, None)
        self.closed += 1
        if conn.transport is not None:
            conn.transport.abort()

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = None
        now = loop.time()
        for conn in [c for c in self._conns if c.waiting and now - c.since > self.header_timeout]:
            self._close(conn)
        if self._conns:
            self._sweeper = loop.call_later(min(1.0, self.header_timeout), self._sweep)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


class _GuardedSite(web.TCPSite):
    """aiohttp's TCPSite with every connection passed through a ConnectionGuard."""

    def __init__(self, runner: web.AppRunner, guard: ConnectionGuard, **kw: Any) -> None:
        super().__init__(runner, **kw)
        self._guard = guard

    async def start(self) -> None:
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        self._server = await loop.create_server(
            self._guard.wrap(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            ssl_handshake_timeout=self._guard.header_timeout if self._ssl_context else None,
        )


class Server:
    """The exporter's HTTP server over one exposition cache and one poller.

    ``clock`` (Unix seconds) is the same one the poller uses, for /readyz freshness.
    """

    def __init__(
        self,
        cache: ExpositionCache,
        poller: Poller,
        web_settings: WebSettings,
        web_config: WebConfig,
        clock: Callable[[], float],
        guard: ConnectionGuard | None = None,
    ) -> None:
        self.cache = cache
        self.poller = poller
        self.settings = web_settings
        self.web_config = web_config
        self.clock = clock
        self.auth = (
            Authenticator({u: Secret.hash(h) for u, h in web_config.basic_auth_users.items()})
            if web_config.basic_auth_users
            else None
        )
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="xpuwatch-render")
        self._runner: web.AppRunner | None = None
        self.guard = guard or ConnectionGuard()
        self.address: tuple[str, int] | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware] if self.auth else [])
        app.router.add_get(self.settings.telemetry_path, self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/", self.landing)
        if self.web_config.headers:  # http_server_config.headers, on every response (401s included)
            app.on_response_prepare.append(self._add_headers)
        return app

    async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(self.web_config.headers)

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        assert self.auth is not None
        if request.path in UNAUTHENTICATED_PATHS:
            return await handler(request)
        verdict = await self.auth.check(request.headers.get("Authorization"))
        if verdict is Verdict.BUSY:  # too many checks running (a wrong-password flood): retry later
            return web.Response(
                status=503, text="credential checks busy; retry\n", headers={"Retry-After": "1"}
            )
        if verdict is not Verdict.OK:
            return web.Response(
                status=401,
                text="Unauthorized\n",
                headers={"WWW-Authenticate": 'Basic realm="xpuwatch"'},
            )
        return await handler(request)

    async def metrics(self, request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        encoding = request.headers.get("Accept-Encoding", "")
        rendered = self.cache.peek(accept, encoding)
        if rendered is None:  # state changed since the last render: render off the event loop
            loop = asyncio.get_running_loop()
            rendered = await loop.run_in_executor(self._executor, self.cache.get, accept, encoding)
        headers = {"Content-Type": rendered.content_type}
        if rendered.gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=rendered.body, headers=headers)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        ready, missing = self.poller.ready(self.clock())
        if ready:
            return web.Response(text="ready\n")
        why = ", ".join(missing) if missing else "no backend enabled"
        return web.Response(status=503, text=f"not ready: no fresh data from {why}\n")

    async def landing(self, request: web.Request) -> web.Response:
        path = html.escape(self.settings.telemetry_path)
        rows = "".join(
            f"<tr><td>{html.escape(v.backend)}</td><td>{'up' if v.up else 'down'}</td><td>{v.devices}</td></tr>"
            for v in self.poller.view(self.clock())
        )
        body = (
            "<!doctype html><html><head><title>xpuwatch exporter</title></head><body>"
            "<h1>xpuwatch exporter</h1>"
            f'<p><a href="{path}">Metrics</a> · <a href="/healthz">Health</a> · <a href="/readyz">Readiness</a></p>'
            f"<table><tr><th>backend</th><th>state</th><th>devices</th></tr>{rows}</table>"
            "</body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        host, port = self.settings.host_port
        ctx = ssl_context(self.web_config.tls) if self.web_config.tls else None
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = _GuardedSite(
            self._runner, self.guard, host=host or None, port=port, ssl_context=ctx, reuse_address=True
        )
        await site.start()
        bound = self._runner.addresses[0] if self._runner.addresses else (host, port)
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    async def stop(self) -> None:
        if self.auth is not None:  # first: queued checks are cancelled, so no handler waits on them
            self.auth.close()
        self.guard.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self._executor.shutdown(wait=False, cancel_futures=True)
