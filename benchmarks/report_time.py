"""Benchmark: `xpuwatch report` over 7 days x 64 devices in a real Prometheus (backfilled synthetic week).

Prints the time to write and backfill the history (not the report's cost), then the report's query time,
figure and render time, and the HTML size. Needs Debian's prometheus (promtool). Run on demand:

    python benchmarks/report_time.py [--devices 64] [--days 7] [--step 300]
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
from report.prom import Prometheus
from report.render import html


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--step", type=int, default=300)
    a = ap.parse_args()
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "needs Debian's prometheus"
    end = int(time.time()) // a.step * a.step
    seconds = a.days * 86400
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        t0 = time.perf_counter()
        with (tmp / "week.om").open("w") as f:
            for line in history.openmetrics(a.devices, end - seconds + a.step, end, a.step):
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
            w = Window(end=end, seconds=seconds, step=a.step)
            q0 = time.perf_counter()
            answers = collect(Prometheus(url, timeout=600), spec, w)
            q1 = time.perf_counter()
            b = figures(answers, spec, w)
            page = html(b, time.time())
            q2 = time.perf_counter()
        finally:
            proc.terminate()
            proc.wait()
    size = (tmp_ and len(page)) or 0
    print(
        f"history: {a.devices} devices x {a.days} d every {a.step}s: write {t1 - t0:.1f}s, backfill {t2 - t1:.1f}s"
    )
    print(
        f"report: queries {q1 - q0:.2f}s, figures+render {q2 - q1:.2f}s, total {q2 - q0:.2f}s, HTML {size / 1024:.0f} KiB"
    )
    print(f"headline: {b.headline}")


if __name__ == "__main__":
    main()
