"""Benchmark: `xpuwatch report` over 7 days x 64 devices in a real Prometheus (backfilled synthetic week), or
in VictoriaMetrics (``--victoriametrics``: the history streamed into its /api/v1/import/prometheus).

Prints the time to write and load the history (not the report's cost), then the report's query time
(server), figure time (Python: answers -> figures, chargeback, comparison) and render time (matplotlib,
HTML), and the HTML size. ``--compare``: the history changes halfway and the report compares the two halves
(``--range D/2 --compare D/2``). ``--concurrency N``: queries in flight (default 4, as the report);
``--per-query``: also run the queries one at a time and print each one's time and series, slowest first.
Needs Debian's prometheus (promtool) or victoria-metrics. Run on demand:

    python benchmarks/report_time.py [--devices 64] [--days 7] [--step 300] [--compare]
    python benchmarks/report_time.py --victoriametrics --devices 4096 --days 1 --per-query
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from xpuwatch.alerts.promapi import Prometheus
from xpuwatch.alerts.spec import Spec, load_spec
from xpuwatch.report import history
from xpuwatch.report.baseline import Window, collect, figures, requests
from xpuwatch.report.chargeback import by_team
from xpuwatch.report.compare import compare
from xpuwatch.report.render import html


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            assert proc.poll() is None, "the server exited"
            time.sleep(0.2)
    raise SystemExit(f"{url} not ready")


@contextlib.contextmanager
def prometheus(tmp: Path, lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(URL, what loading took) of Debian's prometheus serving ``lines`` backfilled by promtool."""
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "needs Debian's prometheus"
    t0 = time.perf_counter()
    with (tmp / "history.om").open("w") as f:
        for line in lines:
            f.write(line + "\n")
    t1 = time.perf_counter()
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "history.om"), str(tmp / "data")],
        check=True,
        capture_output=True,
    )
    t2 = time.perf_counter()
    (tmp / "p.yml").write_text("global: {}\n")
    port = _port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'p.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
            "--query.timeout=10m",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(f"{url}/-/ready", proc)
        yield url, f"Prometheus: write {t1 - t0:.1f}s, backfill {t2 - t1:.1f}s"
    finally:
        proc.terminate()
        proc.wait()


@contextlib.contextmanager
def victoriametrics(tmp: Path, lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(URL, what loading took) of Debian's victoria-metrics holding ``lines``, imported as Prometheus text
    with millisecond timestamps in batches of 200,000 samples."""
    binary = shutil.which("victoria-metrics")
    assert binary, "needs Debian's victoria-metrics"
    port = _port()
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={tmp / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.disableCache",  # each run pays the whole query, as the first report of a week would
            "-search.maxStalenessInterval=5m",  # Prometheus' lookback (tests/report/test_victoriametrics.py)
            "-search.maxQueryDuration=10m",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(f"{url}/health", proc)
        t0 = time.perf_counter()
        batch: list[str] = []

        def send() -> None:
            data = ("\n".join(batch) + "\n").encode()
            req = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=data, method="POST")
            urllib.request.urlopen(req, timeout=600).read()
            batch.clear()

        for line in lines:
            if not line.startswith("#"):
                sample, _, ts = line.rpartition(" ")
                batch.append(f"{sample} {int(ts) * 1000}")
                if len(batch) >= 200_000:
                    send()
        if batch:
            send()
        urllib.request.urlopen(f"{url}/internal/force_flush", timeout=60).read()
        yield url, f"VictoriaMetrics: write and import {time.perf_counter() - t0:.1f}s"
    finally:
        proc.terminate()
        proc.wait()


def per_query(prom: Prometheus, spec: Spec, w: Window) -> None:
    """Each query alone, one after another: its time and answer's series, slowest first."""
    rows = []
    for r in requests(spec, w):
        t0 = time.perf_counter()
        got = prom.gather([r], 1)[r.key]
        rows.append((time.perf_counter() - t0, r.key, len(got)))
    for took, key, n in sorted(rows, reverse=True):
        print(f"  {key:20s} {took:7.2f}s {n:7d} series")
    print(f"  {'one at a time':20s} {sum(t for t, _, _ in rows):7.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=300)
    ap.add_argument("--compare", action="store_true", help="change halfway; compare the two halves")
    ap.add_argument("--victoriametrics", action="store_true", help="VictoriaMetrics instead of Prometheus")
    ap.add_argument("--concurrency", type=int, default=4, help="queries in flight (default 4)")
    ap.add_argument("--per-query", action="store_true", help="also time each query alone")
    a = ap.parse_args()
    end = int(time.time()) // a.step * a.step
    seconds = a.days * 86400
    change = end - seconds // 2 if a.compare else None
    serve = victoriametrics if a.victoriametrics else prometheus
    with tempfile.TemporaryDirectory() as tmp_:
        lines = history.openmetrics(a.devices, end - seconds + a.step, end, a.step, change)
        with serve(Path(tmp_), lines) as (url, loaded):
            spec = load_spec()
            half = seconds // 2
            windows = (
                [
                    Window(end=end - half, seconds=half, step=a.step),
                    Window(end=end, seconds=half, step=a.step),
                ]
                if a.compare
                else [Window(end=end, seconds=seconds, step=a.step)]
            )
            prom = Prometheus(url, timeout=600)
            q0 = time.perf_counter()
            answers = [collect(prom, spec, w, concurrency=a.concurrency) for w in windows]
            q1 = time.perf_counter()
            bs = [figures(ans, spec, w) for ans, w in zip(answers, windows, strict=True)]
            b = bs[-1]
            cmp = compare(bs[0], b) if a.compare else None
            by_team(b.usage)
            qf = time.perf_counter()
            page = html(b, time.time(), cmp=cmp)
            q2 = time.perf_counter()
            print(f"history: {a.devices} devices x {a.days} d every {a.step}s; {loaded}")
            print(
                f"report: queries {q1 - q0:.2f}s ({a.concurrency} in flight), figures (Python) {qf - q1:.2f}s, "
                f"render {q2 - qf:.2f}s, total {q2 - q0:.2f}s, HTML {len(page) / 1024:.0f} KiB"
            )
            print(f"headline: {cmp.headline if cmp is not None else b.headline}")
            if a.per_query:
                for w in windows:
                    per_query(prom, spec, w)


if __name__ == "__main__":
    main()
