"""Benchmark: the exporter's render cost, its scrape latency curve against nginx serving the same bytes, its
whole-process CPU per scrape, RSS over many scrapes; node-exporter beside it. Prints figures; asserts nothing
(speed is not a test). Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/exporter_scrape.py [--quick] [--sizes 8,64,512,2048,4096]

1. Per-poll render CPU per series (in process, frozen clock), at 8 / 64 / 512 / 2,048 simulated devices,
   of the OpenMetrics body Prometheus negotiates: "render" is what the exporter does per poll (a
   FastEncoder writing the series straight from the samples, SeriesWriter); for comparison, building
   prometheus-client families ("families") and writing them with the prefix-caching FastEncoder ("fam+enc")
   or with prometheus-client's encoder; gzip CPU at levels 1 / 6. ``--render-only`` runs this section alone.
2. The scrape latency curve (``--sizes``): per size, the real server in a child process (5 s polls, as the
   images run it: ``MALLOC_MMAP_THRESHOLD_=262144``) and nginx serving the exporter's own bytes (plain, and
   its exact gzip body through ``gzip_static``), scraped sequentially on keep-alive connections in
   interleaved rounds (exporter plain, nginx plain, exporter gzip, nginx gzip, ...), so machine noise hits
   both alike; the ratios are within one run. Meanwhile a second scraper process scrapes the exporter every
   second, offset in phase (an HA Prometheus pair: scrapes land between a poll and its render).
3. Whole-process CPU per scrape of the child (utime + stime from /proc/<pid>/stat over many scrapes): the
   serving cost with polling effectively off (a 1-hour poll interval: the body stays cached), and per poll
   the simulator's own poll (never scraped) apart from the render + gzip (scraped: each poll renders).
   At Prometheus' 15 s scrapes and 5 s polls a scrape costs one serve plus one render (the forecast).
   Debian's prometheus-node-exporter beside it: whole-process CPU per scrape, the same way.
4. ``--mmap``: at 2,048 devices, plain scrapes of two children, with and without ``MALLOC_MMAP_THRESHOLD_``,
   interleaved with nginx.
5. ``--rss N``: N scrapes at 512 devices paced at 200 a second (RSS printed every 10,000), the images'
   malloc setting.

``--root DIR`` benchmarks the exporter source in DIR instead (e.g. ``git archive`` of an older commit), for
before/after figures from the same script. nginx is a benchmark-only dependency (Debian ``nginx-light``;
sections needing it say so when absent). The machine may be shared: compare figures within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import gzip
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the exporter source benchmarked (--root)
PROM_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
HEADERS = {"Accept": PROM_ACCEPT, "Accept-Encoding": "gzip"}
PLAIN = {"Accept": PROM_ACCEPT, "Accept-Encoding": "identity"}
IMAGE_ENV = {"MALLOC_MMAP_THRESHOLD_": "262144"}  # as deploy/Dockerfile sets it
MODELS = [
    ("nvidia", "NVIDIA A100-SXM4-80GB"),
    ("nvidia", "NVIDIA GeForce RTX 4090"),
    ("amd", "AMD Instinct MI250X"),
    ("huawei", "Ascend910B"),
]


def fleet_yaml(n: int, interval: float = 5.0) -> str:
    lines = ["seed: 1", f"poll_interval: {interval:g}", "devices:"]
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


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33+): every field a size_t."""

    FIELDS = tuple(
        [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    )
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


def mallinfo2() -> dict[str, int] | None:
    """glibc's heap figures for the whole process (all arenas): ``arena`` bytes taken from the system with
    brk/mmap for the arenas, ``hblkhd`` in mmapped chunks, ``uordblks`` in use, ``fordblks`` free inside the
    arenas, ``keepcost`` releasable at the top. None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    info = fn()
    return {name: int(getattr(info, name)) for name in _Mallinfo2.FIELDS}


class MemoryStats:
    """Child mode, with ``--polls-file``: after each poll appends to ``<polls file>.mem`` one line of
    ``polls rss_kib`` and glibc's ``mallinfo2`` fields (``name=bytes``), and, for the polls listed in
    ``snapshots`` (comma-separated, from ``$XPUWATCH_BENCH_SNAPSHOTS``), starts tracemalloc at the first and
    writes a snapshot ``<polls file>.<poll>.snap`` at each (compare them with ``tracemalloc.Snapshot.load``
    and ``compare_to``)."""

    def __init__(self, snapshots: str) -> None:
        self.snapshots = sorted(int(x) for x in snapshots.split(",") if x.strip())

    def after_poll(self, polls: int, polls_file: str) -> None:
        import tracemalloc

        info = mallinfo2() or {}
        fields = " ".join(f"{k}={v}" for k, v in info.items())
        # RSS less the file-backed pages (the interpreter's and libraries' code, which the kernel drops and
        # reads back under memory pressure from other processes): what the exporter itself holds
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        fields += f" anon_kib={status.get('RssAnon', '0 kB').split()[0]}"
        if tracemalloc.is_tracing():
            fields += f" traced={tracemalloc.get_traced_memory()[0]}"
        with open(f"{polls_file}.mem", "a") as f:
            f.write(f"{polls} {int(rss_mib(os.getpid()) * 1024)} {fields}\n")
        if self.snapshots and polls == self.snapshots[0] and not tracemalloc.is_tracing():
            tracemalloc.start(8)
        if polls in self.snapshots:
            tracemalloc.take_snapshot().dump(f"{polls_file}.{polls}.snap")


def serve_child(
    sim_config: str, slow: float, port_file: str, lag_file: str | None = None, polls_file: str | None = None
) -> None:
    sys.path.insert(0, str(ROOT))
    from xpuwatch.exporter import cli
    from xpuwatch.exporter.cli import Clocks, assemble
    from xpuwatch.exporter.poller import PollSettings

    if hasattr(
        cli, "tune_malloc"
    ):  # as ``xpuwatch serve`` does first (sources before issue 36: no such step)
        cli.tune_malloc(os.environ)
    from xpuwatch.exporter.server import Server
    from xpuwatch.exporter.settings import Settings, WebConfig, WebSettings
    from xpuwatch.vendors.command import SubprocessRunner

    clocks = Clocks(time.time, time.monotonic)
    asm = assemble(Settings(), ["sim"], clocks, SubprocessRunner(), None, {"config": sim_config})
    if slow:
        asm.poller.add(SlowBackend(slow), PollSettings(interval=5, timeout=2 * slow))
    server = Server(asm.cache, asm.poller, WebSettings("127.0.0.1:0"), WebConfig(), clocks.wall)
    if polls_file:
        count = [0]
        stats = MemoryStats(os.environ.get("XPUWATCH_BENCH_SNAPSHOTS", ""))

        def counted() -> None:  # after warm(): how many polls completed, for CPU per poll
            count[0] += 1
            Path(polls_file).write_text(str(count[0]))
            stats.after_poll(count[0], polls_file)

        asm.poller.listeners.append(counted)

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
        gc.freeze()  # as exporter.cli._serve does before the first poll, and its switch interval
        sys.setswitchinterval(getattr(cli, "SWITCH_INTERVAL_SECONDS", sys.getswitchinterval()))
        asm.poller.start()
        await asyncio.sleep(0.5)
        tasks = [asyncio.create_task(ticker())] if lag_file else []  # 100 wake-ups a second cost CPU
        await asyncio.Event().wait()
        del tasks

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------------
# measuring


def start_child(
    n: int,
    slow: float,
    tmp: Path,
    lag_file: Path | None = None,
    interval: float = 5.0,
    env: dict[str, str] | None = None,
    polls_file: Path | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """The real server over ``n`` simulated devices in a child process; ``env`` is added to its
    environment (None: the images' ``IMAGE_ENV``). Returns once the first poll landed."""
    cfg = tmp / f"fleet-{n}-{interval:g}.yaml"
    cfg.write_text(fleet_yaml(n, interval))
    port_file = tmp / f"port-{n}-{slow}-{interval:g}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--root", str(ROOT), "--child", str(cfg), "--slow", str(slow)]
        + ["--port-file", str(port_file)]
        + (["--lag-file", str(lag_file)] if lag_file else [])
        + (["--polls-file", str(polls_file)] if polls_file else []),
        env={**os.environ, "PYTHONPATH": str(ROOT), **(IMAGE_ENV if env is None else env)},
    )
    deadline = time.monotonic() + 120
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


