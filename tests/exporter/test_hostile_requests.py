"""Hostile requests against the listener all three services share (exporter.listener; issue 37), on real
loopback sockets: a compressed request body is refused before it is read (never inflated), a client that
never reads its answer gives its slot to a new connection and is closed at the write deadline, and so is a
client that sends its body slowly. Each fails on main (bodies were inflated on the event loop as they
arrived; a connection was busy until its answer was written or its body read). The 600-client and 8-bomb
reproductions with their figures are benchmarks/hostile_clients.py."""

from __future__ import annotations

import asyncio
import socket
import zlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.exporter.fakes import GoodBackend
from tests.exporter.test_server import build, started
from tests.flood import read_answer
from xpuwatch.exporter.listener import ConnectionGuard, Listening, listen, read_body

BODY = memoryview(bytes(24 * 2**20))  # more than loopback's kernel buffers hold for one connection (~10 MiB)
SLICE = 128 * 1024


def gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzipped (about 1,000:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(2**20)
    return b"".join([*(c.compress(zeros) for _ in range(mib)), c.flush()])


def raw(host: str, port: int, head: str, body: bytes = b"", rcvbuf: int = 0) -> socket.socket:
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect((host, port))
    s.sendall(head.encode() + body)
    return s


def _reset_seen(s: socket.socket) -> bool:
    """True when the server reset ``s`` (read without waiting; what was received before is discarded)."""
    s.setblocking(False)
    try:
        while s.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except BlockingIOError:
        return False
    return False


def closed(s: socket.socket) -> bool:
    """True once the server closed ``s`` (after whatever answer it sent)."""
    try:
        while chunk := s.recv(65536):
            del chunk
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Content-Encoding: gzip", 415),
        ("Content-Encoding: identity, deflate", 415),
        ("Transfer-Encoding: gzip, chunked", 501),
    ],
)
async def test_a_compressed_request_body_is_refused_before_it_is_read(header: str, status: int) -> None:
    """Half a gzip bomb is sent: the answer comes without waiting for (or inflating) the rest, before the
    exporter's routes and credentials are consulted, and says the connection closes after it (aiohttp
    still reads, uninflated, what the client sends for up to 10 s, so that the client reads the answer
    before the close: the guard may evict it meanwhile)."""
    server, poller = build([GoodBackend()])
    await started(server, poller)
    host, port = server.address or ("", 0)
    bomb = gzip_bomb(64)
    length = "" if "chunked" in header else f"Content-Length: {len(bomb)}\r\n"
    first = bomb[: len(bomb) // 2]
    if "chunked" in header:
        first = f"{len(first):x}\r\n".encode() + first + b"\r\n"

    def client() -> bytes:
        s = raw(host, port, f"GET /metrics HTTP/1.1\r\nHost: x\r\n{header}\r\n{length}\r\n", first)
        head = read_answer(s)
        s.close()
        return head

    try:
        head = await asyncio.to_thread(client)
        assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
        assert b"Connection: close" in head
        if status == 415:
            assert b"Accept-Encoding: identity" in head
        # identity is accepted as ever
        s = await asyncio.to_thread(
            raw, host, port, "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Encoding: identity\r\n\r\n"
        )
        assert (await asyncio.to_thread(read_answer, s)).startswith(b"HTTP/1.1 200 ")
        s.close()
    finally:
        poller.stop()
        await server.stop()


async def _big(request: web.Request) -> web.StreamResponse:
    """A large answer written as the exporter writes /metrics: slices of one shared body."""
    response = web.StreamResponse()
    response.content_length = len(BODY)
    await response.prepare(request)
    try:
        for start in range(0, len(BODY), SLICE):
            await response.write(BODY[start : start + SLICE])
        await response.write_eof()
    except ConnectionError:  # closed by the guard
        pass
    return response


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _echo(request: web.Request) -> web.Response:
    return web.Response(text=f"{len(await read_body(request, 2**20))}\n")


@pytest.fixture
async def service(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Listening, ConnectionGuard]]:
    """A service of 8 slots through ``listen``; the write deadline is the test's parameter (default 60 s)."""
    app = web.Application()
    app.router.add_get("/big", _big)
    app.router.add_get("/healthz", _ok)
    app.router.add_post("/echo", _echo)
    guard = ConnectionGuard(max_connections=8, write_timeout=getattr(request, "param", 60.0))
    listening = await listen(app, "127.0.0.1", 0, guard)
    yield listening, guard
    await listening.runner.cleanup()


async def _until(check: object, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):  # a safety net, not a speed assertion
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def _never_reading(host: str, port: int, n: int) -> list[socket.socket]:
    return [
        await asyncio.to_thread(raw, host, port, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", b"", 4096)
        for _ in range(n)
    ]


async def test_clients_that_never_read_give_way_to_a_probe(
    service: tuple[Listening, ConnectionGuard],
) -> None:
    listening, guard = service
    host, port = listening.address
    stuck = await _never_reading(host, port, 8)
    await _until(lambda: guard.count("sending") == 8)  # every slot holds an answer nobody reads
    for _ in range(3):  # a probe still gets in: the answer waiting longest for its client gives way
        s = await asyncio.to_thread(raw, host, port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.to_thread(read_answer, s)).startswith(b"HTTP/1.1 200 ")
        s.close()
    # one gave way for the first probe; the others found the slot that probe left
    assert guard.closed["evicted"] == 1 and guard.closed["full"] == 0
    assert guard.count("sending") == 7 and guard.closed["write_timeout"] == 0
    # the one that gave way was reset: the kernel dropped its unsent answer and the client was told
    assert sum(_reset_seen(s) for s in stuck) == 1
    for s in stuck:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize("service", [1.0], indirect=True)
async def test_clients_that_never_read_are_closed_at_the_write_deadline(
    service: tuple[Listening, ConnectionGuard],
) -> None:
    listening, guard = service
    host, port = listening.address
    stuck = await _never_reading(host, port, 5)
    await _until(lambda: guard.closed["write_timeout"] == 5)  # 1 s after each first stalled
    assert guard.held == 0 and guard.closed["evicted"] == 0
    assert all([await asyncio.to_thread(closed, s) for s in stuck])
    for s in stuck:
        s.close()


async def test_a_body_sent_slowly_gives_way_to_a_new_connection(
    service: tuple[Listening, ConnectionGuard],
) -> None:
    listening, guard = service
    host, port = listening.address
    head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    slow = [await asyncio.to_thread(raw, host, port, head, b"{") for _ in range(8)]
    await _until(lambda: guard.count("receiving") == 8)
    s = await asyncio.to_thread(raw, host, port, head, b"x" * 100)
    assert (await asyncio.to_thread(read_answer, s)).startswith(b"HTTP/1.1 200 ")
    s.close()
    assert guard.closed["evicted"] == 1
    assert await asyncio.to_thread(closed, slow[0])  # the one waiting longest lost its slot
    for c in slow:
        c.close()
