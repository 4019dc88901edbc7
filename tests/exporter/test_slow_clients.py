"""Slow clients (loopback only, bounded loops): the connection cap with its reserve keeps a real scrape
answering, the header-read timeout closes a client that never finishes its header, and 1,100 slow
connections against a 1,024 open-file limit neither flood the log with EMFILE nor stop real scrapes."""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest

from exporter.server import ConnectionGuard
from tests.exporter.conftest import ROOT, cli_env
from tests.exporter.fakes import GoodBackend
from tests.exporter.test_server import build, started

PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # the header never ends


async def open_slow(host: str, port: int, n: int) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(n):
        _, w = await asyncio.open_connection(host, port)
        w.write(PARTIAL)
        writers.append(w)
    await asyncio.gather(*(w.drain() for w in writers), return_exceptions=True)
    return writers


async def test_scrapes_answer_under_a_slow_client_flood_and_the_cap_holds() -> None:
    guard = ConnectionGuard(max_connections=40, reserve=8, header_timeout=30)
    server, poller = build([GoodBackend()])
    server.guard = guard
    url = await started(server, poller)
    host, port = server.address or ("", 0)
    try:
        slow = await open_slow(host, port, 100)  # far more than the cap
        async with aiohttp.ClientSession() as s:
            for _ in range(5):
                async with s.get(url + "/metrics") as r:
                    assert r.status == 200 and b"accelerator_up" in await r.read()
            async with s.get(url + "/healthz") as r:
                assert r.status == 200
        assert guard.peak <= 40
        waiting = sum(1 for c in guard._conns if c.waiting)
        assert waiting <= 40 - 8  # slow clients never take the reserve
        assert guard.closed >= 100 - 32  # the oldest slow clients lost their slots
        for w in slow:
            w.close()
    finally:
        poller.stop()
        await server.stop()


async def test_a_header_that_never_ends_is_closed_after_the_timeout() -> None:
    server, poller = build([GoodBackend()])
    server.guard = ConnectionGuard(header_timeout=0.5)
    await started(server, poller)
    host, port = server.address or ("", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(PARTIAL)
        async with asyncio.timeout(30):  # a safety net; the guard closes it after ~0.5-1.5 s
            assert await reader.read() == b""  # closed by the server, no response
        assert server.guard.closed == 1
        writer.close()
    finally:
        poller.stop()
        await server.stop()


CHILD_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
sys.argv = ["xpuwatch", "serve", "--simulate", "--web.listen-address", "127.0.0.1:0"]
from exporter.entry import main
main()
"""


@pytest.mark.slow
def test_1100_slow_connections_under_a_1024_fd_limit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1400:
        pytest.skip("the test process itself needs ~1,200 file descriptors")
    log = tmp_path / "log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_LIMIT],
            cwd=ROOT,
            env=cli_env(),
            stderr=err,
            stdout=subprocess.DEVNULL,
        )
    socks: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60  # safety net
        while "listening on" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.05)
        url = log.read_text().split("listening on ", 1)[1].split()[0].rsplit("/", 1)[0]
        host, port = url.split("//")[1].rsplit(":", 1)
        for _ in range(1100):
            s = socket.create_connection((host, int(port)))
            s.sendall(PARTIAL)
            socks.append(s)
        for _ in range(5):
            with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
                assert r.status == 200 and b"accelerator_up" in r.read()
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    assert text.count("Too many open files") + text.count("out of system resource") <= 2, text[-2000:]
