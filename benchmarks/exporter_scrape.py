"""Benchmark: the exporter's render cost, event-loop lag, scrape latency against nginx, idle CPU and RSS;
node-exporter beside it. Prints figures; asserts nothing (speed is not a test). Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/exporter_scrape.py [--quick]

1. Per-poll render CPU per series (in process, frozen clock), at 8 / 64 / 512 / 2,048 simulated devices,
   of the OpenMetrics body Prometheus negotiates: "render" is what the exporter does per poll (a
   FastEncoder writing the series straight from the samples, SeriesWriter); for comparison, building
   prometheus-client families ("families") and writing them with the prefix-caching FastEncoder ("fam+enc",
   the path before SeriesWriter) or with prometheus-client's encoder; gzip CPU at levels 1 / 6.
   ``--render-only`` runs this section alone.
2. At 512 devices, 5 s polling, the real server in a child process: gzip scrape p50/p99 (sequential, one
   keep-alive connection; and 50 at a time) beside nginx serving the same bytes (plain and gzip_static);
   the child's maximum event-loop lag (a 10 ms ticker) while it polls and serves; its CPU while scraped
   every 15 s and while not scraped at all; its RSS before and after 10,000 scrapes.
3. Debian's prometheus-node-exporter: scrape latency and CPU per series per scrape.

nginx is a benchmark-only dependency (Debian ``nginx-light`` or ``nginx``; skipped with a note if absent).
The machine may be shared: the figures are only comparable within one run (it interleaves the parts).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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


def serve_child(sim_config: str, slow: float, port_file: str, lag_file: str | None = None) -> None:
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

    async def ticker() -> None:
        """Event-loop lag: how late a 10 ms sleep wakes up; max and p99 (ms) are written to ``lag_file``."""
        lags: list[float] = []
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - t0 - 0.01)
            if lag_file and len(lags) % 50 == 0:
                xs = sorted(lags)
                Path(lag_file).write_text(f"{xs[-1] * 1000:.2f} {xs[int(0.99 * (len(xs) - 1))] * 1000:.2f}")

    async def main() -> None:
        _, port = await server.start()
        Path(port_file).write_text(str(port))
        gc.freeze()  # as exporter.cli._serve does before the first poll
        asm.poller.start()
        await asyncio.sleep(0.5)
        tasks = [asyncio.create_task(ticker())] if lag_file else []  # 100 wake-ups a second cost CPU
        await asyncio.Event().wait()
        del tasks

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------------
# measuring


def start_child(
    n: int, slow: float, tmp: Path, lag_file: Path | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    cfg = tmp / f"fleet-{n}.yaml"
    cfg.write_text(fleet_yaml(n))
    port_file = tmp / f"port-{n}-{slow}"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", str(cfg), "--slow", str(slow), "--port-file", str(port_file)]
        + (["--lag-file", str(lag_file)] if lag_file else []),
        # As the image runs it (deploy/Dockerfile): big bodies mmapped, not carved from the heap.
        env={**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_MMAP_THRESHOLD_": "262144"},
    )
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("exporter child did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    conn = http.client.HTTPConnection("127.0.0.1", port)
    while True:  # wait for the first poll; /readyz, not /metrics: a scrape would start keeping a body warm
        conn.request("GET", "/readyz")
        resp = conn.getresponse()
        resp.read()
        if resp.status == 200:
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


def render_costs(sizes: tuple[int, ...], polls: int, every_breakdown: bool = False) -> None:
    """Per-poll render CPU per series, in process, on a frozen clock (values still change per poll: the
    simulator's readings depend on the poll count through its seeded noise)."""
    sys.path.insert(0, str(ROOT))
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    from exporter.cli import Clocks, assemble
    from exporter.exposition import FastEncoder, fast_encoder
    from exporter.selection import Selection
    from exporter.settings import Settings
    from vendors.command import SubprocessRunner

    # --every-breakdown: nothing switched off (the series before metric selection existed)
    settings = Settings(metrics=Selection()) if every_breakdown else Settings()

    reference, _ = choose_encoder(PROM_ACCEPT)
    print(
        f"{'devices':>7} {'series':>7} {'render us/s':>11} {'families us/s':>13} {'fast enc us/s':>13} "
        f"{'fam+enc us/s':>12} {'prom-client us/s':>16} {'gzip1 ms':>8} {'gzip6 ms':>8} {'body KiB':>8}"
    )
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            cfg = Path(d) / f"fleet-{n}.yaml"
            cfg.write_text(fleet_yaml(n))
            asm = assemble(
                settings,
                ["sim"],
                Clocks(lambda: 1.7e9, time.monotonic),
                SubprocessRunner(),
                None,
                {"config": str(cfg)},
            )
            poller = asm.poller.pollers[0]
            # the device families alone: the served registry also holds build_info and process/python
            # families, read at each render, which would make the two bodies differ by their values
            devices_only = CollectorRegistry(auto_describe=False)
            devices_only.register(asm.collector)
            fast = fast_encoder(reference)
            direct = fast_encoder(reference)
            assert isinstance(fast, FastEncoder) and isinstance(direct, FastEncoder)
            poller.poll_once()
            fast(devices_only)  # the first render fills the prefix caches
            direct.render(asm.collector)
            fam_cpu = enc_cpu = ref_cpu = direct_cpu = 0.0
            series = 0
            for _ in range(polls):
                poller.poll_once()
                t0 = time.process_time()
                fams = list(asm.collector.collect())
                t1 = time.process_time()
                body = fast.encode(fams)
                t2 = time.process_time()
                written = direct.render(asm.collector)
                t3 = time.process_time()
                assert written == body, "SeriesWriter and FastEncoder disagree"
                fam_cpu += t1 - t0
                enc_cpu += t2 - t1
                direct_cpu += t3 - t2
                series = sum(len(f.samples) for f in fams)
            t0 = time.process_time()
            ref_body = reference(devices_only)
            ref_cpu = time.process_time() - t0 - fam_cpu / polls
            assert ref_body == body, "FastEncoder and prometheus-client disagree"
            gz = {}
            for level in (1, 6):
                t0 = time.process_time()
                gzip.compress(body, compresslevel=level)
                gz[level] = (time.process_time() - t0) * 1000
            per = 1e6 / (series * polls)
            print(
                f"{n:>7} {series:>7} {direct_cpu * per:>11.2f} {fam_cpu * per:>13.2f} {enc_cpu * per:>13.2f} "
                f"{(fam_cpu + enc_cpu) * per:>12.2f} {ref_cpu * 1e6 / series + fam_cpu * per:>16.2f} "
                f"{gz[1]:>8.1f} {gz[6]:>8.1f} {len(body) / 1024:>8.0f}",
                flush=True,
            )


NGINX_CONF = """
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{
    listen 127.0.0.1:{port};
    location /plain/ {{ alias {d}/www/; default_type text/plain; }}
    location /gz/ {{ alias {d}/www/; gzip_static on; default_type text/plain; }}
  }}
}}
"""


def start_nginx(tmp: Path, body: bytes) -> tuple[subprocess.Popen[bytes], int] | None:
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        return None
    d = tmp / "nginx"
    (d / "www").mkdir(parents=True, exist_ok=True)
    for p in (tmp, d, d / "www"):
        p.chmod(0o755)  # nginx's workers run as an unprivileged user
    (d / "tmp").mkdir(exist_ok=True)
    (d / "www" / "metrics").write_bytes(body)
    (d / "www" / "metrics.gz").write_bytes(gzip.compress(body, compresslevel=9))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
    proc = subprocess.Popen([nginx, "-c", str(d / "nginx.conf"), "-p", str(d)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                return None
            time.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--port-file")
    ap.add_argument("--lag-file")
    ap.add_argument("--quick", action="store_true", help="fewer requests and shorter windows")
    ap.add_argument("--render-only", action="store_true", help="section 1 (render CPU) alone")
    ap.add_argument(
        "--every-breakdown", action="store_true", help="render with every breakdown on (nothing switched off)"
    )
    args = ap.parse_args()
    if args.child:
        serve_child(args.child, args.slow, args.port_file, args.lag_file)
        return
    reqs = 200 if args.quick else 1000
    idle = 20 if args.quick else 60
    scrapes_rss = 2000 if args.quick else 10000
    print("== 1. per-poll render CPU per series (us/series; families = samples -> metric families)")
    render_costs((8, 64, 512, 2048), 2 if args.quick else 5, args.every_breakdown)
    if args.render_only:
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lag_file = tmp / "lag"
        print("\n== 2. 512 devices, 5 s polling, real server (child process)")
        proc, port = start_child(512, 0.0, tmp, lag_file)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.request("GET", "/metrics", headers=HEADERS)  # the one variant Prometheus asks for
            plain = gzip.decompress(conn.getresponse().read())
            conn.close()
            ng = start_nginx(tmp, plain)
            rows = []
            for label, p, path in [
                ("xpuwatch", port, "/metrics"),
                *(
                    [("nginx plain", ng[1], "/plain/metrics"), ("nginx gzip_static", ng[1], "/gz/metrics")]
                    if ng
                    else []
                ),
            ]:
                seq = sequential(p, reqs, path)
                rows.append((label, seq))
            for label, seq in rows:
                print(
                    f"{label:>18}: gzip scrape p50 {pct(seq, 50):.2f} ms, p99 {pct(seq, 99):.2f} ms ({reqs} sequential)"
                )
            if not ng:
                print("nginx not installed (apt-get install nginx-light): no comparison")
            else:
                base = next(s for lab, s in rows if lab == "nginx gzip_static")
                print(f"xpuwatch p99 / nginx gzip_static p99 = {pct(rows[0][1], 99) / pct(base, 99):.2f}x")
                ng[0].terminate()
                ng[0].wait(10)
            conc = concurrent(port, reqs, 50)
            print(f"xpuwatch, 50 at a time: p50 {pct(conc, 50):.2f} ms, p99 {pct(conc, 99):.2f} ms")
            rss0 = rss_mib(proc.pid)
            sequential(port, scrapes_rss)
            rss1 = rss_mib(proc.pid)
            print(
                f"RSS {rss0:.1f} MiB -> {rss1:.1f} MiB after {scrapes_rss} scrapes ({rss1 - rss0:+.1f} MiB)"
            )
            worst, p99 = (float(x) for x in lag_file.read_text().split())
            print(f"event-loop lag over the whole run: max {worst:.2f} ms, p99 {p99:.2f} ms")
        finally:
            stop(proc)
        # Idle CPU in a child without the lag ticker: first never scraped (polls only, nothing rendered),
        # then scraped every 15 s like Prometheus (two scrapes first, so the scrape forecast has a gap).
        proc, port = start_child(512, 0.0, tmp)
        try:
            time.sleep(2)
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(idle)
            cpu = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0) * 100
            print(f"CPU, never scraped (polls only, nothing rendered), {idle} s: {cpu:.2f} % of one core")
            sequential(port, 1)
            time.sleep(15)
            sequential(port, 1)
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            end = t0 + max(idle, 45)
            while True:
                time.sleep(15.0)
                sequential(port, 1)
                if time.monotonic() >= end:
                    break
            scraped = (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0) * 100
            print(f"CPU, scraped every 15 s (5 s polls), {max(idle, 45)} s: {scraped:.2f} % of one core")
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
            c0 = cpu_seconds(proc2.pid)
            seq = sequential(port, reqs)
            cpu = cpu_seconds(proc2.pid) - c0
            n = series_count(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
            print(
                f"\n== 3. node-exporter (same machine): {n} series, scrape p50 {pct(seq, 50):.2f} ms, "
                f"p99 {pct(seq, 99):.2f} ms; CPU {cpu * 1e6 / (reqs * n):.2f} us per series per scrape"
            )
        finally:
            stop(proc2)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
