"""The /metrics scrape path over a real loopback socket, the poller driven by hand: a scrape one poll behind
is answered at once from the previous body while the new state renders in the background; bodies are
written in slices of the cached bytes (no body-sized copy), complete and exact for a slow reader, plain,
gzip and HEAD."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import re
import socket
import time
import tracemalloc
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.exporter.fakes import GoodBackend
from tests.exporter.test_server import eventually
from xpuwatch.exporter.attribution import StaticAttributionSource
from xpuwatch.exporter.collector import Collector
from xpuwatch.exporter.exposition import ExpositionCache
from xpuwatch.exporter.poller import BackendPoller, Poller, PollSettings
from xpuwatch.exporter.server import WRITE_CHUNK_BYTES, Server
from xpuwatch.exporter.settings import WebConfig, WebSettings
from xpuwatch.vendors.base import DeviceSample

OM = "application/openmetrics-text;version=1.0.0"


class Readings(GoodBackend):
    """GoodBackend whose utilization reads 0.01 x the poll number, so each poll's body is recognisable;
    memory and power differ per device (a body that gzip does not shrink to nothing)."""

    def sample(self) -> list[DeviceSample]:
        self.calls += 1
        return [
            DeviceSample(
                d,
                utilization_ratio=self.calls / 100,
                memory_used_bytes=float((i * 2_654_435_761 + self.calls) ** 3 % 80_000_000_007),
                memory_total_bytes=float((i * 40_503 + 7) ** 5 % 80_000_000_009),
                power_watts=(i * 104_729 % 40_009) / 97,
            )
            for i, d in enumerate(self.devices)
        ]


@pytest.fixture
async def served() -> AsyncIterator[tuple[BackendPoller, Server, str]]:
    """A server over a poller that is never started: each ``poll_once()`` is one poll, and no warm-up runs
    (``cache.warm`` is not a listener), so only scrapes render."""
    poller = Poller()
    backend = poller.add(Readings(n=3000), PollSettings(interval=5.0))
    cache = ExpositionCache(Collector("n1", poller.view, StaticAttributionSource(), time.time))
    server = Server(cache, poller, WebSettings("127.0.0.1:0"), WebConfig(), time.time)
    host, port = await server.start()
    try:
        yield backend, server, f"http://{host}:{port}/metrics"
    finally:
        await server.stop()


def sha(body: bytes) -> tuple[int, bytes]:
    return len(body), hashlib.sha256(body).digest()


def utilization(body: bytes) -> set[str]:
    return set(re.findall(rb"accelerator_utilization_ratio\{[^}]*\} (\S+)", body))


async def test_a_scrape_one_poll_behind_gets_the_previous_body_and_the_new_state_renders_meanwhile(
    served: tuple[BackendPoller, Server, str],
) -> None:
    """Fails before: the second scrape rendered poll 2 in the executor and waited for it."""
    backend, server, url = served
    backend.poll_once()
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            assert utilization(await r.read()) == {b"0.01"}
        assert server.cache.renders == 1
        backend.poll_once()  # poll 2 visible, nothing rendered
        async with s.get(url) as r:
            assert utilization(await r.read()) == {b"0.01"}  # served at once, one poll old

        async def rendered_in_background() -> bool:
            async with s.get(url) as r:
                return utilization(await r.read()) == {b"0.02"}

        await eventually(rendered_in_background)
        assert server.cache.renders == 2  # by the background render alone
        backend.poll_once()
        backend.poll_once()  # the cached body is two polls old: the scrape waits for a render of poll 4
        async with s.get(url) as r:
            assert utilization(await r.read()) == {b"0.04"}
        assert server.cache.renders == 3


def slow_get(address: tuple[str, int], head: bytes) -> tuple[bytes, dict[str, str], tuple[int, bytes]]:
    """One request on a blocking socket (run it in a thread), the response read 4 KiB at a time with a
    pause after each read: a slow client, so the server's socket buffer fills and its writes wait. Returns
    (status line, headers, (length, SHA-256) of the body as framed by Content-Length); nothing is held
    whole and no read allocates more than 4 KiB, so the server's allocations are what tracemalloc sees."""
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(4096)
        header, _, rest = data.partition(b"\r\n\r\n")
        status, *lines = header.split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        digest, length = hashlib.sha256(rest), len(rest)
        expected = 0 if head.startswith(b"HEAD") else int(headers["content-length"])
        while length < expected:
            chunk = sock.recv(4096)
            assert chunk, "closed before the whole body"
            digest.update(chunk)
            length += len(chunk)
            time.sleep(0.0002)
        assert sock.recv(4096) == b""  # nothing after the body (HEAD: none at all), then closed
    return status, headers, (length, digest.digest())


async def test_a_slow_reader_gets_the_exact_body_plain_gzip_and_head_without_a_body_sized_copy(
    served: tuple[BackendPoller, Server, str],
) -> None:
    """Fails before on the traced peak: web.Response joined the headers and the whole body into one new
    buffer (and asyncio copied what the socket did not take), a body-sized allocation per scrape."""
    backend, server, _ = served
    host, port = server.address or ("", 0)
    backend.poll_once()
    plain = server.cache.get(OM, "").body
    zipped = server.cache.get(OM, "gzip").body
    assert len(plain) > 16 * WRITE_CHUNK_BYTES and len(zipped) > WRITE_CHUNK_BYTES

    def request(method: str, encoding: str) -> bytes:
        return (
            f"{method} /metrics HTTP/1.1\r\nHost: x\r\nAccept: {OM}\r\n"
            f"Accept-Encoding: {encoding}\r\nConnection: close\r\n\r\n"
        ).encode()

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        status, headers, body = await asyncio.to_thread(slow_get, (host, port), request("GET", "identity"))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert status.startswith(b"HTTP/1.1 200")
    assert body == sha(plain) and headers["content-length"] == str(len(plain))
    assert "content-encoding" not in headers and headers["content-type"].startswith(OM.split(";")[0])
    # What is left: the transport's buffer, up to its high-water mark (64 KiB) plus one slice before aiohttp
    # drains, counted twice while a realloc moves it. Before: over len(plain) (2.8 MiB).
    assert peak < 4 * WRITE_CHUNK_BYTES < len(plain) / 4, (peak, len(plain))

    status, headers, body = await asyncio.to_thread(slow_get, (host, port), request("GET", "gzip"))
    assert body == sha(zipped) and headers["content-length"] == str(len(zipped))
    assert headers["content-encoding"] == "gzip" and gzip.decompress(zipped) == plain

    status, headers, body = await asyncio.to_thread(slow_get, (host, port), request("HEAD", "gzip"))
    assert status.startswith(b"HTTP/1.1 200") and body == (0, hashlib.sha256().digest())
    assert headers["content-length"] == str(len(zipped)) and headers["content-encoding"] == "gzip"
