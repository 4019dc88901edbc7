"""Benchmark: `xpuwatch report` over 7 days x 64 devices in a real Prometheus (backfilled synthetic week).

Prints the time to write and backfill the history (not the report's cost), then the report's query time
(Prometheus), figure time (Python: answers -> figures, chargeback, comparison) and render time (matplotlib,
HTML), and the HTML size. ``--compare``: the history changes halfway and the report compares the two halves
(``--range D/2 --compare D/2``). Needs Debian's prometheus (promtool). Run on demand:

    python benchmarks/report_time.py [--devices 64] [--days 7] [--step 300] [--compare]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from alerts.spec import load_spec
from report import history
from report.baseline import Window, collect, figures
from report.chargeback import by_team
from report.compare import compare
from report.prom import Prometheus
from report.render import html


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=300)
    ap.add_argument("--compare", action="store_true", help="change halfway; compare the two halves")
    a = ap.parse_args()
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "needs Debian's prometheus"
    end = int(time.time()) // a.step * a.step
    seconds = a.days * 86400
    change = end - seconds // 2 if a.compare else None
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        t0 = time.perf_counter()
        with (tmp / "week.om").open("w") as f:
            for line in history.openmetrics(a.devices, end - seconds + a.step, end, a.step, change):
                f.write(line + "\n")
        t1 = time.perf_counter()
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "week.om"), str(tmp / "data")],
            check=True,
            capture_output=True,
        )
        t2 = time.perf_counter()
        (tmp / "p.yml").write_text("global: {}\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'p.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=30d",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"{url}/-/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
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
            q0 = time.perf_counter()
            answers = [collect(Prometheus(url, timeout=600), spec, w) for w in windows]
            q1 = time.perf_counter()
            bs = [figures(ans, spec, w) for ans, w in zip(answers, windows, strict=True)]
            b = bs[-1]
            cmp = compare(bs[0], b) if a.compare else None
            by_team(b.usage)
            qf = time.perf_counter()
            page = html(b, time.time(), cmp=cmp)
            q2 = time.perf_counter()
        finally:
            proc.terminate()
            proc.wait()
    size = (tmp_ and len(page)) or 0
    print(
        f"history: {a.devices} devices x {a.days} d every {a.step}s: write {t1 - t0:.1f}s, backfill {t2 - t1:.1f}s"
    )
    print(
        f"report: queries {q1 - q0:.2f}s, figures (Python) {qf - q1:.2f}s, render {q2 - qf:.2f}s, "
        f"total {q2 - q0:.2f}s, HTML {size / 1024:.0f} KiB"
    )
    print(f"headline: {cmp.headline if cmp is not None else b.headline}")


if __name__ == "__main__":
    main()
