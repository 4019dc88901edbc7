"""Hostile clients on real loopback sockets, for the connection-guard tests of all three services
(exporter.listener; issue 21): idle keep-alive floods, slow partial requests, and a service started in a
child process under a lowered open-file limit. Blocking sockets: async tests call these in a thread."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import os, resource, sys
soft, eat = int(sys.argv[1]), int(sys.argv[2])
if soft:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(eat)]  # descriptors something else holds
sys.argv = ["xpuwatch", *sys.argv[3:]]
from xpuwatch.entry import main
sys.exit(main())
"""


@dataclass
class Child:
    """A service (``xpuwatch <args>``) in a child process; its stdout and stderr go to ``log``."""

    proc: subprocess.Popen[bytes]
    log: Path
    host: str = ""
    port: int = 0

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_child(
    args: list[str],
    log: Path,
    address: str | None = None,
    nofile: int = 0,
    eat_fds: int = 0,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> Child:
    """Start ``xpuwatch *args`` with RLIMIT_NOFILE's soft limit lowered to ``nofile`` (0: unchanged) and
    ``eat_fds`` descriptors opened before it starts. ``address``: a regex with (host, port) groups found in
    its output once it listens; None: wait until something accepts on ``env['FLOOD_PORT']``."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")},
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(nofile), str(eat_fds), *args],
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    child = Child(proc, log)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            child.stop()
            raise AssertionError(f"service did not start: {child.text()[-2000:]}")
        if address is not None:
            found = re.search(address, child.text())
            if found:
                child.host, child.port = found.group(1), int(found.group(2))
                return child
        else:
            child.host, child.port = "127.0.0.1", int(full_env["FLOOD_PORT"])
            try:
                socket.create_connection((child.host, child.port), timeout=1).close()
                return child
            except OSError:
                pass
        time.sleep(0.05)


def read_answer(sock: socket.socket) -> bytes:
    """One HTTP/1.1 answer (header and a Content-Length body) from ``sock``; raises OSError/EOFError."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("closed before an answer")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("closed inside an answer")
        body += chunk
    return head


def idle_keepalive(host: str, port: int, n: int, path: str = "/healthz") -> list[socket.socket]:
    """``n`` connections that each send one ``GET path``, read the answer and then stay open, idle."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: flood\r\n\r\n".encode())
        head = read_answer(s)
        assert head.startswith(b"HTTP/1.1 200"), head
        socks.append(s)
    return socks


class Dribbler(threading.Thread):
    """Sends each socket a partial second request, then one more header line per ``period`` seconds,
    never finishing the header (slowloris on kept-alive connections). ``stop()`` ends it."""

    def __init__(self, socks: list[socket.socket], path: str = "/healthz", period: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.socks, self.period = socks, period
        self.first = f"GET {path} HTTP/1.1\r\nHost: flood\r\n".encode()
        self._done = threading.Event()

    def run(self) -> None:
        line = self.first
        while not self._done.is_set():
            for s in self.socks:
                with contextlib.suppress(OSError):  # evicted or timed out: the guard did its job
                    s.sendall(line)
            line = b"X-Slow: 1\r\n"
            self._done.wait(self.period)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def timed(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 10
) -> float:
    """Seconds until ``url`` answered (GET, or POST of ``body``); raises AssertionError unless 2xx."""
    req = urllib.request.Request(url, data=body, headers=headers or {})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            assert 200 <= r.status < 300, r.status
    except (OSError, urllib.error.URLError) as exc:
        raise AssertionError(f"{url}: no answer after {time.perf_counter() - t0:.1f} s: {exc}") from None
    return time.perf_counter() - t0


def summary(times: list[float]) -> str:
    """``p50 12 ms, max 40 ms (n=10)`` for the report and docs."""
    return f"p50 {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms (n={len(times)})"


def metric(host: str, port: int, name: str, **labels: str) -> float:
    """The value of one sample of ``http://host:port/metrics``; AssertionError when absent."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{name}\{{{want}\}} (\S+)$", text, re.M)
    assert found, f"{name}{{{want}}} not in /metrics"
    return float(found.group(1))


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
