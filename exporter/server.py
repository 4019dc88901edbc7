"""HTTP edge of the exporter (aiohttp): /metrics, /healthz, /readyz and a landing page.

A scrape never waits on a vendor call: /metrics serves the exposition cache (rendered once per poller
state, in prometheus-client's text or OpenMetrics format as negotiated by ``choose_encoder``, gzipped when
the client accepts it). Nor does it wait for a render while a body at most one poll old exists: it gets that
body and a render of the new state starts in the background (``ExpositionCache.peek``, never stale beyond
one poll). The body is written in slices of the cached bytes (``WRITE_CHUNK_BYTES``), never copied whole.
TLS and basic auth follow the exporter-toolkit web config (bcrypt hashes), checked by
``exporter.credentials.Authenticator``: off the event loop, a bounded number at once (503 beyond), a
verified credential remembered so bcrypt's cost is paid once per credential, as exporter-toolkit does.
Connections come through ``exporter.listener`` (the connection guard shared with the relay and remediation).
"""

from __future__ import annotations

import asyncio
import html
import logging
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from xpuwatch.exporter.credentials import Authenticator, Secret, Verdict
from xpuwatch.exporter.exposition import ExpositionCache, Rendered
from xpuwatch.exporter.listener import ConnectionGuard, listen
from xpuwatch.exporter.poller import Poller
from xpuwatch.exporter.settings import TLSSettings, WebConfig, WebSettings

log = logging.getLogger(__name__)

# Answered without credentials even when basic auth is on, so that kubelet probes (which send none) work on
# the metrics port: they reveal liveness and which backends lack fresh data, never a reading (docs/deploy.md).
UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})

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


WRITE_CHUNK_BYTES = 128 * 1024
"""A /metrics body (9.5 MiB at 2,048 devices) is written in slices of the cached bytes this long, not whole:
on Python before 3.12.9 aiohttp joins the headers and the body into one new buffer and asyncio copies what
the socket does not take at once, so a whole-body write made body-sized allocations on every scrape, above
glibc's mmap threshold (256 KiB in the images): fresh pages, page faults and munmap each time. Plain p50 at
2,048 devices in the images' environment: 5.97x nginx whole, 1.13x sliced (without the setting 2.36x and
1.11x); 13 ms of CPU per plain scrape whole, 2.8-3.5 ms sliced (benchmarks/exporter_scrape.py). aiohttp drains the transport after each
slice over 64 KiB, so what the transport buffers for a slow client (its 64 KiB high-water mark plus one
slice, plus growth slack) stays under the threshold and is carved from the heap. 128 KiB: 64 KiB cost ~10 %
more CPU (twice the writes); 192 KiB saved nothing more."""


def _log_failure(fut: asyncio.Future[Rendered]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("background render failed", exc_info=fut.exception())


def ssl_context(tls: TLSSettings) -> ssl.SSLContext:
    """A server SSL context from ``tls_server_config``. Raises ssl.SSLError/OSError on bad files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _TLS_MIN[tls.min_version]
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    ctx.verify_mode = _CLIENT_AUTH[tls.client_auth_type]
    if tls.client_ca_file:
        ctx.load_verify_locations(tls.client_ca_file)
    return ctx


class Server:
    """The exporter's HTTP server over one exposition cache and one poller.

    ``clock`` (Unix seconds) is the same one the poller uses, for /readyz freshness. ``on_scrape`` is called
    (on the event loop, before the answer) at every /metrics request: the simulator starts a held timeline
    there (``SimBackend.begin``); it must return at once.
    """

    def __init__(
        self,
        cache: ExpositionCache,
        poller: Poller,
        web_settings: WebSettings,
        web_config: WebConfig,
        clock: Callable[[], float],
        guard: ConnectionGuard | None = None,
        on_scrape: Callable[[], None] | None = None,
    ) -> None:
        self.cache = cache
        self.on_scrape = on_scrape
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
        self._refreshing: asyncio.Future[Rendered] | None = None
        self._runner: web.AppRunner | None = None
        self.guard = guard or ConnectionGuard()
        # xpuwatch_http_* beside process_*: read at each render, as of the latest poll.
        cache.standard.register(self.guard.collector())
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

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if self.on_scrape is not None:
            self.on_scrape()
        accept = request.headers.get("Accept", "")
        encoding = request.headers.get("Accept-Encoding", "")
        cached = self.cache.peek(accept, encoding)
        if cached is None:  # no body at most one poll old: render off the event loop and wait for it
            loop = asyncio.get_running_loop()
            rendered = await loop.run_in_executor(self._executor, self.cache.get, accept, encoding)
        else:
            rendered = cached.rendered
            if cached.behind:  # the previous poll's body: serve it, render the new state meanwhile
                self._refresh(accept, encoding)
        headers = {"Content-Type": rendered.content_type}
        if rendered.gzipped:
            headers["Content-Encoding"] = "gzip"
        if len(rendered.body) <= WRITE_CHUNK_BYTES:  # one slice: one write, headers and body together
            return web.Response(body=rendered.body, headers=headers)
        response = web.StreamResponse(headers=headers)
        response.content_length = len(rendered.body)
        await response.prepare(request)
        try:
            if request.method != "HEAD":
                body = memoryview(rendered.body)
                for start in range(0, len(body), WRITE_CHUNK_BYTES):
                    await response.write(body[start : start + WRITE_CHUNK_BYTES])
            await response.write_eof()
        except ConnectionError:  # the client left, or the connection guard closed it (write deadline)
            pass
        return response

    def _refresh(self, accept: str, encoding: str) -> None:
        """Render the current state in the background (at most one such render at a time)."""
        if self._refreshing is not None and not self._refreshing.done():
            return
        loop = asyncio.get_running_loop()
        self._refreshing = loop.run_in_executor(self._executor, self.cache.get, accept, encoding)
        self._refreshing.add_done_callback(_log_failure)

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
        listening = await listen(
            self.app(), host, port, self.guard, ctx, access_log=False, handle_signals=False
        )
        self._runner, self.address = listening.runner, listening.address
        return self.address

    async def stop(self) -> None:
        if self.auth is not None:  # first: queued checks are cancelled, so no handler waits on them
            self.auth.close()
        self.guard.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self._executor.shutdown(wait=False, cancel_futures=True)