def fetch(port: int, headers: dict[str, str], path: str = "/metrics") -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", path, headers=headers)
    body = conn.getresponse().read()
    conn.close()
    return body


def second_scraper(port: int, interval: float, offset: float) -> None:
    """Child mode: scrape the exporter's gzip body every ``interval`` seconds, ``offset`` into each period
    (the other Prometheus of an HA pair), until killed."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    t = time.monotonic() + offset
    while True:
        time.sleep(max(0.0, t - time.monotonic()))
        conn.request("GET", "/metrics", headers=HEADERS)
        conn.getresponse().read()
        t += interval


def start_second_scraper(port: int, interval: float = 1.0, offset: float = 0.5) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, __file__, "--root", str(ROOT), "--scrape-port", str(port)),
            *(f"--scrape-interval={interval:g}", f"--scrape-offset={offset:g}"),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def sequential(
    port: int, n: int, path: str = "/metrics", headers: dict[str, str] | None = None
) -> list[float]:
    """``n`` GETs one after the other on one keep-alive connection; seconds each."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers or HEADERS)
        r = conn.getresponse()
        r.read()
        out.append(time.perf_counter() - t0)
        assert r.status == 200
    conn.close()
    return out


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

    from xpuwatch.exporter.cli import Clocks, assemble
    from xpuwatch.exporter.exposition import FastEncoder, fast_encoder
    from xpuwatch.exporter.selection import Selection
    from xpuwatch.exporter.settings import Settings
    from xpuwatch.vendors.command import SubprocessRunner

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


