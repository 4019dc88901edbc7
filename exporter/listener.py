"""The HTTP listener of all three services (exporter, relay, remediation): accepts connections itself and
bounds what any client can hold, so that a connection flood never starves a scrape or a webhook.

One mechanism for three services (docs/exporter.md "Hardening", docs/relay.md, docs/remediation.md):

- **Connection cap.** At most ``max_connections`` connections are held (512, and never more than the
  open-file limit less ``FD_HEADROOM``).
- **Connections waiting on their client are evictable.** A connection is *reading* from its accept (or
  from the first byte of its next request) until its request header is complete, then *busy* while the
  service works on it, *receiving* while a handler waits for more of its body (``read_body``), *sending*
  while its answer waits for the client to read (the transport paused writing: the kernel's buffers are
  full), and *idle* (kept alive) from the answer's end until its next byte. When the cap is reached, a new
  connection closes the reading, receiving, sending or idle connection that has waited for its client the
  longest; only when every slot is busy is the new one closed. 512 clients that each send one request and
  keep the connection open, that send their body slowly, or that never read their answer therefore never
  keep a scrape or a webhook out.
- **Write deadline** (``write_timeout``, 60 s): an answer not written within that long of the first time
  it waited for its client closes its connection (counted as ``write_timeout``), so a client that never
  reads holds its slot, and the answer's buffered bytes, at most that long even when nobody needs them.
- **Header-read timeout on every request**, not only the first of a connection: a connection that has been
  reading longer than ``header_timeout`` is closed (slowloris, and its keep-alive variant that sends a
  partial second request).
- **Keep-alive timeout** (``keepalive_timeout``, 75 s): an idle connection is closed after that long even
  when nobody needs its slot. Longer than the common 15/30/60 s scrape intervals, so Prometheus keeps its
  connection; far below aiohttp's default of 3,630 s.
- **No request inflation.** aiohttp's parser would inflate a ``Content-Encoding: gzip|deflate|br|zstd``
  body on the event loop as it arrives, before any handler, authentication or body cap runs (a 1 MiB gzip
  of 1 GiB is about 2 s of loop time). ``listen()`` turns that off (``auto_decompress=False``) and puts
  ``identity_only`` first among the app's middlewares: a request whose ``Content-Encoding`` is anything but
  identity gets 415 (with ``Accept-Encoding: identity``), one with a transfer coding other than chunked
  501, before its body is read and before credentials are checked, and its connection is closed after the
  answer. Refused rather than inflated after authentication, because nothing that talks to these services
  compresses a request (Prometheus scrapes with GET, Alertmanager posts plain JSON, approvals are curl
  lines), so inflating would be code and risk for no client.
- **Accept errors** (EMFILE/ENFILE/ENOBUFS/ENOMEM: the process or system is out of file descriptors or
  memory, e.g. a vendor tool holding pipes) are counted in ``xpuwatch_http_accept_errors_total``, logged at
  most once per ``ACCEPT_LOG_INTERVAL_SECONDS`` with the count. The cap then drops to the connections held
  less ``FD_SPARE`` (until a minute passes without such an error) and the longest-inactive connections are
  closed down to it; when none can be closed, accepting pauses like Go's ``net/http`` ``Server.Serve``:
  5 ms, doubling up to 1 s while the errors go on. asyncio's own accept loop logs every failure with a
  traceback (61 MB in 20 s under ``ulimit -n 1024``), which is why this module accepts by itself.

HTTP itself stays aiohttp's: ``listen()`` starts an ``aiohttp.web.AppRunner`` whose connections come through
this listener. aiohttp tells the guard when an answer is written through its access-logger hook
(``AbstractAccessLogger.log``, called after ``write_eof``); that an answer waits for its client, through
the transport's ``pause_writing``/``resume_writing``. Limits: pipelined requests (sent before the
previous answer; no common scraper or Alertmanager does this) may be evicted while queued. A TLS handshake
under way counts as a connection reading its header (held, evictable, ``header_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_log import AccessLogger
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 512
"""Connections held at once (capped further to the open-file limit less ``FD_HEADROOM``)."""
HEADER_TIMEOUT_SECONDS = 10.0
"""A request header (each request's, not only the first of a connection) not complete within this long
closes the connection. Also the TLS handshake timeout."""
KEEPALIVE_TIMEOUT_SECONDS = 75.0
"""An idle kept-alive connection is closed after this long (nginx's default): above the 60 s scrape
interval, so a scraper keeps one connection, and far below aiohttp's 3,630 s."""
FD_HEADROOM = 64
"""File descriptors kept free for everything else (vendor tools' pipes, the kubelet socket, SQLite, logs)."""
FD_SPARE = 16
"""When accept() fails with EMFILE anyway (descriptors held elsewhere), the cap drops to the connections
held less this many, so that the service's own work still finds descriptors."""
WRITE_TIMEOUT_SECONDS = 60.0
"""An answer not written within this long of the first time it waited for its client (the transport paused
writing) closes its connection. Prometheus gives up on a scrape at its scrape_timeout, at most the scrape
interval (60 s is the longest common one), so a longer write helps no scraper; 60 s still carries the largest
/metrics body (9.5 MiB plain at 2,048 devices) at 1.3 Mbit/s, and every other answer is a few KiB."""
BODY_TIMEOUT_SECONDS = 30.0
"""A request body (a webhook's) must arrive within this long (``read_body``): 4 MiB at 1 Mbit/s."""
ACCEPT_LOG_INTERVAL_SECONDS = 60.0
"""Accept errors are logged at most once per this long, with how many there were since the last line."""
ACCEPT_BACKOFF_SECONDS = (0.005, 1.0)
"""Pause of accepting after an accept error: the first, doubled on each further error up to the second
(Go ``net/http`` ``Server.Serve``: 5 ms to 1 s). A successful accept resets it."""
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_CLOSE_REASONS = ("evicted", "header_timeout", "idle_timeout", "write_timeout", "full")
_STATES = ("reading", "receiving", "busy", "sending", "idle")
_WAITING = ("reading", "receiving", "sending", "idle")
"""States in which a connection waits for its client: evictable, the one waiting longest first."""
_connections: dict[object, _Guarded] = {}
"""aiohttp's protocol (its RequestHandler) -> the connection wrapping it, for ``read_body``."""


class _Handshake:
    """A TLS connection accepted, its handshake under way: held by the guard (it costs a descriptor) and
    evictable like a connection still reading its header. ``task`` is the listener's setup task."""

    __slots__ = ("since", "task")

    def __init__(self, since: float) -> None:
        self.since = since
        self.task: asyncio.Task[Any] | None = None


class _Guarded(asyncio.Protocol):
    """Wraps aiohttp's per-connection protocol: tracks the connection's state for the guard."""

    __slots__ = (
        "_tail",
        "admitted",
        "guard",
        "handshake",
        "inner",
        "since",
        "stalled_at",
        "state",
        "transport",
    )

    def __init__(
        self, inner: asyncio.Protocol, guard: ConnectionGuard, handshake: _Handshake | None = None
    ) -> None:
        self.inner = inner
        self.guard = guard
        self.handshake = handshake
        self.transport: asyncio.Transport | None = None
        self.state = "reading"  # one of _STATES
        self.since = 0.0  # loop time the current state began
        self.stalled_at: float | None = None  # the current answer first waited for the client
        self.admitted = False
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: the listener's
        if self.handshake is not None:  # through the TLS handshake: counted as a connection from now on
            self.guard.handshake_done(self.handshake)
        if self.guard.admit(self):
            self.admitted = True
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.state == "idle":
            self.guard.moved(self, "reading")
            self._tail = b""
        if self.state == "reading":
            seen = self._tail + data
            if b"\n\r\n" in seen or b"\n\n" in seen:  # the header's end (CRLF, or bare LF as parsers allow)
                self.guard.moved(self, "busy")
                self._tail = b""
            else:
                self._tail = seen[-2:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.guard.stalled(self)
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.state == "sending":
            self.guard.moved(self, "busy")
        self.inner.resume_writing()


class ConnectionGuard:
    """Bounds the connections one listener holds (see the module docstring for the rules).

    ``max_connections`` is lowered to the soft open-file limit less ``FD_HEADROOM`` (at least 8).
    Counters (read by ``collector()``): ``closed[reason]`` connections closed by the guard, reason one of
    evicted, header_timeout, idle_timeout, write_timeout, full; ``accept_errors[errno name]``; ``peak``
    connections held.
    """

    def __init__(
        self,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout: float = HEADER_TIMEOUT_SECONDS,
        keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
        clock: Callable[[], float] | None = None,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        try:
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if soft != resource.RLIM_INFINITY:
                max_connections = max(8, min(max_connections, soft - FD_HEADROOM))
        except (ImportError, ValueError, OSError):
            pass
        self.max_connections = self.cap = max_connections
        self._starved_at: float | None = None  # last accept() failure for want of descriptors
        self.header_timeout = header_timeout
        self.keepalive_timeout = keepalive_timeout
        self.write_timeout = write_timeout
        self._clock = clock
        # Per state, in the order they entered it: the first is the one waiting longest (O(1) eviction).
        self._states: dict[str, dict[_Guarded, None]] = {state: {} for state in _STATES}
        # Connections whose current answer has waited for its client, in the order it first did.
        self._stalled: dict[_Guarded, None] = {}
        self._handshakes: dict[_Handshake, None] = {}  # TLS connections not yet through it, oldest first
        self.closed = dict.fromkeys(_CLOSE_REASONS, 0)
        self.accept_errors: dict[str, int] = {}
        self.peak = 0
        self._sweeper: asyncio.TimerHandle | None = None

    def now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    @property
    def held(self) -> int:
        """Connections held, TLS handshakes under way included."""
        return sum(len(c) for c in self._states.values()) + len(self._handshakes)

    @property
    def handshaking(self) -> int:
        return len(self._handshakes)

    def handshake_started(self) -> _Handshake | None:
        """A TLS connection was accepted: its handshake as held (None: no room, close the socket)."""
        if not self._make_room():
            return None
        handshake = _Handshake(self.now())
        self._handshakes[handshake] = None
        if self._sweeper is None:
            self._schedule_sweep()
        return handshake

    def handshake_done(self, handshake: _Handshake) -> None:
        """Through (the connection is admitted next) or failed: no longer a handshake."""
        self._handshakes.pop(handshake, None)

    def _make_room(self) -> bool:
        """Below the cap, or made so by closing the longest-inactive connection; False if all are busy."""
        if self.held < self.max_connections:
            return True
        victim = self._oldest_inactive()
        if victim is None:
            self.closed["full"] += 1
            return False
        self._close(victim, "evicted")
        return True

    def count(self, state: str) -> int:
        """Connections now in ``state`` (tls_handshake, reading, receiving, busy, sending, idle)."""
        return len(self._handshakes) if state == "tls_handshake" else len(self._states[state])

    def wrap(
        self, factory: Callable[[], asyncio.Protocol], handshake: _Handshake | None = None
    ) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(factory(), self, handshake)

    def admit(self, conn: _Guarded) -> bool:
        """Take a new connection: True if it may be served. Evicts the longest-inactive reading or idle
        connection when the cap is reached; refuses (closes) the new one when every slot is busy."""
        now = self.now()
        if not self._make_room():
            assert conn.transport is not None
            conn.transport.abort()
            return False
        conn.state, conn.since = "reading", now
        self._states["reading"][conn] = None
        _connections[conn.inner] = conn
        self.peak = max(self.peak, self.held)
        if self._sweeper is None:
            self._schedule_sweep()
        return True

    def moved(self, conn: _Guarded, state: str) -> None:
        """``conn`` entered ``state`` now (it goes to the back of that state's queue)."""
        if conn.state == state or conn not in self._states[conn.state]:
            return
        del self._states[conn.state][conn]
        conn.state, conn.since = state, self.now()
        self._states[state][conn] = None

    def answered(self, protocol: object) -> None:
        """aiohttp wrote a whole answer on the connection of ``protocol`` (its RequestHandler)."""
        conn = _connections.get(protocol)
        if conn is not None and conn.guard is self and conn.state in ("busy", "sending", "receiving"):
            self.moved(conn, "idle")
            self._stalled.pop(conn, None)
            conn.stalled_at = None

    def stalled(self, conn: _Guarded) -> None:
        """The transport of ``conn`` paused writing: its answer waits for the client to read. The write
        deadline runs from the first such pause of the answer."""
        if conn.state != "busy" or conn not in self._states["busy"]:
            return
        self.moved(conn, "sending")
        if conn.stalled_at is None:
            conn.stalled_at = conn.since
            self._stalled[conn] = None

    def release(self, conn: _Guarded) -> None:
        self._states[conn.state].pop(conn, None)
        self._stalled.pop(conn, None)
        if _connections.get(conn.inner) is conn:
            del _connections[conn.inner]

    def out_of_descriptors(self) -> bool:
        """accept() failed for want of descriptors that something else holds: lower the cap to what is held
        less ``FD_SPARE`` (at least 8; back to the configured cap after ``ACCEPT_LOG_INTERVAL_SECONDS``
        without such an error) and close the longest-inactive connections down to it, so the accept
        waiting in the backlog and the service's own outgoing connections (vendor tools' pipes, bot
        deliveries, API calls) find descriptors. True if a connection was closed (a retry will find one)."""
        self._starved_at = self.now()
        self.max_connections = max(8, min(self.max_connections, self.held - FD_SPARE))
        closed = False
        while self.held >= self.max_connections:
            victim = self._oldest_inactive()
            if victim is None:
                break
            self._close(victim, "evicted")
            closed = True
        return closed

    def _oldest_inactive(self) -> _Guarded | _Handshake | None:
        queues: tuple[dict[Any, None], ...] = (
            *(self._states[state] for state in _WAITING),
            self._handshakes,
        )
        firsts = [next(iter(q)) for q in queues if q]
        return min(firsts, key=lambda c: c.since, default=None)

    def _close(self, conn: _Guarded | _Handshake, reason: str) -> None:
        self.closed[reason] += 1
        if isinstance(conn, _Handshake):
            self.handshake_done(conn)
            if conn.task is not None:
                conn.task.cancel()  # asyncio closes the socket of a cancelled connection setup
            return
        unsent = conn.stalled_at is not None  # its answer waits in the kernel for a client that does not read
        self.release(conn)
        if conn.transport is not None:
            if unsent:
                _reset(conn.transport)
            conn.transport.abort()

    def _schedule_sweep(self) -> None:
        period = min(1.0, self.header_timeout, self.keepalive_timeout, self.write_timeout)
        self._sweeper = asyncio.get_running_loop().call_later(period, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = self.now()
        queues: tuple[tuple[dict[Any, None], float, str], ...] = (
            (self._states["reading"], self.header_timeout, "header_timeout"),
            (self._handshakes, self.header_timeout, "header_timeout"),
            (self._states["idle"], self.keepalive_timeout, "idle_timeout"),
        )
        for queue, limit, reason in queues:
            while queue:
                first = next(iter(queue))
                if now - first.since <= limit:
                    break
                self._close(first, reason)
        while self._stalled:
            first = next(iter(self._stalled))
            if now - (first.stalled_at or now) <= self.write_timeout:
                break
            self._close(first, "write_timeout")
        if self._starved_at is not None and now - self._starved_at > ACCEPT_LOG_INTERVAL_SECONDS:
            self.max_connections, self._starved_at = self.cap, None
        if self.held:
            self._schedule_sweep()

    def accept_failed(self, exc: OSError) -> None:
        """Count one accept error (its errno name)."""
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self.accept_errors[name] = self.accept_errors.get(name, 0) + 1

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def collector(self) -> Collector:
        """A prometheus-client collector of this guard's figures (see ``GuardCollector``)."""
        return GuardCollector(self)

    def access_log_class(self, delegate: bool, from_status: int = 0) -> type[AbstractAccessLogger]:
        """An aiohttp access-logger class that tells this guard when an answer is written; with
        ``delegate`` it also writes aiohttp's usual access line (when its logger is enabled for INFO) for
        answers with a status of at least ``from_status``, and for every answer when it is enabled for DEBUG."""
        guard = self

        class Answered(AccessLogger):
            @property
            def enabled(self) -> bool:
                return True

            def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
                guard.answered(request.protocol)
                if (
                    delegate
                    and self.logger.isEnabledFor(logging.INFO)
                    and (response.status >= from_status or self.logger.isEnabledFor(logging.DEBUG))
                ):
                    super().log(request, response, time)

        return Answered


_LINGER_RESET = struct.pack("ii", 1, 0)


def _reset(transport: asyncio.BaseTransport) -> None:
    """Make the coming close a reset (SO_LINGER 0): a plain close would leave the kernel holding the unsent
    answer (up to the socket's send buffer, megabytes) and retrying it to a client that never reads for
    minutes after the descriptor is gone; a reset frees it and tells the client."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


class GuardCollector(Collector):
    """``xpuwatch_http_connections{state}`` (gauge: tls_handshake, reading, receiving, busy, sending, idle),
    ``xpuwatch_http_max_connections`` (gauge), ``xpuwatch_http_connections_closed_total{reason}`` (counter:
    evicted, header_timeout, idle_timeout, write_timeout, full) and ``xpuwatch_http_accept_errors_total{errno}`` (counter:
    EMFILE, ENFILE, ENOBUFS, ENOMEM, or any other errno name accept() failed with)."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard

    def collect(self) -> Iterator[Metric]:
        g = self.guard
        conns = GaugeMetricFamily(
            "xpuwatch_http_connections", "HTTP connections held, by state.", labels=("state",)
        )
        for state in ("tls_handshake", *_STATES):
            conns.add_metric([state], g.count(state))
        yield conns
        yield GaugeMetricFamily(
            "xpuwatch_http_max_connections",
            "HTTP connections held at most (the open-file limit lowers it).",
            value=g.max_connections,
        )
        closed = CounterMetricFamily(
            "xpuwatch_http_connections_closed",
            "HTTP connections closed by the connection guard, by reason.",
            labels=("reason",),
        )
        for reason in _CLOSE_REASONS:
            closed.add_metric([reason], g.closed[reason])
        yield closed
        errors = CounterMetricFamily(
            "xpuwatch_http_accept_errors",
            "accept() failures on the HTTP listener (EMFILE: out of file descriptors), by errno.",
            labels=("errno",),
        )
        for name in sorted({"EMFILE", *g.accept_errors}):
            errors.add_metric([name], g.accept_errors.get(name, 0))
        yield errors


class _Listener(asyncio.AbstractServer):
    """Accepts on bound listening sockets and hands each connection to aiohttp through the guard."""

    def __init__(
        self,
        sockets: list[socket.socket],
        factory: Callable[[], asyncio.Protocol],
        guard: ConnectionGuard,
        ssl_context: ssl.SSLContext | None,
        backlog: int,
    ) -> None:
        self._socks = sockets
        self._factory = factory
        self._guard = guard
        self._ssl = ssl_context
        self._backlog = backlog
        self._loop = asyncio.get_running_loop()
        self._serving = False
        self._paused: asyncio.TimerHandle | None = None
        self._backoff = 0.0
        self._unlogged = 0  # accept errors not logged yet
        self._latest = ""
        self._logged_at: float | None = None
        self._report: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._socks)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._serving = True
        for sock in self._socks:
            sock.setblocking(False)
            sock.listen(self._backlog)
        self._watch()

    async def serve_forever(self) -> None:  # pragma: no cover - aiohttp never calls it
        raise NotImplementedError

    def _watch(self) -> None:
        for sock in self._socks:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _unwatch(self) -> None:
        for sock in self._socks:
            self._loop.remove_reader(sock.fileno())

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self._backlog):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._failed(exc)
                return
            self._backoff = 0.0
            conn.setblocking(False)
            self._start(conn)

    def _start(self, conn: socket.socket) -> None:
        guard = self._guard
        if self._ssl is None:  # the guard admits it in connection_made, right away
            handshake = None
            coro = self._loop.connect_accepted_socket(guard.wrap(self._factory), conn)
        else:
            handshake = guard.handshake_started()
            if handshake is None:  # every slot busy
                conn.close()
                return
            coro = self._loop.connect_accepted_socket(
                guard.wrap(self._factory, handshake),
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=guard.header_timeout,
            )
        task = self._loop.create_task(coro)
        if handshake is not None:
            handshake.task = task
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._started(t, handshake))

    def _started(self, task: asyncio.Task[Any], handshake: _Handshake | None) -> None:
        self._tasks.discard(task)
        if handshake is not None:  # a failed or timed-out handshake is no longer held
            self._guard.handshake_done(handshake)
        if not task.cancelled() and task.exception() is not None:
            log.debug("connection setup failed: %s", task.exception())

    def _failed(self, exc: OSError) -> None:
        self._guard.accept_failed(exc)
        self._unlogged += 1
        self._latest = str(exc.strerror or exc)
        if self._report is None:  # the first error is logged at once, later ones at most once an interval
            now = self._loop.time()
            due = 0.0 if self._logged_at is None else self._logged_at + ACCEPT_LOG_INTERVAL_SECONDS - now
            self._report = self._loop.call_later(max(0.0, due), self._log_errors)
        self._unwatch()
        if exc.errno in _RESOURCE_ERRNOS and self._guard.out_of_descriptors():
            # The evicted socket is closed by a callback already queued; accepting again after it finds
            # the freed descriptor. No pause: an idle client gave way, the new one is served.
            self._paused = self._loop.call_later(0, self._resume)
            return
        low, high = ACCEPT_BACKOFF_SECONDS
        self._backoff = min(high, max(low, self._backoff * 2))
        self._paused = self._loop.call_later(self._backoff, self._resume)

    def _log_errors(self) -> None:
        self._report = None
        if self._unlogged:
            log.warning(
                "accept() failed %d time(s) since the last report, latest: %s; connections capped at %d"
                " (the longest-inactive closed), else accepting pauses 5 ms..1 s;"
                " xpuwatch_http_accept_errors_total counts them all",
                self._unlogged,
                self._latest,
                self._guard.max_connections,
            )
            self._logged_at, self._unlogged = self._loop.time(), 0

    def _resume(self) -> None:
        self._paused = None
        if self._serving:
            self._watch()

    def close(self) -> None:
        if not self._serving and not self._socks:
            return
        if self._serving and self._paused is None:
            self._unwatch()
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
        if self._report is not None:  # what the last interval held is logged, not lost
            self._report.cancel()
            self._log_errors()
        self._serving = False
        for sock in self._socks:
            sock.close()
        self._socks = []
        self._guard.stop()

    async def wait_closed(self) -> None:
        return None


class GuardedSite(web.TCPSite):
    """aiohttp's TCPSite, its connections accepted by ``_Listener`` through a ``ConnectionGuard``."""

    def __init__(self, runner: web.BaseRunner, guard: ConnectionGuard, **kw: Any) -> None:
        super().__init__(runner, **kw)
        self._guard = guard

    async def start(self) -> None:
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        # create_server binds (every address of the host, IPv4 and IPv6) without accepting; the sockets
        # move to the listener, which accepts.
        bound = await loop.create_server(
            asyncio.Protocol,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            start_serving=False,
        )
        socks = [s.dup() for s in bound.sockets]
        bound.close()
        listener = _Listener(socks, server, self._guard, self._ssl_context, self._backlog)
        await listener.start_serving()
        self._server = listener
        self._bound_port = socks[0].getsockname()[1] if socks else self._port


class BodyTooLarge(Exception):
    """The request body is over the limit (answer 413)."""


class BodyLost(Exception):
    """The connection closed before the whole body arrived (the client left, or the guard gave its slot to
    another connection while it waited for the body): there is nobody to answer."""


async def read_body(request: web.BaseRequest, limit: int, timeout: float | None = None) -> bytes:
    """The request body: at most ``limit`` bytes (else BodyTooLarge), complete within ``timeout`` seconds
    (default ``BODY_TIMEOUT_SECONDS``; else TimeoutError); BodyLost when the connection closes first. The
    connection guard times out headers only, so this bounds how long a client sending its body slowly holds
    a connection; while it waits, the connection is *receiving*, which the guard may evict for a new one."""
    content = request.content
    if content.is_eof():  # the whole body has arrived (a webhook usually has, with its headers): no timer
        whole = content.read_nowait(-1)
        if len(whole) > limit:
            raise BodyTooLarge(f"body exceeds {limit} bytes")
        return whole
    conn = _connections.get(request.protocol)
    if conn is not None:
        conn.guard.moved(conn, "receiving")
    body = bytearray()
    try:
        async with asyncio.timeout(BODY_TIMEOUT_SECONDS if timeout is None else timeout):
            async for chunk in request.content.iter_chunked(65536):
                body += chunk
                if len(body) > limit:
                    raise BodyTooLarge(f"body exceeds {limit} bytes")
    except ConnectionError:  # evicted, or the client closed: aiohttp sets "Connection lost" on the payload
        raise BodyLost("connection closed before the body arrived") from None
    finally:
        if conn is not None and conn.state == "receiving":
            conn.guard.moved(conn, "busy")
    return bytes(body)


IDENTITY = "identity"


@web.middleware
async def identity_only(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """415 for a request whose ``Content-Encoding`` is not identity, 501 for a transfer coding other than
    chunked (RFC 9112 6.1; aiohttp refuses one that does not end in chunked itself), before the body is read
    and before any credential check; the connection closes after the answer. ``listen()`` puts it first."""
    codings = [
        c.strip().lower() for v in request.headers.getall("Content-Encoding", ()) for c in v.split(",")
    ]
    if any(c not in ("", IDENTITY) for c in codings):
        response = web.Response(
            status=415,
            text="request bodies are accepted without content coding only (Content-Encoding: identity)\n",
            headers={"Accept-Encoding": IDENTITY},
        )
        response.force_close()
        return response
    transfer = [
        c.strip().lower() for v in request.headers.getall("Transfer-Encoding", ()) for c in v.split(",")
    ]
    if any(c not in ("", "chunked") for c in transfer):
        response = web.Response(status=501, text="transfer codings other than chunked are not supported\n")
        response.force_close()
        return response
    return await handler(request)


@dataclass(frozen=True)
class Listening:
    """A started service: its aiohttp runner (``await runner.cleanup()`` stops it) and bound (host, port)."""

    runner: web.AppRunner
    address: tuple[str, int]


async def listen(
    app: web.Application,
    host: str | None,
    port: int,
    guard: ConnectionGuard,
    ssl_context: ssl.SSLContext | None = None,
    access_log: bool = True,
    access_log_from: int = 0,
    **runner_kw: Any,
) -> Listening:
    """Start ``app`` on host:port (port 0 picks one) through ``guard``, request bodies never inflated
    (``identity_only`` put first among the app's middlewares). ``access_log``: write aiohttp's access lines
    (logger ``aiohttp.access``, INFO), for answers with a status of at least ``access_log_from`` (every
    answer when that logger is enabled for DEBUG). Raises OSError when it cannot listen (the runner is
    cleaned up first)."""
    if identity_only not in app.middlewares:
        app.middlewares.insert(0, identity_only)
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access"),
        access_log_class=guard.access_log_class(delegate=access_log, from_status=access_log_from),
        keepalive_timeout=guard.keepalive_timeout,
        auto_decompress=False,  # the parser would inflate a gzip body on the loop before any handler
        **runner_kw,
    )
    await runner.setup()
    site = GuardedSite(
        runner, guard, host=host or None, port=port, ssl_context=ssl_context, reuse_address=True
    )
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound = runner.addresses[0] if runner.addresses else (host, port)
    return Listening(runner, (str(bound[0]), int(bound[1])))
