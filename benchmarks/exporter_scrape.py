"""Benchmark: /metrics scrape latency, idle CPU and RSS of the real exporter; node-exporter beside it.

Prints figures; asserts nothing (speed is not a test). Run from the repository root:

    PYTHONPATH=$PWD python3 benchmarks/exporter_scrape.py [--quick]

For each fleet size (8, 64, 512 simulated devices, 5 s polling) and with/without an extra backend whose
every poll takes 30 s, it starts the exporter in a child process and measures 1,000 sequential scrapes (one
keep-alive connection) and 1,000 scrapes issued 50 at a time, with Prometheus's own Accept and
Accept-Encoding headers. Then: the exporter's CPU while idle (8 devices, 5 s polling, no scrapes, 30 s), RSS
after warm-up and after 10,000 scrapes, and Debian's prometheus-node-exporter's scrape p50 and series count.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
PROM_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
HEADERS = {"Accept": PROM_ACCEPT, "Accept-Encoding": "gzip"}
MODELS = [
    ("nvidia", "NVIDIA A100-SXM4-80GB"),
    ("nvidia", "NVIDIA GeForce RTX 4090"),
    ("amd", "AMD Instinct MI250X"),
    ("huawei", "Ascend910B"),
]


def fleet_yaml(n: int) -> str:
    lines = ["seed: 1", "poll_interval: 5", "devices:"]
    for i, (vendor, model) in enumerate(MODELS):
        count = n // len(MODELS) + (1 if i < n % len(MODELS) else 0)
        lines.append(f'  - {{vendor: {vendor}, model: "{model}", count: {count}}}')
    lines += ["timeline:", '  - {at: 0, device: "nvidia/0", profile: training}']
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------
# child mode: the real server, the sim fleet, optionally one extra backend that takes 30 s per poll


class SlowBackend:
    """A backend whose every poll takes ``seconds`` (like a vendor tool stuck on a busy driver)."""

    name = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def open(self) -> None:
        pass

    def sample(self) -> list:
        time.sleep(self.seconds)
        return []

    def close(self) -> None:
        pass


def serve_child(sim_config: str, slow: float, port_file: str) -> None:
    sys.path.insert(0, str(ROOT))
    from exporter.cli import Clocks, assemble
    from exporter.poller import PollSettings
    from exporter.server import Server
    from exporter.settings import Settings, WebConfig, WebSettings
    from vendors.command import SubprocessRunner

    clocks = Clocks(time.time, time.monotonic)
    asm = assemble(Settings(), ["sim"], clocks, SubprocessRunner(), None, {"config": sim_config})
    if slow:
        asm.poller.add(SlowBackend(slow), PollSettings(interval=5, timeout=2 * slow))
    server = Server(asm.cache, asm.poller, WebSettings("127.0.0.1:0"), WebConfig(), clocks.wall)

    async def main() -> None:
        _, port = await server.start()
        Path(port_file).write_text(str(port))
        asm.poller.start()
        await asyncio.Event().wait()

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------------
# measuring


def start_child(n: int, slow: float, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    cfg = tmp / f"fleet-{n}.yaml"
    cfg.write_text(fleet_yaml(n))
    port_file = tmp / f"port-{n}-{slow}"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(cfg), "--slow", str(slow), "--port-file", str(port_file)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("exporter child did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    conn = http.client.HTTPConnection("127.0.0.1", port)
    while True:  # wait for the first poll
        conn.request("GET", "/metrics", headers=HEADERS)
        body = conn.getresponse().read()
        if b"accelerator_up{" in gzip.decompress(body):
            break
        time.sleep(0.1)
    conn.close()
    return proc, port


def sequential(port: int, n: int, path: str = "/metrics") -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=HEADERS)
        r = conn.getresponse()
        r.read()
        out.append(time.perf_counter() - t0)
        assert r.status == 200
    conn.close()
    return out


async def _concurrent(port: int, total: int, width: int) -> list[float]:
    out: list[float] = []
    conn = aiohttp.TCPConnector(limit=width)
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False) as s:

        async def one() -> None:
            t0 = time.perf_counter()
            async with s.get(f"http://127.0.0.1:{port}/metrics", headers=HEADERS) as r:
                await r.read()
                assert r.status == 200
            out.append(time.perf_counter() - t0)

        for _ in range(total // width):
            await asyncio.gather(*(one() for _ in range(width)))
    return out


def concurrent(port: int, total: int, width: int) -> list[float]:
    return asyncio.run(_concurrent(port, total, width))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] * 1000


def cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def series_count(body: bytes) -> int:
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--port-file")
    ap.add_argument("--quick", action="store_true", help="fewer requests and a shorter idle window")
    args = ap.parse_args()
    if args.child:
        serve_child(args.child, args.slow, args.port_file)
        return
    reqs = 200 if args.quick else 1000
    idle = 10 if args.quick else 30
    scrapes_rss = 2000 if args.quick else 10000
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(
            f"{'devices':>7} {'slow backend':>12} {'series':>7} {'seq p50 ms':>10} {'seq p99 ms':>10} "
            f"{'50-conc p50 ms':>14} {'50-conc p99 ms':>14}"
        )
        for n in (8, 64, 512):
            for slow in (0.0, 30.0):
                proc, port = start_child(n, slow, tmp)
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port)
                    conn.request("GET", "/metrics")
                    nseries = series_count(conn.getresponse().read())
                    conn.close()
                    seq = sequential(port, reqs)
                    conc = concurrent(port, reqs, 50)
                    print(
                        f"{n:>7} {'30 s/poll' if slow else 'none':>12} {nseries:>7} {pct(seq, 50):>10.2f} "
                        f"{pct(seq, 99):>10.2f} {pct(conc, 50):>14.2f} {pct(conc, 99):>14.2f}",
                        flush=True,
                    )
                finally:
                    stop(proc)

        proc, port = start_child(8, 0.0, tmp)
        try:
            sequential(port, 100)
            time.sleep(1)
            rss0 = rss_mib(proc.pid)
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle)
            cpu = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0) * 100
            print(f"\nidle CPU (8 devices, 5 s polling, {idle} s, no scrapes): {cpu:.2f} % of one core")
            sequential(port, scrapes_rss)
            rss1 = rss_mib(proc.pid)
            print(
                f"RSS after warm-up: {rss0:.1f} MiB; after {scrapes_rss} more scrapes: {rss1:.1f} MiB "
                f"(growth {rss1 - rss0:+.1f} MiB)"
            )
        finally:
            stop(proc)

        ne = shutil.which("prometheus-node-exporter")
        if not ne:
            print("\nprometheus-node-exporter not installed: no comparison")
            return
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc2 = subprocess.Popen(
            [ne, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port)
                    conn.request("GET", "/metrics")
                    body = conn.getresponse().read()
                    conn.close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            seq = sequential(port, reqs)
            print(
                f"\nnode-exporter (same machine): {series_count(body)} series, scrape p50 {pct(seq, 50):.2f} ms, "
                f"p99 {pct(seq, 99):.2f} ms over {reqs} sequential scrapes"
            )
        finally:
            stop(proc2)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