def start_nginx(tmp: Path, plain: bytes, zipped: bytes) -> tuple[subprocess.Popen[bytes], int] | None:
    """nginx serving ``plain`` at /plain/metrics and, through ``gzip_static``, the exact bytes ``zipped``
    (the exporter's own gzip body) at /gz/metrics to clients that accept gzip. None without nginx."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        return None
    d = tmp / f"nginx-{time.monotonic_ns()}"
    (d / "www").mkdir(parents=True, exist_ok=True)
    for p in (tmp, d, d / "www"):
        p.chmod(0o755)  # nginx's workers run as an unprivileged user
    (d / "tmp").mkdir(exist_ok=True)
    (d / "www" / "metrics").write_bytes(plain)
    (d / "www" / "metrics.gz").write_bytes(zipped)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
    proc = subprocess.Popen([nginx, "-c", str(d / "nginx.conf"), "-p", str(d)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                return None
            time.sleep(0.05)
    assert fetch(port, HEADERS, "/gz/metrics") == zipped and fetch(port, PLAIN, "/plain/metrics") == plain
    return proc, port


def interleaved(
    targets: list[tuple[str, int, str, dict[str, str]]], counts: dict[str, int], rounds: int
) -> dict[str, list[float]]:
    """Each target (label, port, path, headers) scraped ``counts[label]`` times in all, split over
    ``rounds`` rounds that take the targets in turn; seconds per scrape, per label."""
    out: dict[str, list[float]] = {label: [] for label, *_ in targets}
    for _ in range(rounds):
        for label, port, path, headers in targets:
            out[label] += sequential(port, max(1, counts[label] // rounds), path, headers)
    return out


def latency_curve(sizes: list[int], tmp: Path, quick: bool) -> None:
    """Section 2: p50/p99 plain and gzip, exporter vs nginx, per size, with an HA pair's second scraper."""
    print(
        f"{'devices':>7} {'series':>7} {'plain KiB':>9} {'gzip KiB':>8} | {'plain p50/p99 ms':>17} "
        f"{'nginx':>13} {'x p50/p99':>11} | {'gzip p50/p99 ms':>15} {'nginx':>13} {'x p50/p99':>11} | lag max"
    )
    for n in sizes:
        lag_file = tmp / f"lag-{n}"
        proc, port = start_child(n, 0.0, tmp, lag_file)
        scraper = None
        ng = None
        try:
            zipped = fetch(port, HEADERS)  # the variants Prometheus asks for, now kept warm
            plain = fetch(port, PLAIN)
            ng = start_nginx(tmp, plain, zipped)
            if ng is None:
                print("nginx not installed (apt-get install nginx-light): no latency curve")
                return
            scraper = start_second_scraper(port)
            plain_n = max(100, min(1000, int(4e9 / len(plain))))
            if quick:
                plain_n = max(40, plain_n // 5)
            gzip_n = 200 if quick else 1000
            targets = [
                ("x plain", port, "/metrics", PLAIN),
                ("n plain", ng[1], "/plain/metrics", PLAIN),
                ("x gzip", port, "/metrics", HEADERS),
                ("n gzip", ng[1], "/gz/metrics", HEADERS),
            ]
            counts = {"x plain": plain_n, "n plain": plain_n, "x gzip": gzip_n, "n gzip": gzip_n}
            lat = interleaved(targets, counts, 20)
        finally:
            if scraper is not None:
                stop(scraper)
            if ng is not None:
                stop(ng[0])
            stop(proc)

        def cell(label: str, lat: dict[str, list[float]] = lat) -> str:
            return f"{pct(lat[label], 50):.2f}/{pct(lat[label], 99):.2f}"

        def ratio(x: str, ngx: str, lat: dict[str, list[float]] = lat) -> str:
            p50 = pct(lat[x], 50) / pct(lat[ngx], 50)
            return f"{p50:.2f}/{pct(lat[x], 99) / pct(lat[ngx], 99):.2f}"

        worst = lag_file.read_text().split()[0] if lag_file.exists() else "?"
        print(
            f"{n:>7} {series_count(plain):>7} {len(plain) / 1024:>9.0f} {len(zipped) / 1024:>8.0f} | "
            f"{cell('x plain'):>17} {cell('n plain'):>13} {ratio('x plain', 'n plain'):>11} | "
            f"{cell('x gzip'):>15} {cell('n gzip'):>13} {ratio('x gzip', 'n gzip'):>11} | {worst} ms",
            flush=True,
        )


def wait_polls(polls_file: Path, at_least: int) -> int:
    while True:
        text = polls_file.read_text() if polls_file.exists() else ""
        if text and int(text) >= at_least:
            return int(text)
        time.sleep(0.02)


def cpu_curve(sizes: list[int], tmp: Path, quick: bool) -> None:
    """Section 3: whole-process CPU of the child per scrape (serving) and per poll (simulator apart from
    render + gzip), and node-exporter's per scrape."""
    window = 5 if quick else 10
    print(
        f"{'devices':>7} {'series':>7} | {'serve gzip us':>13} {'serve plain us':>14} | "
        f"{'sim poll ms':>11} {'render+gzip ms':>14} | {'per scrape ms':>13} {'us/series':>9} | "
        "gzip p50/p99 ms, no polls"
    )
    for n in sizes:
        # Serving alone: one poll, then the body stays cached (next poll in an hour).
        proc, port = start_child(n, 0.0, tmp, interval=3600)
        try:
            body = fetch(port, PLAIN)
            fetch(port, HEADERS)
            reqs = max(50, min(2000, int(2e9 / len(body))))
            serve = {}
            quiet: list[float] = []  # gzip latency with no poll or render running (compare section 2)
            for label, headers in (("gzip", HEADERS), ("plain", PLAIN)):
                c0 = cpu_seconds(proc.pid)
                lat = sequential(port, reqs, "/metrics", headers)
                serve[label] = (cpu_seconds(proc.pid) - c0) / reqs * 1e6
                quiet = quiet or lat
        finally:
            stop(proc)
        # Per poll, 1 s polls: never scraped (the simulator's poll alone), then scraped (poll + render).
        polls_file = tmp / f"polls-{n}-{time.monotonic_ns()}"
        proc, port = start_child(n, 0.0, tmp, interval=1, polls_file=polls_file)
        try:
            per_poll = {}
            for label in ("idle", "scraped"):
                if label == "scraped":
                    fetch(port, HEADERS)  # Prometheus' variant: from now on every poll renders it
                k0 = wait_polls(polls_file, 1)
                c0 = cpu_seconds(proc.pid)
                time.sleep(window)
                k1 = int(polls_file.read_text())
                c1 = cpu_seconds(proc.pid)
                per_poll[label] = (c1 - c0) / max(1, k1 - k0) * 1000
        finally:
            stop(proc)
        series = series_count(body)
        render = per_poll["scraped"] - per_poll["idle"]
        scrape_ms = serve["gzip"] / 1000 + render  # 15 s scrapes, 5 s polls: one render per scrape
        print(
            f"{n:>7} {series:>7} | {serve['gzip']:>13.0f} {serve['plain']:>14.0f} | {per_poll['idle']:>11.1f} "
            f"{render:>14.1f} | {scrape_ms:>13.2f} {scrape_ms * 1000 / series:>9.2f} | "
            f"{pct(quiet, 50):.2f}/{pct(quiet, 99):.2f}",
            flush=True,
        )
    ne = shutil.which("prometheus-node-exporter")
    if not ne:
        print("prometheus-node-exporter not installed: no comparison")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc2 = subprocess.Popen(
        [ne, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                body = fetch(port, HEADERS)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        reqs = 200 if quick else 1000
        c0 = cpu_seconds(proc2.pid)
        seq = sequential(port, reqs)
        cpu = (cpu_seconds(proc2.pid) - c0) / reqs
        n = series_count(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
        print(
            f"node-exporter (whole process, gzip): {n} series, {cpu * 1e3:.2f} ms CPU per scrape "
            f"({cpu * 1e6 / n:.2f} us per series), scrape p50 {pct(seq, 50):.2f} ms, p99 {pct(seq, 99):.2f} ms"
        )
    finally:
        stop(proc2)  # type: ignore[arg-type]


def mmap_compare(tmp: Path, quick: bool, n: int = 2048) -> None:
    """Section 4: plain scrapes with and without the images' MALLOC_MMAP_THRESHOLD_, against nginx."""
    with_env, p_with = start_child(n, 0.0, tmp)
    without, p_without = start_child(n, 0.0, tmp, env={})
    ng = None
    try:
        plain = fetch(p_with, PLAIN)
        ng = start_nginx(tmp, plain, gzip.compress(plain, compresslevel=1))
        if ng is None:
            print("nginx not installed: no comparison")
            return
        reqs = 100 if quick else 400
        lat = interleaved(
            [
                ("MALLOC_MMAP_THRESHOLD_=262144", p_with, "/metrics", PLAIN),
                ("unset", p_without, "/metrics", PLAIN),
                ("nginx", ng[1], "/plain/metrics", PLAIN),
            ],
            {"MALLOC_MMAP_THRESHOLD_=262144": reqs, "unset": reqs, "nginx": reqs},
            20,
        )
    finally:
        for proc in (with_env, without) + ((ng[0],) if ng else ()):
            stop(proc)
    base = pct(lat["nginx"], 50)
    for label, xs in lat.items():
        print(
            f"{n} devices, plain ({len(plain) / 2**20:.1f} MiB), {label:>30}: p50 {pct(xs, 50):.2f} ms "
            f"({pct(xs, 50) / base:.2f}x nginx), p99 {pct(xs, 99):.2f} ms"
        )


def rss_run(tmp: Path, scrapes: int, interval: float, n: int = 512, rate: float = 200.0) -> None:
    """Section 5: RSS over ``scrapes`` gzip scrapes paced at ``rate`` a second, polls every ``interval`` s
    (3600: the scrape path alone, the body cached)."""
    proc, port = start_child(n, 0.0, tmp, interval=interval)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        print(
            f"{n} devices, {rate:g} scrapes/s, {interval:g} s polls, {IMAGE_ENV}: "
            f"RSS {rss_mib(proc.pid):.1f} MiB at 0",
            flush=True,
        )
        t = time.monotonic()
        for i in range(1, scrapes + 1):
            time.sleep(max(0.0, t - time.monotonic()))
            t += 1 / rate
            conn.request("GET", "/metrics", headers=HEADERS)
            conn.getresponse().read()
            if i % 10000 == 0 or i == 1000:  # after 1,000: every cache filled, the baseline
                print(f"  RSS {rss_mib(proc.pid):.1f} MiB after {i} scrapes", flush=True)
        conn.close()
    finally:
        stop(proc)


GZIP_GOALS = {2048: 2.0, 4096: 3.0}
"""Issue 36: the exporter's gzip p99 at most this many times nginx ``gzip_static``'s, in 3 of 3 runs."""


def _child_for(root: Path, n: int, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``start_child`` of the exporter source in ``root`` (the one benchmarked, or a baseline)."""
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return start_child(n, 0.0, tmp)
    finally:
        ROOT = saved


def gzip_runs(sizes: list[int], runs: int, tmp: Path, quick: bool, baseline: Path | None) -> None:
    """Section 7: gzip p99 against nginx ``gzip_static`` serving the same bytes, ``runs`` runs per size,
    each with fresh processes: the exporter child (5 s polls, the images' malloc setting) with an HA pair's
    second scraper (every second, half a second out of phase, as section 2), nginx, and with ``baseline``
    (another exporter source, e.g. ``git archive`` of the commit before) a second child with its own second
    scraper; 1,000 gzip scrapes of each (200 with ``--quick``) on keep-alive connections in 20 interleaved
    rounds, so load on the machine hits them alike. Prints each run and whether the goal (``GZIP_GOALS``)
    held in every run."""
    gzip_n = 200 if quick else 1000
    print(
        f"{'devices':>7} {'run':>3} | {'x gzip p50/p99 ms':>17} {'nginx p50/p99 ms':>16} {'x p99/nginx':>11}"
        + (f" | {'baseline p50/p99 ms':>19} {'b p99/nginx':>11}" if baseline else "")
    )
    for n in sizes:
        goal = GZIP_GOALS.get(n)
        ratios: dict[str, list[float]] = {"x": [], "b": []}
        for run in range(1, runs + 1):
            procs: list[subprocess.Popen[bytes]] = []
            try:
                proc, port = start_child(n, 0.0, tmp)
                procs.append(proc)
                targets = [("x", port, "/metrics", HEADERS)]
                if baseline is not None:
                    bproc, bport = _child_for(baseline, n, tmp)
                    procs.append(bproc)
                    targets.append(("b", bport, "/metrics", HEADERS))
                zipped = fetch(port, HEADERS)
                ng = start_nginx(tmp, gzip.decompress(zipped), zipped)
                if ng is None:
                    print("nginx not installed (apt-get install nginx-light): no gzip runs")
                    return
                procs.append(ng[0])
                targets.insert(1, ("n", ng[1], "/gz/metrics", HEADERS))
                procs += [start_second_scraper(p) for label, p, *_ in targets if label != "n"]
                lat = interleaved(targets, {label: gzip_n for label, *_ in targets}, 20)
            finally:
                for p in reversed(procs):
                    stop(p)
            n99 = pct(lat["n"], 99)
            row = (
                f"{n:>7} {run:>3} | {pct(lat['x'], 50):>8.2f}/{pct(lat['x'], 99):<8.2f} "
                f"{pct(lat['n'], 50):>7.2f}/{n99:<8.2f} {pct(lat['x'], 99) / n99:>11.2f}"
            )
            ratios["x"].append(pct(lat["x"], 99) / n99)
            if baseline is not None:
                ratios["b"].append(pct(lat["b"], 99) / n99)
                row += f" | {pct(lat['b'], 50):>9.2f}/{pct(lat['b'], 99):<9.2f} {ratios['b'][-1]:>11.2f}"
            print(row, flush=True)
        for label, name in (("x", "exporter"), ("b", "baseline")):
            xs = ratios[label]
            if not xs:
                continue
            met = f"; goal <= {goal:g}x met in {sum(r <= goal for r in xs)} of {len(xs)}" if goal else ""
            print(f"{n:>7} {name}: gzip p99 / nginx {min(xs):.2f}-{max(xs):.2f}x over {len(xs)} runs{met}")


def start_node_exporter() -> tuple[subprocess.Popen[bytes], int] | None:
    """Debian's prometheus-node-exporter on loopback with its default collectors; None when absent."""
    ne = shutil.which("prometheus-node-exporter")
    if not ne:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [ne, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            fetch(port, HEADERS)
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                stop(proc)
                raise
            time.sleep(0.1)


def _series_of(port: int) -> int:
    body = fetch(port, HEADERS)
    return series_count(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)


def cpu_alike(sizes: list[int], tmp: Path, quick: bool, poll: float = 1.0) -> None:
    """Section 8: CPU per series against node_exporter, measured alike (issue 36), both processes whole
    (utime + stime from /proc), side by side in the same window so that load hits both:

    * **with the poll**: the exporter polling every ``poll`` s and node_exporter, each scraped (gzip,
      OpenMetrics) every ``3 * poll`` s by one scraper (Prometheus' 15 s over the exporter's 5 s polls,
      time scaled by ``poll / 5``: per scrape the same three polls and one render); node_exporter collects
      at each scrape, which is its poll. A third child, never scraped, gives the simulator's own share
      (a real backend's is its vendor library or tool).
    * **serving alone**: the exporter with polls off (one poll, then 1 h: the body cached) and
      node_exporter, each scraped back to back; node_exporter still collects at every scrape (it has no
      other mode), so its figure is its whole cost again."""
    ne = start_node_exporter()
    if ne is None:
        print("prometheus-node-exporter not installed: no comparison")
        return
    window = 30.0 if quick else 120.0
    try:
        ne_series = _series_of(ne[1])
        print(
            f"{'devices':>7} {'series':>7} | with the poll, per scrape: {'exporter ms':>11} {'sim ms':>7} "
            f"{'us/series':>9} {'w/o sim':>7} | {'node_exp ms':>11} {'us/series':>9} | {'ratio':>5} "
            f"{'w/o sim':>7} | serving alone: {'exporter us/series':>18} {'node_exp':>8} {'ratio':>5}"
        )
        for n in sizes:
            polls_file = tmp / f"alike-{n}-{time.monotonic_ns()}"
            proc, port = start_child(n, 0.0, tmp, interval=poll, polls_file=polls_file)
            idle, _ = start_child(n, 0.0, tmp, interval=poll)
            try:
                series = _series_of(port)
                wait_polls(polls_file, 3)
                c0 = {p.pid: cpu_seconds(p.pid) for p in (proc, idle, ne[0])}
                t0 = time.monotonic()
                scrapes = 0
                while time.monotonic() - t0 < window:
                    fetch(port, HEADERS)
                    fetch(ne[1], HEADERS)
                    scrapes += 1
                    time.sleep(max(0.0, t0 + scrapes * 3 * poll - time.monotonic()))
                x = (cpu_seconds(proc.pid) - c0[proc.pid]) / scrapes
                sim = (cpu_seconds(idle.pid) - c0[idle.pid]) / scrapes
                node = (cpu_seconds(ne[0].pid) - c0[ne[0].pid]) / scrapes
            finally:
                stop(idle)
                stop(proc)
            proc, port = start_child(n, 0.0, tmp, interval=3600)
            try:
                fetch(port, HEADERS)
                reqs = 200 if quick else 1000
                c0 = {p.pid: cpu_seconds(p.pid) for p in (proc, ne[0])}
                sequential(port, reqs)
                serve = (cpu_seconds(proc.pid) - c0[proc.pid]) / reqs
                sequential(ne[1], reqs // 5)
                ne_serve = (cpu_seconds(ne[0].pid) - c0[ne[0].pid]) / (reqs // 5)
            finally:
                stop(proc)
            per = x / series * 1e6
            per_wo = (x - sim) / series * 1e6
            ne_per = node / ne_series * 1e6
            print(
                f"{n:>7} {series:>7} | {'':>26} {x * 1e3:>11.1f} {sim * 1e3:>7.1f} {per:>9.2f} {per_wo:>7.2f} | "
                f"{node * 1e3:>11.2f} {ne_per:>9.2f} | {per / ne_per:>5.2f} {per_wo / ne_per:>7.2f} | "
                f"{'':>15} {serve / series * 1e6:>18.3f} {ne_serve / ne_series * 1e6:>8.2f} "
                f"{serve / series / (ne_serve / ne_series):>5.3f}",
                flush=True,
            )
        print(
            f"node_exporter: {ne_series} series; {scrapes} scrapes in {window:g} s per size (with the poll)"
        )
    finally:
        stop(ne[0])


MALLOC_SETTINGS = {"default": {}, "mmap": IMAGE_ENV}


def rss_polls(
    tmp: Path, n: int, polls: int, interval: float, malloc: str, out: Path, settle: int, snapshots: str = ""
) -> None:
    """Section 6: RSS after every poll for ``polls`` polls at ``n`` devices, polls every ``interval`` s and
    an HA pair of scrapers (gzip, OpenMetrics) each every 3 polls, half a period apart (Prometheus' 15 s
    scrapes over 5 s polls: one render per scrape). ``malloc``: ``default`` (glibc as it comes) or ``mmap``
    (the images' ``MALLOC_MMAP_THRESHOLD_=262144``). Writes ``out`` (``poll seconds rss_kib`` and glibc's
    mallinfo2 fields, one line per poll) and prints the growth after ``settle`` polls (120: the first 10
    minutes at 5 s)."""
    polls_file = tmp / f"rss-{n}-{malloc}-{time.monotonic_ns()}"
    env = dict(MALLOC_SETTINGS[malloc])
    if snapshots:
        env["XPUWATCH_BENCH_SNAPSHOTS"] = snapshots
    proc, port = start_child(n, 0.0, tmp, interval=interval, env=env, polls_file=polls_file)
    scrape = 3 * interval
    scrapers = [
        start_second_scraper(port, scrape, 0.25 * interval),
        start_second_scraper(port, scrape, 1.75 * interval),
    ]
    mem = Path(f"{polls_file}.mem")
    t0 = time.monotonic()
    done = 0
    rows: list[tuple[int, int]] = []
    anon: list[tuple[int, int]] = []
    try:
        with out.open("w") as f:
            f.write(
                f"# {n} devices, {interval:g} s polls, HA pair scraping every {scrape:g} s, malloc {malloc}\n"
            )
            f.write("# poll seconds rss_kib mallinfo2...\n")
            while done < polls:
                if proc.poll() is not None:
                    raise RuntimeError(f"exporter child exited {proc.returncode}")
                lines = mem.read_text().splitlines() if mem.exists() else []
                for line in lines[done:]:
                    poll, rss, *rest = line.split()
                    rows.append((int(poll), int(rss)))
                    anon.extend((int(poll), int(x.split("=")[1])) for x in rest if x.startswith("anon_kib="))
                    f.write(f"{poll} {time.monotonic() - t0:.1f} {rss} {' '.join(rest)}\n")
                done = max(done, len(lines))
                f.flush()
                time.sleep(min(1.0, interval / 2))
    finally:
        for p in (*scrapers, proc):
            stop(p)
    print(rss_summary(rows, settle, f"{n} devices, malloc {malloc}") + f"; curve in {out}", flush=True)
    if anon:
        print(rss_summary(anon, settle, f"{n} devices, malloc {malloc}, anonymous (RssAnon)"), flush=True)


def rss_summary(rows: list[tuple[int, int]], settle: int, what: str) -> str:
    """Growth after poll ``settle`` from (poll, RSS KiB) rows: the median of the 50 polls from ``settle`` on
    against the median of the last 50 (a single sample rises and falls with the bodies alive at that
    instant: a scrape still writing the previous one, a render under way), and the most seen after it."""
    after = [(k, r) for k, r in rows if k >= settle] or rows
    first = statistics.median(r for _, r in after[:50]) / 1024
    last = statistics.median(r for _, r in after[-50:]) / 1024
    most = max(r for _, r in after) / 1024
    return (
        f"{what}: RSS {rows[0][1] / 1024:.1f} MiB after poll {rows[0][0]}; median {first:.1f} MiB over polls"
        f" {after[0][0]}-{after[min(49, len(after) - 1)][0]}, {last:.1f} MiB over the last 50 (to poll"
        f" {rows[-1][0]}): growth {last - first:+.2f} MiB, most {most:.1f} MiB"
    )


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--port-file")
    ap.add_argument("--lag-file")
    ap.add_argument("--polls-file")
    ap.add_argument("--scrape-port", type=int, help="child mode: the HA pair's second scraper")
    ap.add_argument("--scrape-interval", type=float, default=1.0, help="child mode: its scrape interval (s)")
    ap.add_argument("--scrape-offset", type=float, default=0.5, help="child mode: its phase (s)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the exporter source to benchmark")
    ap.add_argument("--quick", action="store_true", help="fewer requests and shorter windows")
    ap.add_argument("--render-only", action="store_true", help="section 1 (render CPU) alone")
    ap.add_argument("--sizes", default="8,64,512,2048,4096", help="device counts for sections 2 and 3")
    ap.add_argument("--skip", default="", help="sections to skip, e.g. 1,3")
    ap.add_argument("--mmap", action="store_true", help="section 4 (malloc setting at 2,048 devices)")
    ap.add_argument("--rss", type=int, default=0, help="section 5: this many paced scrapes (e.g. 50000)")
    ap.add_argument("--rss-poll-interval", type=float, default=5.0, help="sections 5/6: poll interval (s)")
    ap.add_argument("--rss-polls", type=int, default=0, help="section 6: RSS over this many polls (1500)")
    ap.add_argument("--rss-malloc", default="default,mmap", help="section 6: default and/or mmap (images)")
    ap.add_argument("--rss-settle", type=int, default=120, help="section 6: growth counted after this poll")
    ap.add_argument("--rss-out", type=Path, default=Path("/tmp"), help="section 6: folder of the curves")
    ap.add_argument(
        "--cpu-alike", action="store_true", help="section 8: CPU per series vs node_exporter, alike"
    )
    ap.add_argument("--gzip-runs", type=int, default=0, help="section 7: gzip p99 vs nginx, this many runs")
    ap.add_argument("--baseline-root", type=Path, help="section 7: another exporter source, interleaved")
    ap.add_argument("--rss-snapshots", default="", help="section 6: tracemalloc snapshots at these polls")
    ap.add_argument(
        "--every-breakdown", action="store_true", help="render with every breakdown on (nothing switched off)"
    )
    args = ap.parse_args()
    ROOT = args.root.resolve()
    if args.child:
        serve_child(args.child, args.slow, args.port_file, args.lag_file, args.polls_file)
        return
    if args.scrape_port:
        second_scraper(args.scrape_port, args.scrape_interval, args.scrape_offset)
        return
    skip = set(args.skip.split(","))
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"exporter source: {ROOT}")
    if "1" not in skip:
        print("== 1. per-poll render CPU per series (us/series; families = samples -> metric families)")
        render_costs((8, 64, 512, 2048), 2 if args.quick else 5, args.every_breakdown)
    if args.render_only:
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "2" not in skip:
            print(
                "\n== 2. scrape latency (ms), exporter (x) vs nginx serving its bytes, interleaved; HA pair"
            )
            latency_curve(sizes, tmp, args.quick)
        if "3" not in skip:
            print("\n== 3. whole-process CPU (serve: per scrape, body cached; sim/render: per poll)")
            cpu_curve(sizes, tmp, args.quick)
        if args.mmap:
            print("\n== 4. plain scrapes with and without the images' malloc setting, interleaved")
            mmap_compare(tmp, args.quick)
        if args.rss:
            print("\n== 5. RSS over paced scrapes")
            rss_run(tmp, args.rss, args.rss_poll_interval)
        if args.cpu_alike:
            print(
                "\n== 8. CPU per series vs node_exporter, whole processes side by side (with the poll; serving)"
            )
            cpu_alike(sizes, tmp, args.quick)
        if args.gzip_runs:
            print(
                f"\n== 7. gzip p99 vs nginx gzip_static, {args.gzip_runs} runs per size, interleaved; HA pair"
            )
            baseline = args.baseline_root.resolve() if args.baseline_root else None
            gzip_runs(sizes, args.gzip_runs, tmp, args.quick, baseline)
        if args.rss_polls:
            print("\n== 6. RSS over polls (HA pair scraping every 3 polls)")
            for n in sizes:
                for malloc in args.rss_malloc.split(","):
                    out = args.rss_out / f"exporter-rss-{n}-{malloc}.txt"
                    rss_polls(
                        tmp, n, args.rss_polls, args.rss_poll_interval, malloc, out, args.rss_settle,
                        args.rss_snapshots,
                    )  # fmt: skip


if __name__ == "__main__":
    main()
